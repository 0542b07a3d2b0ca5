// Integration tests of ordered batches: a key's (or a partition's) records are processed
// in offset order through nacks, a kill -9 of ksidecar and a second ksidecar joining.
package ksidecar_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ksidecar "ksidecar/clients/go"
)

// call is one handler call, as the test logged it.
type call struct {
	key        string // partition/key, or the partition (ordering=partition)
	p          int32
	off        int64
	start, end time.Time
	nacked     bool
	res        *ksidecar.AckResult
	acked      bool // an ack the server ACCEPTED, or may have: sent before its stream broke
	sub        int  // which Subscriber
}

func (c *call) String() string {
	st := c.res.Reason()
	if st == "" {
		st = "ACCEPTED"
	}
	what := "ack"
	if c.nacked {
		what = "nack"
	}
	return fmt.Sprintf("%s %d@%d sub %d %s-%s %s: %s", c.key, c.p, c.off, c.sub,
		c.start.Format("05.000000"), c.end.Format("05.000000"), what, st)
}

type callLog struct {
	mu    sync.Mutex
	calls []call
}

func (l *callLog) count() int { l.mu.Lock(); defer l.mu.Unlock(); return len(l.calls) }

// handler sleeps 0-2 ms, then nacks one record in ten and acks the rest.
func (l *callLog) handler(sub int, byPartition bool) func(context.Context, *ksidecar.Message) {
	return func(_ context.Context, m *ksidecar.Message) {
		c := call{p: m.Partition, off: m.Offset, start: time.Now(), sub: sub}
		if byPartition {
			c.key = fmt.Sprint(m.Partition)
		} else {
			c.key = fmt.Sprintf("%d/%s", m.Partition, m.Key)
		}
		time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
		if rand.IntN(10) == 0 {
			c.nacked = true
			c.res = m.NackWithResult(0)
		} else {
			c.res = m.AckWithResult()
		}
		c.end = time.Now()
		l.mu.Lock()
		l.calls = append(l.calls, c)
		l.mu.Unlock()
	}
}

// checkOrder checks every key's calls, in start order: none starts before the one before
// it ended; a run goes on from a call that acked to the key's next offset, and any other
// call starts a run, at or below the key's lowest offset not yet acked (never skipping
// one). A run may start below it: an ACCEPTED ack is not yet committed, and a kill -9 or a
// partition's move replays what the commit did not cover (at-least-once). Every record
// was processed.
func checkOrder(t *testing.T, calls []call, end map[int32]int64) {
	t.Helper()
	accepted, processed := map[pos]bool{}, map[pos]bool{}
	byKey := map[string][]*call{}
	for i := range calls {
		c := &calls[i]
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := c.res.Get(ctx)
		cancel()
		if err != nil {
			t.Fatalf("%d@%d: its ack or nack never resolved", c.p, c.off)
		}
		// An ack sent before its stream broke, whose result never came, may have been
		// taken and committed: it may count as acked, not as proof of no loss.
		unknown := st == ksidecar.AckStale && strings.Contains(c.res.Reason(), "before the result came")
		if !c.nacked && (st == ksidecar.AckAccepted || unknown) {
			c.acked = true
		}
		if !c.nacked && st == ksidecar.AckAccepted {
			accepted[pos{c.p, c.off}] = true
		}
		processed[pos{c.p, c.off}] = true
		byKey[c.key] = append(byKey[c.key], c)
	}
	for p, hi := range end {
		for off := int64(0); off < hi; off++ {
			if !processed[pos{p, off}] {
				t.Fatalf("%d@%d was never processed: lost", p, off)
			}
		}
	}
	restarts, replays := 0, 0
	for key, cs := range byKey {
		sort.SliceStable(cs, func(i, j int) bool { return cs[i].start.Before(cs[j].start) })
		var offs []int64 // the key's offsets, from every call
		for _, c := range cs {
			offs = append(offs, c.off)
		}
		slices.Sort(offs)
		offs = slices.Compact(offs)
		next := func(off int64) int64 {
			i, _ := slices.BinarySearch(offs, off)
			if i+1 < len(offs) {
				return offs[i+1]
			}
			return -1
		}
		acked := map[int64]bool{}
		low := 0 // index in offs of the lowest offset not yet acked
		for i, c := range cs {
			for low < len(offs) && acked[offs[low]] {
				low++
			}
			lowest := int64(-1)
			if low < len(offs) {
				lowest = offs[low]
			}
			if i > 0 && c.start.Before(cs[i-1].end) {
				t.Fatalf("key %s: %d started at %v, while %d (started %v) still ran until %v",
					key, c.off, c.start, cs[i-1].off, cs[i-1].start, cs[i-1].end)
			}
			goesOn := i > 0 && !cs[i-1].nacked && c.off == next(cs[i-1].off)
			if !goesOn {
				restarts++
			}
			if !goesOn && c.off < lowest {
				replays++
			}
			if !goesOn && lowest >= 0 && c.off > lowest {
				prev := int64(-1)
				if i > 0 {
					prev = cs[i-1].off
				}
				var around []string
				for _, x := range cs[max(i-8, 0):min(i+3, len(cs))] {
					around = append(around, x.String())
				}
				t.Fatalf("key %s: call %d at %d (after %d) while %d was not yet acked: skipped; calls around it:\n%s",
					key, i, c.off, prev, lowest, strings.Join(around, "\n"))
			}
			if c.acked {
				acked[c.off] = true
			}
		}
	}
	t.Logf("%d keys, %d calls: %d runs started (%d of them below the lowest offset not acked)",
		len(byKey), len(calls), restarts, replays)
}

