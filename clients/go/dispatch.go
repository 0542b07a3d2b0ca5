// Dispatch: the handler goroutines, which run a chain's records (same topic, partition and
// ordering_chain) one after another in the order received, and chains and unordered
// records in parallel, up to MaxConcurrentHandlers.
package ksidecar

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// chainKey names a chain. ksidecar sends a chain's records to one subscriber, in offset
// order, several at once; the subscriber promises to process them in that order.
type chainKey struct {
	topic     string
	partition int32
	id        uint64
}

// chain is what the dispatcher knows of one chain, across the streams of one Receive (a
// record of a new stream waits for a handler still running one of the old stream's).
// @locks dispatcher.mu
type chain struct {
	key   chainKey
	q     []*Message // received, not yet handed out, in offset order
	out   *Message   // handed out, not yet both settled and returned from its handler
	sched bool       // in the ready list, or taken from it by a worker
	top   int64      // offset of the last record received
	// fence: a nack, and when its result came (zero: not yet). ksidecar takes back the
	// chain's later records it had sent, so those of the nack's stream that arrive after
	// it are stale, until the nacked record comes again, or fenceGrace after the result.
	fence   *Message
	fenceAt time.Time
}

// fenceGrace: how long after a nack's result its chain's later records are still taken
// for stale. ksidecar may send a batch it made before it read the nack after the nack's
// result; the redelivery of the nacked record ends the fence at once, so this matters
// only when that redelivery went to another subscriber.
const fenceGrace = time.Second

// chainRun is how many of a chain's records a worker runs before it lets other chains go first.
const chainRun = 64

// dispatcher feeds the handler goroutines of one Receive: runs of unordered records through
// work, chains through the ready list.
type dispatcher struct {
	ctx  context.Context
	f    func(context.Context, *Message)
	work chan chunk
	quit chan struct{}
	rsig chan struct{} // a chain was made ready; one slot per worker

	fenceGrace time.Duration // fenceGrace; shorter in tests

	nready  atomic.Int32 // len(ready), read without mu
	dropped atomic.Int64 // records dropped unhanded (stale after a nack, an expiry or a lost stream)

	mu     sync.Mutex
	chains map[chainKey]*chain // chains with records queued, out, or fenced
	ready  []*chain
	fenced map[string]*chain // ack id of a fence's nack -> its chain
}

func newDispatcher(ctx context.Context, f func(context.Context, *Message), queue, workers int) *dispatcher {
	return &dispatcher{ctx: ctx, f: f, work: make(chan chunk, queue), quit: make(chan struct{}),
		rsig: make(chan struct{}, workers), chains: map[chainKey]*chain{}, fenced: map[string]*chain{},
		fenceGrace: fenceGrace}
}

// chunk is a run of one batch's messages that one handler goroutine takes in turn:
// handing out runs, not single messages, keeps goroutine wake-ups off the per-record path.
type chunk struct {
	b      *leaseBatch
	lo, hi int
}

// worker is one handler goroutine; it ends when quit closes.
func (d *dispatcher) worker() {
	for {
		select {
		case <-d.quit:
			return
		default:
		}
		if d.nready.Load() > 0 {
			if c := d.pop(); c != nil {
				d.runChain(c)
				continue
			}
		}
		select {
		case <-d.quit:
			return
		case ck := <-d.work:
			d.runChunk(ck)
		case <-d.rsig:
		}
	}
}

func (d *dispatcher) runChunk(ck chunk) {
	for i := ck.lo; i < ck.hi; i++ {
		m := &ck.b.msgs[i]
		if m.chain != 0 {
			continue // its chain hands it out
		}
		if m.st.dead.Load() && m.state.Load() == 0 {
			// Its stream ended: the record went back to the pool and is delivered
			// again on the next stream. No handler call.
			m.end(msgReturned)
			continue
		}
		d.f(d.ctx, m)
		m.end(msgReturned)
	}
}

