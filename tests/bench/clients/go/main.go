// Benchmark: the Go client library's natural use (a handler that acks each message)
// against franz-go consuming the same records in a group with manual commits.
//
// For tests/bench/ordered.py: -topic reuses a topic that holds the records, -ordering starts
// ksidecar with group.ordering, -order-log writes each handled record (partition, offset,
// key or \N, chain; tab-separated, in handling order) after the run, -json prints each
// result as a JSON line.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	ksidecar "ksidecar/clients/go"
)

var (
	bootstrap  = flag.String("bootstrap", os.Getenv("KSIDECAR_TEST_BOOTSTRAP"), "Kafka bootstrap servers")
	ksBin      = flag.String("ksidecar", os.Getenv("KSIDECAR_TEST_BIN"), "ksidecar binary")
	kstoolBin  = flag.String("kstool", os.Getenv("KSIDECAR_TEST_KSTOOL"), "kstool binary")
	records    = flag.Int("records", 2_000_000, "records to produce and consume")
	partitions = flag.Int("partitions", 8, "partitions")
	size       = flag.Int("size", 100, "value bytes")
	rounds     = flag.Int("rounds", 1, "rounds of every run over the same records")
	only       = flag.String("only", "", "comma-separated runs to do (franz-default,franz-tuned,ks-default,ks-tuned,c-client,librdkafka)")
	ksbench    = flag.String("ksbench", os.Getenv("KSIDECAR_TEST_KSBENCH"), "ksidecar's C benchmark client (build/ksbench): runs as the server's ceiling when given")
	tCredits   = flag.Int("tuned-credits", 20000, "tuned run: MaxOutstandingMessages")
	tBatch     = flag.Int("tuned-ack-batch", 2000, "tuned run: AckBatchSize")
	tHandlers  = flag.Int("tuned-handlers", 4, "tuned run: MaxConcurrentHandlers")
	cpuprofile = flag.String("cpuprofile", "", "write a CPU profile of the ks runs here")
	topicFlag  = flag.String("topic", "", "consume this topic, which already holds -records records (not created, produced nor deleted)")
	ordering   = flag.String("ordering", "", "ksidecar's group.ordering: none, key or partition (default: ksidecar's own)")
	orderLog   = flag.String("order-log", "", "write the handled records of the last run here")
	jsonOut    = flag.Bool("json", false, "print each run's result as a JSON line")
)

var (
	commands  []string
	recording = true // the first round's commands are printed; later rounds repeat them
)

func record(cmd string) {
	if recording {
		commands = append(commands, cmd)
	}
}

func run(name string, args ...string) string {
	record(name + " " + strings.Join(args, " "))
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s %v: %v\n%s", name, args, err, out)
		os.Exit(1)
	}
	return string(out)
}

func offsets(out string, col int) map[int32]int64 {
	res := map[int32]int64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > col {
			p, _ := strconv.Atoi(f[0])
			v, _ := strconv.ParseInt(f[col], 10, 64)
			res[int32(p)] = v
		}
	}
	return res
}

