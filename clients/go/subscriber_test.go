// Integration tests of the Subscriber and Publisher against the real ksidecar and broker.
package ksidecar_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ksidecar "ksidecar/clients/go"
	"ksidecar/clients/go/kspb"
)

// receive runs sub.Receive in the background; stop cancels it and returns its error.
func receive(t *testing.T, sub *ksidecar.Subscriber, f func(context.Context, *ksidecar.Message)) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- sub.Receive(ctx, f) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
			case <-time.After(60 * time.Second):
				err = errors.New("Receive did not return within 60 s of its ctx ending")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	start := time.Now()
	for time.Since(start) < timeout {
		if cond() {
			t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("timed out after %v waiting for %s", timeout, what)
}

func groupStatus(t *testing.T, c *ksidecar.Client, group string) *kspb.GroupStatus {
	g, err := tryGroupStatus(c, group)
	if err != nil {
		t.Fatalf("GetGroup %s: %v", group, err)
	}
	return g
}

func tryGroupStatus(c *ksidecar.Client, group string) (*kspb.GroupStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Consumer().GetGroup(ctx, &kspb.GetGroupRequest{Group: group})
}

// setup makes a topic of parts partitions with n records, a ksidecar, a client and a
// Subscriber of a new group on that topic (cfg's Group and Topics are filled in).
func setup(t *testing.T, parts, n, keys, size int, cfg ksidecar.SubscriberConfig) (
	string, *sidecar, *ksidecar.Client, string, *ksidecar.Subscriber) {
	tp := topic(t, parts, n, keys, size)
	sc := startSidecar(t)
	c := sc.dial(t)
	cfg.Group, cfg.Topics = unique("g"), []string{tp}
	sub, err := c.Subscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return tp, sc, c, cfg.Group, sub
}

// futures collects ack futures from handlers.
type futures struct {
	mu sync.Mutex
	l  []*ksidecar.AckResult
}

func (f *futures) add(r *ksidecar.AckResult) { f.mu.Lock(); f.l = append(f.l, r); f.mu.Unlock() }
func (f *futures) count() int                { return len(f.all()) }
func (f *futures) all() []*ksidecar.AckResult {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*ksidecar.AckResult(nil), f.l...)
}

// Every record is delivered once and acked once, and the committed offsets reach the
// end offsets; ack futures resolve ACCEPTED.
func TestEveryRecordOnceAndCommitted(t *testing.T) {
	const parts, n = 4, 5000
	tp, _, _, group, sub := setup(t, parts, n, 50, 100, ksidecar.SubscriberConfig{})
	var mu sync.Mutex
	seen := map[pos]int{}
	var futs []*ksidecar.AckResult
	var total atomic.Int64
	stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) {
		mu.Lock()
		seen[pos{m.Partition, m.Offset}]++
		if m.Attempt != 1 {
			t.Errorf("%d@%d: attempt %d, want 1", m.Partition, m.Offset, m.Attempt)
		}
		if m.Offset%10 == 0 {
			futs = append(futs, m.AckWithResult())
		} else {
			m.Ack()
		}
		mu.Unlock()
		total.Add(1)
	})
	start := time.Now()
	waitFor(t, fmt.Sprintf("%d records", n), 90*time.Second, func() bool { return total.Load() >= n })
	t.Logf("received %d records in %v", n, time.Since(start).Round(time.Millisecond))
	waitCommitted(t, tp, group, parts, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Receive: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n || total.Load() != n {
		t.Fatalf("%d distinct records in %d deliveries, want %d once each", len(seen), total.Load(), n)
	}
	for _, f := range futs {
		st, err := f.Get(context.Background())
		if err != nil || st != ksidecar.AckAccepted {
			t.Fatalf("ack future: %v %v (%s), want ACCEPTED", st, err, f.Reason())
		}
	}
	t.Logf("%d ack futures ACCEPTED; stale acks %d", len(futs), sub.StaleAcks())
	if sub.StaleAcks() != 0 {
		t.Fatalf("%d stale acks, want 0", sub.StaleAcks())
	}
}

