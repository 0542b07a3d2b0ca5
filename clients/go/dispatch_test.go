// Unit tests of the per-chain dispatcher, without a server: streams whose acks and nacks
// stay pending in memory, batches made by hand.
package ksidecar

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rig is a dispatcher with its workers and a Subscriber whose streams never send.
type rig struct {
	t *testing.T
	s *Subscriber
	d *dispatcher

	mu    sync.Mutex
	order map[uint64][]string // chain -> "offset" of each handler call, in start order
	f     func(m *Message)    // what a handler does (default: ack)
}

func newRig(t *testing.T, workers int) *rig {
	r := &rig{t: t, order: map[uint64][]string{}}
	r.s = &Subscriber{cfg: SubscriberConfig{AckBatchSize: 1 << 30, AckFlushInterval: time.Hour,
		MaxConcurrentHandlers: workers}, log: slog.Default()}
	r.s.stale.log = r.s.log
	running := map[uint64]bool{}
	r.d = newDispatcher(context.Background(), func(_ context.Context, m *Message) {
		r.mu.Lock()
		r.order[m.chain] = append(r.order[m.chain], fmt.Sprint(m.Offset))
		if m.chain != 0 && running[m.chain] {
			t.Errorf("chain %d: offset %d handed out while another of its records ran", m.chain, m.Offset)
		}
		running[m.chain] = true
		r.mu.Unlock()
		time.Sleep(100 * time.Microsecond) // room for a second handler of the chain to start
		r.mu.Lock()
		running[m.chain] = false
		r.mu.Unlock()
		if r.f != nil {
			r.f(m)
		} else {
			m.Ack()
		}
	}, 1000, workers)
	for i := 0; i < workers; i++ {
		go r.d.worker()
	}
	t.Cleanup(func() { close(r.d.quit) })
	return r
}

func (r *rig) stream() *stream { return newStream(r.s, r.d) }

type rec struct {
	chain uint64
	off   int64
}

// deliver hands a batch of recs (partition 0 of topic "t") to the dispatcher, as recvLoop does.
func (r *rig) deliver(st *stream, recs ...rec) {
	b := &leaseBatch{msgs: make([]Message, len(recs))}
	for i, x := range recs {
		m := &b.msgs[i]
		m.Topic, m.Offset, m.chain, m.st, m.b, m.size = "t", x.off, x.chain, st, b, 1
		m.AckID = fmt.Sprintf("%p-%d-%d", st, x.chain, x.off)
		if x.chain != 0 {
			b.chained++
		}
	}
	b.live.Store(int32(len(recs)))
	st.held.Add(int64(len(recs)))
	st.heldBytes.Add(int64(len(recs)))
	r.s.held.Add(int64(len(recs)))
	r.s.heldBytes.Add(int64(len(recs)))
	r.d.dispatch(st, b, r.s.cfg.MaxConcurrentHandlers)
}

func (r *rig) calls(chain uint64) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.order[chain])
}

func (r *rig) waitCalls(chain uint64, n int) []string {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if got := r.calls(chain); len(got) >= n {
			return got
		}
		time.Sleep(time.Millisecond)
	}
	r.t.Fatalf("chain %d: %d handler calls after 10 s, want %d: %v", chain, len(r.calls(chain)), n, r.calls(chain))
	return nil
}