// checkCommitted waits (up to 60 s) for the group's committed offsets to be the end offsets.
func checkCommitted(topic, group string, end map[int32]int64) string {
	start := time.Now()
	var got map[int32]int64
	for time.Since(start) < 60*time.Second {
		got = offsets(run(*kstoolBin, "committed", "-b", *bootstrap, "-t", topic, "-g", group,
			"-p", strconv.Itoa(*partitions)), 1)
		if fmt.Sprint(got) == fmt.Sprint(end) {
			return "committed == end offsets"
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Sprintf("COMMITTED %v != END %v", got, end)
}

// tracker counts deliveries per offset, to report distinct records and duplicates.
type tracker struct {
	seen  [][]atomic.Uint32
	n     atomic.Int64
	first atomic.Int64 // unix nanos of the first record
	last  atomic.Int64

	mu      sync.Mutex // guards handled
	handled []handled  // with -order-log: the records in handling order
}

type handled struct {
	p   int32
	off int64
	key string
	nul bool
}

// logRec notes a handled record for -order-log (the mutex orders concurrent handlers).
func (t *tracker) logRec(p int32, off int64, key []byte) {
	if *orderLog == "" {
		return
	}
	t.mu.Lock()
	t.handled = append(t.handled, handled{p, off, string(key), key == nil})
	t.mu.Unlock()
}

// writeLog writes the handled records to -order-log, after the run.
func (t *tracker) writeLog() {
	if *orderLog == "" || t == nil {
		return
	}
	var b strings.Builder
	for _, h := range t.handled {
		k := h.key
		if h.nul {
			k = `\N`
		}
		fmt.Fprintf(&b, "%d\t%d\t%s\t0\n", h.p, h.off, k)
	}
	if err := os.WriteFile(*orderLog, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "order log:", err)
		os.Exit(1)
	}
}

func newTracker(end map[int32]int64) *tracker {
	t := &tracker{seen: make([][]atomic.Uint32, len(end))}
	for p, e := range end {
		t.seen[p] = make([]atomic.Uint32, e)
	}
	return t
}

func (t *tracker) add(p int32, off int64) int64 {
	if t.first.Load() == 0 {
		t.first.CompareAndSwap(0, time.Now().UnixNano())
	}
	t.seen[p][off].Add(1)
	return t.n.Add(1)
}

func (t *tracker) distinct() (d, dup int64) {
	for _, s := range t.seen {
		for i := range s {
			if v := s[i].Load(); v > 0 {
				d++
				dup += int64(v - 1)
			}
		}
	}
	return
}

type result struct {
	name, notes string
	rate        float64
	tr          *tracker // its records, for -order-log; nil for ksbench's runs
}

func franz(topic string, end map[int32]int64, tuned bool) result {
	group := fmt.Sprintf("franz-%d", time.Now().UnixNano())
	opts := []kgo.Opt{kgo.SeedBrokers(*bootstrap), kgo.ConsumerGroup(group), kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}
	name := "franz-go, defaults"
	if tuned {
		name = "franz-go, tuned"
		opts = append(opts, kgo.FetchMaxBytes(96<<20), kgo.FetchMaxPartitionBytes(16<<20),
			kgo.MaxConcurrentFetches(8), kgo.FetchMaxWait(100*time.Millisecond))
	}
	begin := time.Now()
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	tr := newTracker(end)
	ctx := context.Background()
	want := int64(*records)
	commits := 0
	for tr.n.Load() < want {
		fs := cl.PollFetches(ctx)
		if errs := fs.Errors(); len(errs) > 0 {
			fmt.Fprintln(os.Stderr, "franz-go fetch errors:", errs)
		}
		fs.EachRecord(func(r *kgo.Record) {
			tr.logRec(r.Partition, r.Offset, r.Key)
			if tr.add(r.Partition, r.Offset) == want {
				tr.last.Store(time.Now().UnixNano())
			}
		})
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "franz-go commit:", err)
		}
		commits++
	}
	secs := float64(tr.last.Load()-tr.first.Load()) / 1e9
	d, dup := tr.distinct()
	check := checkCommitted(topic, group, end)
	fromStart := float64(tr.last.Load()-begin.UnixNano()) / 1e9
	return result{name, fmt.Sprintf("%.3f s first to last record; %.3f s from NewClient (group join included); distinct %d, duplicates %d, %d sync commits (one per poll); %s",
		secs, fromStart, d, dup, commits, check), float64(want) / secs, tr}
}

func freePort() int {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// cpuSecs is a process's user+system CPU time so far, from /proc.
func cpuSecs(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseFloat(f[11], 64)
	s, _ := strconv.ParseFloat(f[12], 64)
	return (u + s) / 100 // USER_HZ
}

// sidecarEnv is this process's environment less the KSIDECAR_* variables: the flags that
// startSidecar prints among the commands are all of the bench's ksidecar's config, whatever
// the calling shell holds (KSIDECAR_CONFIG, KSIDECAR_GROUP_ORDERING, ...).
func sidecarEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KSIDECAR_") {
			env = append(env, e)
		}
	}
	return env
}