// AckWithCommit resolves only once a commit the broker confirmed covers the record, and
// says where that commit stands; a plain AckWithResult stays ACCEPTED with no offset.
func TestAckWithCommitResolvesOnceCommitted(t *testing.T) {
	const parts, n = 2, 400
	tp, _, _, group, sub := setup(t, parts, n, 0, 0, ksidecar.SubscriberConfig{})
	type held struct {
		m   *ksidecar.Message
		res *ksidecar.AckResult
	}
	var mu sync.Mutex
	var waited, plain []held
	stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) {
		mu.Lock()
		defer mu.Unlock()
		if m.Offset%2 == 0 {
			waited = append(waited, held{m, m.AckWithCommit()})
		} else {
			plain = append(plain, held{m, m.AckWithResult()})
		}
	})
	waitFor(t, fmt.Sprintf("%d records", n), 90*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(waited)+len(plain) >= n
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	mu.Lock()
	defer mu.Unlock()
	for _, h := range waited {
		st, err := h.res.Get(ctx)
		if err != nil || st != ksidecar.AckCommitted || h.res.CommittedOffset() <= h.m.Offset {
			t.Fatalf("%d@%d: %v %v (%s) at %d, want COMMITTED past it", h.m.Partition,
				h.m.Offset, st, err, h.res.Reason(), h.res.CommittedOffset())
		}
	}
	// The broker has each partition at least where the answers said.
	now := committed(t, tp, group, parts)
	for _, h := range waited {
		if now[h.m.Partition] < h.res.CommittedOffset() {
			t.Fatalf("partition %d committed %d, an answer said %d", h.m.Partition,
				now[h.m.Partition], h.res.CommittedOffset())
		}
	}
	for _, h := range plain {
		if st, err := h.res.Get(ctx); err != nil || st != ksidecar.AckAccepted || h.res.CommittedOffset() != 0 {
			t.Fatalf("plain ack: %v %v offset %d, want ACCEPTED and 0", st, err, h.res.CommittedOffset())
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Receive: %v", err)
	}
	t.Logf("%d acks COMMITTED, %d ACCEPTED", len(waited), len(plain))
}

// A handler slower than the lease deadline: its leases are extended, so nothing is
// redelivered and its late acks are ACCEPTED (an expired lease's ack is STALE).
func TestSlowHandlerIsExtendedNotRedelivered(t *testing.T) {
	const n = 6
	const deadline, work = time.Second, 3500 * time.Millisecond
	tp, _, c, group, sub := setup(t, 1, n, 0, 10, ksidecar.SubscriberConfig{AckDeadline: deadline, MaxConcurrentHandlers: n})
	var mu sync.Mutex
	var futs futures
	deliveries := map[int64]int{}
	stop := receive(t, sub, func(ctx context.Context, m *ksidecar.Message) {
		mu.Lock()
		deliveries[m.Offset]++
		mu.Unlock()
		time.Sleep(work) // > 3 lease deadlines
		futs.add(m.AckWithResult())
	})
	waitFor(t, "all slow handlers acked", 60*time.Second, func() bool { return futs.count() == n })
	for _, f := range futs.all() {
		st, _ := f.Get(context.Background())
		if st != ksidecar.AckAccepted {
			t.Fatalf("late ack: %v (%s), want ACCEPTED: the lease was not extended", st, f.Reason())
		}
	}
	waitCommitted(t, tp, group, 1, 30*time.Second)
	time.Sleep(2 * deadline) // a redelivery, if any, would come now
	g := groupStatus(t, c, group)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("deliveries %v; group delivered=%d redelivered=%d expired=%d", deliveries,
		g.Delivered, g.Redelivered, g.Expired)
	for off, k := range deliveries {
		if k != 1 {
			t.Fatalf("offset %d delivered %d times, want 1", off, k)
		}
	}
	if len(deliveries) != n || g.Expired != 0 || g.Redelivered != 0 {
		t.Fatalf("want %d records once each and no expiry: %v, expired %d, redelivered %d",
			n, deliveries, g.Expired, g.Redelivered)
	}
}

// A nack with a delay: the record comes back after the delay, with attempt 2.
func TestNackWithDelayComesBackWithAttempt2(t *testing.T) {
	tp, _, _, group, sub := setup(t, 1, 1, 0, 10, ksidecar.SubscriberConfig{})
	const delay = 1500 * time.Millisecond
	type got struct {
		attempt int
		at      time.Time
		nackRes *ksidecar.AckResult
	}
	var mu sync.Mutex
	var gots []got
	stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) {
		mu.Lock()
		defer mu.Unlock()
		g := got{attempt: m.Attempt, at: time.Now()}
		if len(gots) == 0 {
			g.nackRes = m.NackWithResult(delay)
		} else {
			m.Ack()
		}
		gots = append(gots, g)
	})
	waitFor(t, "the redelivery", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(gots) >= 2
	})
	waitCommitted(t, tp, group, 1, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	st, _ := gots[0].nackRes.Get(context.Background())
	gap := gots[1].at.Sub(gots[0].at)
	t.Logf("nack %v; attempts %d then %d; came back after %v (delay %v)", st, gots[0].attempt,
		gots[1].attempt, gap.Round(time.Millisecond), delay)
	if st != ksidecar.AckAccepted || gots[0].attempt != 1 || gots[1].attempt != 2 || len(gots) != 2 {
		t.Fatalf("want nack ACCEPTED, attempt 1 then 2, two deliveries: %v, %+v", st, gots)
	}
	if gap < delay {
		t.Fatalf("redelivered after %v, before the nack's delay %v", gap, delay)
	}
}