// orderedRun: n records on 4 partitions (keys distinct keys; 0: none, ordering=partition)
// through two ksidecars, with nacks, a kill -9 and a restart of the first, and the second
// joining the group; then checkOrder.
func orderedRun(t *testing.T, n, keys int) {
	const parts = 4
	byPartition := keys == 0
	mode := "--group.ordering=key"
	if byPartition {
		mode = "--group.ordering=partition"
	}
	tp := topic(t, parts, n, keys, 20)
	group := unique("g")
	cfg := ksidecar.SubscriberConfig{Group: group, Topics: []string{tp}, MaxConcurrentHandlers: 8,
		MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second}
	log := &callLog{}

	a := startSidecar(t, mode)
	subA, err := a.dial(t).Subscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	stopA := receive(t, subA, log.handler(0, byPartition))
	waitFor(t, fmt.Sprintf("%d calls", n/4), 60*time.Second, func() bool { return log.count() >= n/4 })
	a.kill(syscall.SIGKILL)
	t.Logf("killed ksidecar -9 after %d calls", log.count())
	time.Sleep(300 * time.Millisecond)
	a.run() // same ports

	waitFor(t, fmt.Sprintf("%d calls", n*3/5), 90*time.Second, func() bool { return log.count() >= n*3/5 })
	b := startSidecar(t, mode)
	subB, err := b.dial(t).Subscriber(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopB := receive(t, subB, log.handler(1, byPartition))
	t.Logf("second ksidecar joined after %d calls", log.count())

	waitCommittedEnd(t, tp, group, parts, 100*time.Second)
	t.Logf("all committed after %v", time.Since(start).Round(time.Millisecond))
	if err := stopA(); err != nil {
		t.Fatalf("Receive on the first ksidecar: %v", err)
	}
	if err := stopB(); err != nil {
		t.Fatalf("Receive on the second ksidecar: %v", err)
	}
	log.mu.Lock()
	calls := slices.Clone(log.calls)
	log.mu.Unlock()
	bySub, nacks := [2]int{}, 0
	for _, c := range calls {
		bySub[c.sub]++
		if c.nacked {
			nacks++
		}
	}
	t.Logf("%d calls (%d on the first ksidecar, %d on the second), %d nacks; streams %d and %d; stale acks %d and %d",
		len(calls), bySub[0], bySub[1], nacks, subA.Streams(), subB.Streams(), subA.StaleAcks(), subB.StaleAcks())
	if subA.Streams() < 2 {
		t.Fatalf("the first Subscriber opened %d streams: it never reconnected after the kill", subA.Streams())
	}
	checkOrder(t, calls, endOffsets(t, tp))
}

// ordering=key: each key's records processed in offset order, with 10 keys and with 1.
func TestOrderedKeys(t *testing.T) {
	for _, keys := range []int{10, 1} {
		t.Run(fmt.Sprintf("%d keys", keys), func(t *testing.T) { orderedRun(t, 20000, keys) })
	}
}

// ordering=partition: each partition's records processed in offset order.
func TestOrderedPartitions(t *testing.T) { orderedRun(t, 20000, 0) }

// waitCommittedEnd waits until the group's committed offsets are the topic's end offsets;
// an empty partition, which nothing commits, counts as committed at 0.
func waitCommittedEnd(t *testing.T, tp, group string, parts int, timeout time.Duration) {
	t.Helper()
	end := endOffsets(t, tp)
	var got map[int32]int64
	for start := time.Now(); time.Since(start) < timeout; time.Sleep(300 * time.Millisecond) {
		got = committed(t, tp, group, parts)
		for p, off := range got {
			if off < 0 && end[p] == 0 {
				got[p] = 0
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(end) {
			t.Logf("committed == end offsets %v after %v", end, time.Since(start).Round(time.Millisecond))
			return
		}
	}
	t.Fatalf("committed offsets %v never reached the end offsets %v within %v", got, end, timeout)
}