// startSidecar starts ksidecar and waits (up to 30 s) for its /healthz to answer 200; a
// ksidecar that exits first, or is not healthy by then, ends the bench with what it said.
func startSidecar() (target string, pid int, stop func()) {
	hp, gp := freePort(), freePort()
	for gp == hp {
		gp = freePort()
	}
	args := []string{"--kafka.bootstrap.servers=" + *bootstrap, fmt.Sprintf("--http.listen=127.0.0.1:%d", hp),
		fmt.Sprintf("--grpc.listen=127.0.0.1:%d", gp), "--log.level=warn",
		"--subscriber.max_credit_records=100000"}
	if *ordering != "" {
		args = append(args, "--group.ordering="+*ordering)
	}
	record(*ksBin + " " + strings.Join(args, " "))
	cmd := exec.Command(*ksBin, args...)
	cmd.Env = sidecarEnv()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "starting %s: %v\n", *ksBin, err)
		os.Exit(1)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() { cmd.Process.Kill(); <-exited }
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", hp)
	status := "no answer"
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case err := <-exited:
			fmt.Fprintf(os.Stderr, "ksidecar exited before it was healthy (%v): %s %s\n", err, *ksBin, strings.Join(args, " "))
			os.Exit(1)
		default:
		}
		if r, err := http.Get(url); err == nil {
			r.Body.Close()
			if r.StatusCode == 200 {
				return fmt.Sprintf("127.0.0.1:%d", gp), cmd.Process.Pid, stop
			}
			status = r.Status
		}
		if time.Now().After(deadline) {
			stop()
			fmt.Fprintf(os.Stderr, "ksidecar not healthy within 30 s (%s: %s)\n", url, status)
			os.Exit(1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func native(topic string, end map[int32]int64, tuned bool) result {
	target, pid, stop := startSidecar()
	defer stop()
	group := fmt.Sprintf("ks-%d", time.Now().UnixNano())
	cfg := ksidecar.SubscriberConfig{Group: group, Topics: []string{topic}}
	name := "ksidecar Go client, defaults"
	if tuned {
		name = "ksidecar Go client, tuned"
		cfg.MaxOutstandingMessages, cfg.AckBatchSize, cfg.MaxConcurrentHandlers = *tCredits, *tBatch, *tHandlers
	}
	begin := time.Now()
	c, err := ksidecar.Dial(context.Background(), target,
		ksidecar.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, nil))))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	sub, err := c.Subscriber(cfg)
	if err != nil {
		panic(err)
	}
	tr := newTracker(end)
	want := int64(*records)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- sub.Receive(ctx, func(_ context.Context, m *ksidecar.Message) {
			tr.logRec(m.Partition, m.Offset, m.Key)
			m.Ack()
			if tr.add(m.Partition, m.Offset) == want {
				tr.last.Store(time.Now().UnixNano())
				cancel()
			}
		})
	}()
	cpu0, ks0 := cpuSecs(os.Getpid()), cpuSecs(pid)
	<-ctx.Done()
	cpu, ks := cpuSecs(os.Getpid())-cpu0, cpuSecs(pid)-ks0
	closeStart := time.Now()
	if err := <-errc; err != nil {
		fmt.Fprintln(os.Stderr, "Receive:", err)
	}
	closeTook := time.Since(closeStart)
	secs := float64(tr.last.Load()-tr.first.Load()) / 1e9
	d, dup := tr.distinct()
	check := checkCommitted(topic, group, end)
	fromStart := float64(tr.last.Load()-begin.UnixNano()) / 1e9
	return result{name, fmt.Sprintf("%.3f s first to last record; %.3f s from Dial (group join included); distinct %d, duplicates %d, close (last acks and their results) %v, stale acks %d, CPU: this process %.2f s, ksidecar %.2f s (join included); "+
		"config: MaxOutstandingMessages %d, AckBatchSize %d, AckFlushInterval %v, MaxConcurrentHandlers %d; %s",
		secs, fromStart, d, dup, closeTook.Round(time.Millisecond), sub.StaleAcks(), cpu, ks, sub.Config().MaxOutstandingMessages,
		sub.Config().AckBatchSize, sub.Config().AckFlushInterval, sub.Config().MaxConcurrentHandlers, check), float64(want) / secs, tr}
}

// cClient runs ksidecar's own C gRPC client (tests/bench/ksbench.c) on the same records:
// what the server gives a client with no library cost, acking 2000 ids per message.
func cClient(topic string, end map[int32]int64) result {
	target, pid, stop := startSidecar()
	defer stop()
	group := fmt.Sprintf("ksbench-%d", time.Now().UnixNano())
	ks0 := cpuSecs(pid)
	out := run(*ksbench, "grpc", "--addr", target, "--topic", topic, "--group", group,
		"--count", strconv.Itoa(*records), "--credits", "20000", "--ack-batch", "2000")
	ks := cpuSecs(pid) - ks0
	rate := ksbenchRate(out)
	return result{"ksidecar C client (ksbench)", fmt.Sprintf("%s; ksidecar CPU %.2f s; %s", strings.TrimSpace(out), ks,
		checkCommitted(topic, group, end)), rate, nil}
}

// ksbenchRate is the rate=N (records a second) that ksbench prints, or 0.
func ksbenchRate(out string) float64 {
	for _, f := range strings.Fields(out) {
		if v, ok := strings.CutPrefix(f, "rate="); ok {
			r, _ := strconv.ParseFloat(v, 64)
			return r
		}
	}
	return 0
}