// kill -9 of ksidecar mid-stream and a restart on the same ports: the Subscriber
// reconnects by itself, nothing is lost, and an ack of a lease of the old stream
// resolves STALE.
func TestKill9AndRestartReconnects(t *testing.T) {
	const parts, n = 4, 20000
	tp, sc, _, group, sub := setup(t, parts, n, 0, 100, ksidecar.SubscriberConfig{MaxOutstandingMessages: 200, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second})
	var mu sync.Mutex
	seen := map[pos]int{}
	var total atomic.Int64
	killed, restarted := make(chan struct{}), make(chan struct{})
	var killedAt atomic.Int64
	var held atomic.Pointer[ksidecar.AckResult]
	var holdOnce sync.Once
	// Handlers hand records to an acker that acks what came every 2 ms: the records held
	// (delivered, not acked) fill the credits.
	var holding, maxHolding atomic.Int64
	pending := make(chan *ksidecar.Message, n*2)
	ackerDone := make(chan struct{})
	go func() {
		defer close(ackerDone)
		for m := range pending {
			batch := []*ksidecar.Message{m}
			for more := true; more; {
				select {
				case m, ok := <-pending:
					if !ok {
						more = false
						break
					}
					batch = append(batch, m)
				default:
					more = false
				}
			}
			time.Sleep(2 * time.Millisecond)
			for _, m := range batch {
				holding.Add(-1)
				m.Ack()
			}
		}
	}()
	t.Cleanup(func() { close(pending); <-ackerDone })
	stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) {
		for h, mx := holding.Add(1), maxHolding.Load(); h > mx && !maxHolding.CompareAndSwap(mx, h); mx = maxHolding.Load() {
		}
		mu.Lock()
		seen[pos{m.Partition, m.Offset}]++
		mu.Unlock()
		k := total.Add(1)
		if k == 3000 {
			// Hold this one across the kill and 300 records of the new stream: the new
			// stream's credits must leave it out, and its ack must resolve STALE.
			holdOnce.Do(func() {
				<-killed
				<-restarted
				for i := 0; i < 600 && total.Load() < killedAt.Load()+300; i++ {
					time.Sleep(50 * time.Millisecond)
				}
				holding.Add(-1)
				held.Store(m.AckWithResult())
			})
			return
		}
		pending <- m
	})
	waitFor(t, "3000 records", 60*time.Second, func() bool { return total.Load() >= 3000 })
	sc.kill(syscall.SIGKILL)
	killedAt.Store(total.Load())
	close(killed)
	t.Logf("killed ksidecar -9 after %d deliveries", killedAt.Load())
	time.Sleep(500 * time.Millisecond)
	sc.run() // same ports
	close(restarted)
	waitFor(t, "the held ack's result", 60*time.Second, func() bool { return held.Load() != nil })
	st, _ := held.Load().Get(context.Background())
	t.Logf("ack of a lease from the killed stream: %v (%s); %d delivered after the kill meanwhile",
		st, held.Load().Reason(), total.Load()-killedAt.Load())
	if st != ksidecar.AckStale {
		t.Fatalf("ack of an old stream's lease resolved %v, want STALE", st)
	}
	waitFor(t, "every record seen", 120*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	})
	waitCommitted(t, tp, group, parts, 60*time.Second)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	redelivered := 0
	for _, k := range seen {
		redelivered += k - 1
	}
	t.Logf("%d records, %d deliveries, %d redelivered, %d streams opened, %d stale acks",
		len(seen), total.Load(), redelivered, sub.Streams(), sub.StaleAcks())
	if sub.Streams() < 2 {
		t.Fatalf("%d streams opened: the Subscriber did not reconnect", sub.Streams())
	}
	if total.Load() <= killedAt.Load() {
		t.Fatal("nothing was delivered after the restart")
	}
	t.Logf("at most %d records held at once (MaxOutstandingMessages 200)", maxHolding.Load())
	if maxHolding.Load() > 200 {
		t.Fatalf("%d records held at once across the reconnect, more than the 200 asked", maxHolding.Load())
	}
}