// runChain hands c's records to the handler one at a time, each once the one before it
// finished. One that is settled after its handler returned hands the chain on from settle.
func (d *dispatcher) runChain(c *chain) {
	for n := 0; ; n++ {
		d.mu.Lock()
		m := d.takeLocked(c)
		d.mu.Unlock()
		if m == nil {
			return
		}
		d.f(d.ctx, m)
		if old, ok := m.end(msgReturned); !ok || old&msgSettled == 0 {
			return // not settled yet: its ack or nack goes on with the chain
		}
		d.mu.Lock()
		more := d.finishedLocked(c)
		if more && n+1 >= chainRun {
			d.pushLocked(c) // this worker takes the ready list's head next
			more = false
		}
		d.mu.Unlock()
		if !more {
			return
		}
		select {
		case <-d.quit:
			return
		default:
		}
	}
}

// takeLocked gives c's next record to a worker (c is scheduled and has none out), or
// unschedules c and returns nil when it has none.
func (d *dispatcher) takeLocked(c *chain) *Message {
	c.sched = false
	for len(c.q) > 0 {
		m := c.q[0]
		c.q[0] = nil
		c.q = c.q[1:]
		if m.st.dead.Load() {
			d.drop(m) // purge ran or is about to: its lease is gone
			continue
		}
		c.out = m
		return m
	}
	d.forgetLocked(c)
	return nil
}

// finishedLocked: c's record out is done. It says whether c has another to hand out, and
// then leaves c scheduled for the caller to run or push.
func (d *dispatcher) finishedLocked(c *chain) bool {
	c.out = nil
	if len(c.q) == 0 {
		d.forgetLocked(c)
		return false
	}
	c.sched = true
	return true
}

func (d *dispatcher) pushLocked(c *chain) {
	d.ready = append(d.ready, c)
	d.nready.Store(int32(len(d.ready)))
}

func (d *dispatcher) pop() *chain {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.ready) == 0 {
		return nil
	}
	c := d.ready[0]
	d.ready[0] = nil
	d.ready = d.ready[1:]
	d.nready.Store(int32(len(d.ready)))
	return c
}

// signal wakes up to n idle workers.
func (d *dispatcher) signal(n int) {
	for ; n > 0; n-- {
		select {
		case d.rsig <- struct{}{}:
		default:
			return
		}
	}
}

// forgetLocked deletes c when nothing of it is left, so that the map does not grow with
// every key ever seen.
func (d *dispatcher) forgetLocked(c *chain) {
	if c.out == nil && !c.sched && len(c.q) == 0 && c.fence == nil {
		c.q = nil
		delete(d.chains, c.key)
	}
}

// drop ends a record never handed out: no handler, no ack, its credits back.
func (d *dispatcher) drop(m *Message) {
	if m.state.CompareAndSwap(0, msgSettled|msgReturned) {
		m.b.live.Add(-1)
		m.st.release(m.size)
		d.dropped.Add(1)
	}
}

// dropFrom drops q's records from offset off on; q is in offset order.
func (d *dispatcher) dropFrom(q []*Message, off int64) []*Message {
	i := len(q)
	for i > 0 && q[i-1].Offset >= off {
		i--
	}
	for j := i; j < len(q); j++ {
		d.drop(q[j])
		q[j] = nil
	}
	return q[:i]
}

// dispatch hands a received batch out: its chained records to their chains, the rest in
// runs, about one per handler goroutine, of at most 64.
func (d *dispatcher) dispatch(st *stream, b *leaseBatch, handlers int) {
	n := len(b.msgs)
	if b.chained > 0 {
		d.enqueue(b)
		if b.chained == n {
			return
		}
	}
	per := min(max((n-b.chained)/handlers, 1), 64)
	for lo := 0; lo < n; {
		hi, free := lo, 0
		for ; hi < n && free < per; hi++ {
			if b.msgs[hi].chain == 0 {
				free++
			}
		}
		if free > 0 {
			select {
			case d.work <- chunk{b, lo, hi}:
			case <-d.quit:
				return // closing: the rest stay leased until the stream ends
			}
		}
		lo = hi
	}
}