// librdkafka runs ksbench's native consumer (librdkafka 2.0.2, the library inside ksidecar,
// its local queue unbounded) on the same records: no server can hand out records faster
// than the Kafka client it reads them with, so this bounds every ksidecar figure.
func librdkafka(topic string, end map[int32]int64) result {
	group := fmt.Sprintf("native-%d", time.Now().UnixNano())
	out := run(*ksbench, "native", "--bootstrap", *bootstrap, "--topic", topic, "--group", group,
		"--count", strconv.Itoa(*records))
	rate := ksbenchRate(out)
	return result{"librdkafka 2.0.2 consumer (C)", fmt.Sprintf("%s; %s", strings.TrimSpace(out),
		checkCommitted(topic, group, end)), rate, nil}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

func main() {
	flag.Parse()
	if *bootstrap == "" || *ksBin == "" || *kstoolBin == "" {
		fmt.Fprintln(os.Stderr, "need -bootstrap, -ksidecar and -kstool (or KSIDECAR_TEST_BOOTSTRAP, _BIN, _KSTOOL)")
		os.Exit(2)
	}
	topic := *topicFlag
	if topic == "" {
		topic = fmt.Sprintf("gobench-%d", time.Now().UnixNano())
		run(*kstoolBin, "create", "-b", *bootstrap, "-t", topic, "-p", strconv.Itoa(*partitions))
		defer exec.Command(*kstoolBin, "delete", "-b", *bootstrap, "-t", topic).Run()
		t0 := time.Now()
		run(*kstoolBin, "produce", "-b", *bootstrap, "-t", topic, "-n", strconv.Itoa(*records),
			"-p", strconv.Itoa(*partitions), "-s", strconv.Itoa(*size), "-N")
		fmt.Printf("produced %d x %d B over %d partitions in %v\n", *records, *size, *partitions, time.Since(t0).Round(time.Millisecond))
	}
	end := offsets(run(*kstoolBin, "watermarks", "-b", *bootstrap, "-t", topic), 2)

	runs := []struct {
		key string
		f   func() result
	}{
		{"franz-default", func() result { return franz(topic, end, false) }},
		{"franz-tuned", func() result { return franz(topic, end, true) }},
		{"ks-default", func() result { return native(topic, end, false) }},
		{"ks-tuned", func() result { return native(topic, end, true) }},
		{"c-client", func() result { return cClient(topic, end) }},
		{"librdkafka", func() result { return librdkafka(topic, end) }},
	}
	rates := map[string][]float64{}
	names := map[string]string{}
	for r := 0; r < *rounds; r++ {
		for _, x := range runs {
			if *only != "" && !strings.Contains(","+*only+",", ","+x.key+",") || (x.key == "c-client" || x.key == "librdkafka") && *ksbench == "" {
				continue
			}
			var res result
			if *cpuprofile != "" && strings.HasPrefix(x.key, "ks") {
				res = profiled(filepath.Clean(*cpuprofile+"."+x.key), x.f)
			} else {
				res = x.f()
			}
			rates[x.key] = append(rates[x.key], res.rate)
			names[x.key] = res.name
			res.tr.writeLog()
			if *jsonOut {
				j, _ := json.Marshal(map[string]any{"round": r + 1, "run": x.key, "name": res.name,
					"rate": res.rate, "notes": res.notes})
				fmt.Println(string(j))
			} else {
				fmt.Printf("round %d: %-30s %10.0f rec/s  (%s)\n", r+1, res.name, res.rate, res.notes)
			}
		}
		recording = false
	}
	fmt.Printf("\nmedian of %d round(s), %d x %d B records over %d partitions:\n", *rounds, *records, *size, *partitions)
	for _, x := range runs {
		if v := rates[x.key]; len(v) > 0 {
			fmt.Printf("  %-30s %10.0f rec/s  runs %v\n", names[x.key], median(v), fmtRates(v))
		}
	}
	for _, k := range []string{"ks-default", "ks-tuned"} {
		for _, b := range []string{"franz-default", "franz-tuned", "c-client", "librdkafka"} {
			if len(rates[k]) > 0 && len(rates[b]) > 0 {
				target := " (target >= 0.5x)"
				if b == "c-client" {
					target = " (the library's cost over the server's ceiling)"
				} else if b == "librdkafka" {
					target = " (against the Kafka client inside ksidecar)"
				}
				fmt.Printf("  ratio %-30s / %-28s = %.2fx%s\n", names[k], names[b], median(rates[k])/median(rates[b]), target)
			}
		}
	}
	for _, b := range []string{"franz-default", "franz-tuned"} {
		if len(rates["librdkafka"]) > 0 && len(rates[b]) > 0 {
			fmt.Printf("  ratio %-30s / %-28s = %.2fx (the most any ksidecar client could reach)\n",
				names["librdkafka"], names[b], median(rates["librdkafka"])/median(rates[b]))
		}
	}
	fmt.Println("\ncommands (round 1; later rounds repeat them with new groups and ports):")
	seen := map[string]bool{}
	for _, c := range commands {
		if !seen[c] {
			seen[c] = true
			fmt.Println("  " + c)
		}
	}
}

func fmtRates(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(s, ", ")
}