// Acks still pending when Receive's ctx ends are sent by the close, which waits for
// their results: the committed offsets prove they arrived.
func TestCloseFlushesPendingAcks(t *testing.T) {
	const parts, n = 2, 400
	// Acks would go out only after an hour or a million ids: the close must send them.
	tp, _, c, group, sub := setup(t, parts, n, 0, 50, ksidecar.SubscriberConfig{AckFlushInterval: time.Hour, AckBatchSize: 1 << 20})
	var futs futures
	stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) { futs.add(m.AckWithResult()) })
	waitFor(t, "all records acked by handlers", 60*time.Second, func() bool { return futs.count() == n })
	time.Sleep(500 * time.Millisecond) // 2 commit intervals: nothing may have gone out yet
	if g := groupStatus(t, c, group); g.Acked != 0 {
		t.Fatalf("the server saw %d acks before the close; want 0 (they should be pending)", g.Acked)
	}
	for _, f := range futs.all() {
		select {
		case <-f.Ready():
			t.Fatalf("an ack future resolved before the close: %v", f.Reason())
		default:
		}
	}
	start := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("close: %v", err)
	}
	t.Logf("close flushed %d acks and got their results in %v", n, time.Since(start).Round(time.Millisecond))
	for _, f := range futs.all() {
		select {
		case <-f.Ready():
		default:
			t.Fatal("Receive returned with an ack future unresolved")
		}
		if st, _ := f.Get(context.Background()); st != ksidecar.AckAccepted {
			t.Fatalf("ack after close: %v (%s), want ACCEPTED", st, f.Reason())
		}
	}
	waitCommitted(t, tp, group, parts, 30*time.Second)
}

// Flow control: with more handlers than credits, never more records (nor bytes) are
// held unacked than MaxOutstandingMessages (MaxOutstandingBytes) asks.
func TestFlowControlNeverMoreOutstandingThanAsked(t *testing.T) {
	for _, tc := range []struct {
		name          string
		msgs          int
		bytes         int64
		size, records int
	}{
		{"messages", 25, 0, 100, 400},
		{"bytes", 1000, 10_000, 1000, 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, c, group, sub := setup(t, 2, tc.records, 0, tc.size, ksidecar.SubscriberConfig{MaxOutstandingMessages: tc.msgs, MaxOutstandingBytes: tc.bytes,
				MaxConcurrentHandlers: 100})
			var held, heldBytes, maxHeld, maxBytes, total, running, maxRunning atomic.Int64
			peak := func(v *atomic.Int64, x int64) {
				for {
					o := v.Load()
					if x <= o || v.CompareAndSwap(o, x) {
						return
					}
				}
			}
			stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) {
				peak(&maxRunning, running.Add(1))
				peak(&maxHeld, held.Add(1))
				sz := int64(len(m.Key) + len(m.Value))
				peak(&maxBytes, heldBytes.Add(sz))
				time.Sleep(20 * time.Millisecond)
				held.Add(-1)
				heldBytes.Add(-sz)
				running.Add(-1)
				m.Ack()
				total.Add(1)
			})
			var serverMax int64
			waitFor(t, "every record", 90*time.Second, func() bool {
				g, err := tryGroupStatus(c, group) // NotFound until the stream opened it
				for _, s := range g.GetSubscribers() {
					if s.Outstanding != nil && s.Outstanding.Records > serverMax {
						serverMax = s.Outstanding.Records
					}
				}
				if err != nil && !strings.Contains(err.Error(), "not active") {
					t.Fatalf("GetGroup: %v", err)
				}
				return total.Load() >= int64(tc.records)
			})
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			t.Logf("held at most %d records / %d bytes (asked %d / %d); %d handlers at once; server saw %d outstanding",
				maxHeld.Load(), maxBytes.Load(), tc.msgs, tc.bytes, maxRunning.Load(), serverMax)
			if maxHeld.Load() > int64(tc.msgs) || serverMax > int64(tc.msgs) {
				t.Fatalf("held %d, server outstanding %d: more than the %d records asked",
					maxHeld.Load(), serverMax, tc.msgs)
			}
			if tc.bytes > 0 && maxBytes.Load() > tc.bytes {
				t.Fatalf("held %d bytes, more than the %d asked", maxBytes.Load(), tc.bytes)
			}
			if maxHeld.Load() < 2 {
				t.Fatalf("never more than %d held: the handlers did not run concurrently", maxHeld.Load())
			}
		})
	}
}