// enqueue appends b's chained records to their chains, dropping those ksidecar has taken
// back, and makes ready the chains that were idle.
func (d *dispatcher) enqueue(b *leaseBatch) {
	woken := 0
	d.mu.Lock()
	for i := range b.msgs {
		m := &b.msgs[i]
		if m.chain == 0 {
			continue
		}
		k := chainKey{m.Topic, m.Partition, m.chain}
		c := d.chains[k]
		if c == nil {
			c = &chain{key: k, top: -1}
			d.chains[k] = c
		}
		m.ch = c
		if f := c.fence; f != nil {
			if m.st == f.st && m.Offset > f.Offset &&
				(c.fenceAt.IsZero() || time.Since(c.fenceAt) < d.fenceGrace) {
				// Sent before ksidecar read the nack: it takes it back and sends it again.
				c.top = m.Offset
				d.drop(m)
				continue
			}
			d.unfenceLocked(c) // the nacked record (or a new stream) restarts the chain
		}
		if m.Offset <= c.top {
			// ksidecar went back on the chain (a nack, an expired lease): the later
			// records still queued are stale copies, sent again after this one.
			c.q = d.dropFrom(c.q, m.Offset)
		}
		c.top = m.Offset
		c.q = append(c.q, m)
		if c.out == nil && !c.sched {
			c.sched = true
			d.ready = append(d.ready, c)
			woken++
		}
	}
	d.nready.Store(int32(len(d.ready)))
	d.mu.Unlock()
	d.signal(woken)
}

// settle acks or nacks a chained record. A nack drops the chain's later records not yet
// handed out (ksidecar sends them again behind this one) before the chain can go on.
func (d *dispatcher) settle(m *Message, op int, nk nackKey, fut *AckResult) {
	c := m.ch
	d.mu.Lock()
	old, ok := m.end(msgSettled)
	if !ok {
		d.mu.Unlock()
		if fut != nil {
			fut.resolve(AckInvalid, "this message was already acked or nacked")
		}
		return
	}
	if op == opNack && !m.st.dead.Load() {
		c.q = d.dropFrom(c.q, m.Offset+1)
		if c.fence != nil {
			delete(d.fenced, c.fence.AckID)
		}
		c.fence, c.fenceAt = m, time.Time{}
		d.fenced[m.AckID] = c
	}
	more := false
	if old&msgReturned != 0 && c.out == m {
		if more = d.finishedLocked(c); more {
			d.pushLocked(c)
		}
	}
	d.mu.Unlock()
	if more {
		d.signal(1)
	}
	m.st.queue(op, m.AckID, nk, fut)
}

// unfenceLocked lifts c's fence; the caller forgets c if it is left empty.
func (d *dispatcher) unfenceLocked(c *chain) {
	delete(d.fenced, c.fence.AckID)
	c.fence = nil
}

// nackResults starts the grace of the fences whose nacks were answered, and lifts those
// whose grace ran out (a chain that never came back would otherwise stay in the map).
func (d *dispatcher) nackResults(rs []ackResult) {
	d.mu.Lock()
	if len(d.fenced) > 0 {
		now := time.Now()
		for i := range rs {
			if c := d.fenced[string(rs[i].id)]; c != nil && c.fenceAt.IsZero() {
				c.fenceAt = now
			}
		}
		for _, c := range d.fenced {
			if !c.fenceAt.IsZero() && now.Sub(c.fenceAt) >= d.fenceGrace {
				d.unfenceLocked(c)
				d.forgetLocked(c)
			}
		}
	}
	d.mu.Unlock()
}

// purge drops what st's chains hold not yet handed out, and lifts st's fences: st ended,
// and its leases went back to ksidecar's pool with it.
func (d *dispatcher) purge(st *stream) {
	d.mu.Lock()
	for _, c := range d.chains {
		keep := c.q[:0]
		for _, m := range c.q {
			if m.st == st {
				d.drop(m)
			} else {
				keep = append(keep, m)
			}
		}
		clear(c.q[len(keep):])
		c.q = keep
		if c.fence != nil && c.fence.st == st {
			d.unfenceLocked(c)
		}
		d.forgetLocked(c)
	}
	d.mu.Unlock()
}