func (r *rig) waitHeld(want int64) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for r.s.held.Load() != want {
		if time.Now().After(deadline) {
			r.t.Fatalf("%d records held after 10 s, want %d", r.s.held.Load(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func offs(lo, hi int) []string {
	var s []string
	for i := lo; i < hi; i++ {
		s = append(s, fmt.Sprint(i))
	}
	return s
}

// pendingIDs is what the stream would send: acks and nacks, in the order queued.
func pendingIDs(st *stream) (acks, nacks []string) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, p := range st.nacks {
		nacks = append(nacks, p.ids...)
	}
	return slices.Clone(st.acks.ids), nacks
}

// A chain's records run one at a time, in order; chains run in parallel; unordered
// records run beside them.
func TestDispatchSerialPerChainParallelAcross(t *testing.T) {
	const chains, per = 6, 40
	r := newRig(t, 8)
	var running [chains + 1]atomic.Int32
	var now, peak atomic.Int32
	r.f = func(m *Message) {
		if m.chain != 0 && running[m.chain].Add(1) != 1 {
			t.Errorf("chain %d: offset %d started while another of its records ran", m.chain, m.Offset)
		}
		n := now.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		time.Sleep(time.Millisecond)
		now.Add(-1)
		if m.chain != 0 {
			running[m.chain].Add(-1)
		}
		m.Ack()
	}
	st := r.stream()
	var recs []rec
	for off := 0; off < per; off++ {
		for c := uint64(1); c <= chains; c++ {
			recs = append(recs, rec{c, int64(off)})
		}
		recs = append(recs, rec{0, int64(1000 + off)})
	}
	r.deliver(st, recs[:len(recs)/2]...) // two batches: a chain goes on across them
	r.deliver(st, recs[len(recs)/2:]...)
	for c := uint64(1); c <= chains; c++ {
		if got := r.waitCalls(c, per); !slices.Equal(got, offs(0, per)) {
			t.Fatalf("chain %d ran %v, want offsets 0..%d in order", c, got, per-1)
		}
	}
	r.waitCalls(0, per)
	r.waitHeld(0)
	acks, nacks := pendingIDs(st)
	t.Logf("%d acks, %d nacks; at most %d handlers at once", len(acks), len(nacks), peak.Load())
	if len(acks) != chains*per+per || len(nacks) != 0 {
		t.Fatalf("%d acks and %d nacks, want %d acks", len(acks), len(nacks), chains*per+per)
	}
	if peak.Load() < 4 {
		t.Fatalf("at most %d handlers at once: chains did not run in parallel", peak.Load())
	}
	for i := 0; ; i++ { // the last worker may still be on its way out of finishedLocked
		r.d.mu.Lock()
		n := len(r.d.chains)
		r.d.mu.Unlock()
		if n == 0 {
			break
		}
		if i == 1000 {
			t.Fatalf("%d chains left in the map once all were done", n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A record acked after its handler returned holds its chain until the ack.
func TestDispatchWaitsForLateAck(t *testing.T) {
	r := newRig(t, 4)
	got := make(chan *Message, 10)
	r.f = func(m *Message) { got <- m } // returns unsettled
	st := r.stream()
	r.deliver(st, rec{1, 0}, rec{1, 1}, rec{1, 2})
	m0 := <-got
	select {
	case m := <-got:
		t.Fatalf("offset %d handed out before offset 0 was acked", m.Offset)
	case <-time.After(50 * time.Millisecond):
	}
	m0.Ack()
	if m := <-got; m.Offset != 1 {
		t.Fatalf("after the ack of 0 came %d, want 1", m.Offset)
	}
}

// A nack drops the chain's later records not yet handed out, and those of its stream that
// arrive before the redelivery; the redelivery starts the chain again at the nacked one.
func TestDispatchDropsAfterNack(t *testing.T) {
	r := newRig(t, 4)
	nacked := false
	r.f = func(m *Message) {
		if m.Offset == 3 && !nacked {
			nacked = true
			m.Nack(0)
			return
		}
		m.Ack()
	}
	st := r.stream()
	var recs []rec
	for i := 0; i < 10; i++ {
		recs = append(recs, rec{1, int64(i)})
	}
	r.deliver(st, recs...)
	r.waitCalls(1, 4)
	r.waitHeld(0) // 0..3 settled, 4..9 dropped with their credits
	// Sent before ksidecar read the nack: stale.
	r.deliver(st, rec{1, 10}, rec{1, 11})
	r.waitHeld(0)
	r.deliver(st, recs[3:]...) // the redelivery
	r.waitCalls(1, 11)
	time.Sleep(20 * time.Millisecond)
	got := r.calls(1)
	want := append(offs(0, 4), offs(3, 10)...)
	if !slices.Equal(got, want) {
		t.Fatalf("handlers ran %v, want %v", got, want)
	}
	acks, nacks := pendingIDs(st)
	t.Logf("dropped %d; %d acks, nacks %v", r.d.dropped.Load(), len(acks), nacks)
	if len(nacks) != 1 || len(acks) != 10 || r.d.dropped.Load() != 8 {
		t.Fatalf("want 1 nack, 10 acks and 8 dropped: %d, %d, %d", len(nacks), len(acks), r.d.dropped.Load())
	}
	r.waitHeld(0)
}

// The fence lasts fenceGrace after the nack's result: a batch ksidecar made before it read
// the nack may come after the result; later, what comes is new (the chain came back from
// another subscriber).
func TestDispatchFenceEndsAfterResultAndGrace(t *testing.T) {
	r := newRig(t, 2)
	r.d.fenceGrace = 200 * time.Millisecond
	var nack *Message
	r.f = func(m *Message) {
		if m.Offset == 1 && nack == nil {
			nack = m
			m.Nack(0)
			return
		}
		m.Ack()
	}
	st := r.stream()
	r.deliver(st, rec{1, 0}, rec{1, 1}, rec{1, 2})
	r.waitCalls(1, 2)
	r.waitHeld(0)
	r.d.nackResults([]ackResult{{id: []byte(nack.AckID), status: AckAccepted}})
	r.deliver(st, rec{1, 3}) // made before the nack was read, sent after its result: stale
	r.waitHeld(0)
	time.Sleep(250 * time.Millisecond)
	r.deliver(st, rec{1, 5}) // the chain went elsewhere and comes back later
	r.waitCalls(1, 3)
	if got := r.calls(1); !slices.Equal(got, []string{"0", "1", "5"}) {
		t.Fatalf("handlers ran %v, want 0 1 5", got)
	}
	if r.d.dropped.Load() != 2 {
		t.Fatalf("%d dropped, want 2 (offset 2 at the nack, 3 in the grace)", r.d.dropped.Load())
	}
}

// A chain that ksidecar starts again below what it sent (an expired lease): the queued
// copies from there on are stale and dropped, the new ones run in order.
func TestDispatchRestartDropsStaleCopies(t *testing.T) {
	r := newRig(t, 2)
	release := make(chan struct{})
	var once sync.Once
	r.f = func(m *Message) {
		if m.Offset == 0 {
			once.Do(func() { <-release })
		}
		m.Ack()
	}
	st := r.stream()
	r.deliver(st, rec{1, 0}, rec{1, 1}, rec{1, 2}, rec{1, 3})
	r.waitCalls(1, 1)
	r.deliver(st, rec{1, 1}, rec{1, 2}, rec{1, 3}) // 1 expired: 1..3 sent again
	close(release)
	r.waitCalls(1, 4)
	time.Sleep(20 * time.Millisecond)
	if got := r.calls(1); !slices.Equal(got, offs(0, 4)) {
		t.Fatalf("handlers ran %v, want 0..3 once each", got)
	}
	r.waitHeld(0)
	if r.d.dropped.Load() != 3 {
		t.Fatalf("%d dropped, want the 3 stale copies", r.d.dropped.Load())
	}
}

// A lost stream: its records not handed out are dropped; the new stream's records of the
// chain wait for the old stream's handler still running.
func TestDispatchLostStream(t *testing.T) {
	r := newRig(t, 4)
	release := make(chan struct{})
	var running atomic.Int32
	var once sync.Once
	r.f = func(m *Message) {
		if running.Add(1) != 1 {
			t.Errorf("offset %d ran beside another record of its chain", m.Offset)
		}
		once.Do(func() { <-release }) // the old stream's offset 0

		running.Add(-1)
		m.Ack()
	}
	old := r.stream()
	r.deliver(old, rec{1, 0}, rec{1, 1}, rec{1, 2})
	r.waitCalls(1, 1)
	old.dead.Store(true)
	r.d.purge(old)
	nw := r.stream()
	r.deliver(nw, rec{1, 0}, rec{1, 1}, rec{1, 2})
	time.Sleep(30 * time.Millisecond)
	if got := r.calls(1); len(got) != 1 {
		t.Fatalf("the new stream's records ran while the old handler still did: %v", got)
	}
	close(release)
	r.waitCalls(1, 4)
	time.Sleep(20 * time.Millisecond)
	if got := r.calls(1); !slices.Equal(got, []string{"0", "0", "1", "2"}) {
		t.Fatalf("handlers ran %v, want 0 (old stream), then 0 1 2", got)
	}
	r.waitHeld(0)
	if r.d.dropped.Load() != 2 {
		t.Fatalf("%d dropped, want the old stream's 2 unhanded records", r.d.dropped.Load())
	}
}