// A bad token and a bad target each give a clear, typed error.
func TestBadTokenAndBadTargetGiveClearErrors(t *testing.T) {
	tp := topic(t, 1, 1, 0, 10)
	tokens := filepath.Join(t.TempDir(), "tokens.json")
	os.WriteFile(tokens, []byte(fmt.Sprintf(`{"tokens": [{"sha256": "%s", "groups": ["*"], "consume": ["*"], "produce": ["*"]}]}`,
		sha256hex("good-token"))), 0o600)
	sc := startSidecar(t, "--auth.tokens_file="+tokens)

	for _, tok := range []string{"wrong-token", ""} {
		c := sc.dial(t, ksidecar.WithToken(tok))
		sub, _ := c.Subscriber(ksidecar.SubscriberConfig{Group: unique("g"), Topics: []string{tp}})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		start := time.Now()
		err := sub.Receive(ctx, func(context.Context, *ksidecar.Message) {})
		cancel()
		t.Logf("token %q: after %v: %v", tok, time.Since(start).Round(time.Millisecond), err)
		if !errors.Is(err, ksidecar.ErrUnauthenticated) || !strings.Contains(err.Error(), "unauthenticated") ||
			!strings.Contains(err.Error(), sc.target()) {
			t.Fatalf("token %q: got %v, want an ErrUnauthenticated naming the target", tok, err)
		}
	}
	// The good token works.
	c := sc.dial(t, ksidecar.WithToken("good-token"))
	sub, _ := c.Subscriber(ksidecar.SubscriberConfig{Group: unique("g"), Topics: []string{tp}})
	got := make(chan struct{}, 1)
	stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) {
		m.Ack()
		select {
		case got <- struct{}{}:
		default:
		}
	})
	select {
	case <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("the good token got no record")
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// A bad target: nothing listens there.
	bad := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	start := time.Now()
	_, err := ksidecar.Dial(context.Background(), bad, ksidecar.WithDialTimeout(2*time.Second))
	t.Logf("Dial %s: after %v: %v", bad, time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, ksidecar.ErrUnavailable) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Dial of a bad target: %v, want an ErrUnavailable naming %s", err, bad)
	}
	// The same without Dial's health check: Receive gives up after ConnectTimeout.
	c2, err := ksidecar.Dial(context.Background(), bad, ksidecar.WithoutHealthCheck(),
		ksidecar.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	sub2, _ := c2.Subscriber(ksidecar.SubscriberConfig{Group: "g", Topics: []string{tp},
		ConnectTimeout: 2 * time.Second})
	err = sub2.Receive(context.Background(), func(context.Context, *ksidecar.Message) {})
	t.Logf("Receive at %s: %v", bad, err)
	if !errors.Is(err, ksidecar.ErrUnavailable) || !strings.Contains(err.Error(), bad) {
		t.Fatalf("Receive at a bad target: %v, want an ErrUnavailable naming %s", err, bad)
	}
	// A malformed target.
	_, err = ksidecar.Dial(context.Background(), "dns:///%zz", ksidecar.WithDialTimeout(time.Second))
	t.Logf("Dial of a malformed target: %v", err)
	if err == nil {
		t.Fatal("Dial of a malformed target succeeded")
	}
}

// The Publisher produces through ksidecar, and the Subscriber reads the records back.
func TestPublisherRoundTrip(t *testing.T) {
	tp := topic(t, 2, 0, 0, 0)
	sc := startSidecar(t)
	c := sc.dial(t)
	var recs []ksidecar.ProducerRecord
	for i := 0; i < 10; i++ {
		recs = append(recs, ksidecar.ProducerRecord{Topic: tp, Key: []byte(fmt.Sprintf("k%d", i)),
			Value: []byte(fmt.Sprintf("v%d", i)), Headers: []ksidecar.Header{{Key: "h", Value: []byte("x")}}})
	}
	res, err := c.Publisher().Publish(context.Background(), recs...)
	if err != nil || len(res) != 10 {
		t.Fatalf("Publish: %v %v", res, err)
	}
	_, err = c.Publisher().Publish(context.Background(), ksidecar.ProducerRecord{Topic: "__consumer_offsets", Value: []byte("x")})
	t.Logf("produce to an internal topic: %v", err)
	if err == nil {
		t.Fatal("produce to __consumer_offsets succeeded")
	}
	sub, _ := c.Subscriber(ksidecar.SubscriberConfig{Group: unique("g"), Topics: []string{tp}})
	var mu sync.Mutex
	got := map[string]string{}
	stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) {
		mu.Lock()
		got[string(m.Key)] = string(m.Value) + "/" + string(m.Headers[0].Value)
		mu.Unlock()
		m.Ack()
	})
	waitFor(t, "10 records", 30*time.Second, func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 10 })
	stop()
	if got["k3"] != "v3/x" {
		t.Fatalf("k3 -> %q, want v3/x", got["k3"])
	}
}

// reconnectLog keeps the delays of the library's "reconnecting" warnings, with their times.
type reconnectLog struct {
	mu     sync.Mutex
	at     []time.Time
	delays []time.Duration
}

func (l *reconnectLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *reconnectLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *reconnectLog) WithGroup(string) slog.Handler            { return l }
func (l *reconnectLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "reconnecting") {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "in" {
			l.mu.Lock()
			l.at = append(l.at, time.Now())
			l.delays = append(l.delays, a.Value.Duration())
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *reconnectLog) snapshot() ([]time.Time, []time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]time.Time(nil), l.at...), append([]time.Duration(nil), l.delays...)
}

// ksidecar killed and kept down: reconnect k waits min(MaxBackoff, MinBackoff*2^k) times a
// jitter in [0.5, 1], and really waits that long; once ksidecar is back on its port the
// Subscriber resumes by itself and every record ends acked and committed.
func TestReconnectBacksOffExponentiallyWithJitter(t *testing.T) {
	const parts, n, want = 4, 2000, 10
	const minB, maxB = 50 * time.Millisecond, 800 * time.Millisecond
	tp := topic(t, parts, n, 0, 100)
	sc := startSidecar(t)
	rl := &reconnectLog{}
	c := sc.dial(t, ksidecar.WithLogger(slog.New(rl)))
	group := unique("g")
	sub, err := c.Subscriber(ksidecar.SubscriberConfig{Group: group, Topics: []string{tp},
		MaxOutstandingMessages: 500, MinBackoff: minB, MaxBackoff: maxB})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[pos]bool{}
	killed := make(chan struct{})
	var after atomic.Int64 // deliveries after the kill
	stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) {
		mu.Lock()
		seen[pos{m.Partition, m.Offset}] = true
		k := len(seen)
		mu.Unlock()
		select {
		case <-killed:
			after.Add(1)
		default:
			if k > 600 {
				<-killed // the rest wait for the kill: ksidecar must deliver them again
			}
		}
		m.Ack()
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	waitFor(t, "600 records", 60*time.Second, func() bool { return count() >= 600 })
	sc.kill(syscall.SIGKILL)
	close(killed)
	waitFor(t, fmt.Sprintf("%d reconnect attempts", want), 60*time.Second, func() bool {
		_, d := rl.snapshot()
		return len(d) >= want
	})
	at, delays := rl.snapshot()
	at, delays = at[:want], delays[:want]
	up := time.Now()
	sc.run() // same ports
	waitCommitted(t, tp, group, parts, 120*time.Second)
	t.Logf("committed == end offsets %v after the restart began; %d deliveries after the kill",
		time.Since(up).Round(time.Millisecond), after.Load())
	if count() != n {
		t.Errorf("%d distinct records seen, want %d", count(), n)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("reconnect delays: %v", delays)
	capped := map[time.Duration]bool{}
	ncapped := 0
	for k, d := range delays {
		base := min(minB<<k, maxB)
		if d < base/2 || d > base {
			t.Errorf("reconnect %d waited %v, want within [%v, %v]", k+1, d, base/2, base)
		}
		if k > 0 && at[k].Sub(at[k-1]) < delays[k-1] {
			t.Errorf("reconnect %d came %v after the one before, which was to wait %v", k+1,
				at[k].Sub(at[k-1]), delays[k-1])
		}
		if minB<<k >= maxB {
			capped[d] = true
			ncapped++
		}
	}
	if ncapped < 4 || len(capped) < 2 {
		t.Errorf("the capped delays %v are not jittered", delays)
	}
	if sub.Streams() < want {
		t.Errorf("%d streams opened, want at least %d", sub.Streams(), want)
	}
}
