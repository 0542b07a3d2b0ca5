// Subscriber: Receive runs a Subscribe stream with bounded handlers, batched acks, lease
// extension, flow control as stream credits, and reconnects with backoff and jitter.
package ksidecar

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"ksidecar/clients/go/kspb"
)

// SubscriberConfig: zero fields take the defaults written beside them.
type SubscriberConfig struct {
	Group  string   // required
	Topics []string // required
	Name   string   // optional subscriber name, shown in the group's status

	// Flow control, sent to ksidecar as the stream's credits: the most records and
	// key+value bytes delivered and not yet acked (nor nacked) at once.
	MaxOutstandingMessages int   // default 10,000
	MaxOutstandingBytes    int64 // default 64 MiB
	// MaxConcurrentHandlers bounds the handler calls running at once (default 8).
	MaxConcurrentHandlers int

	// AckDeadline is the lease each delivery gets (default 30 s). While a handler still
	// runs, its lease is extended by this much a third of it before the end, for at most
	// MaxExtension in all (default 60 min); then the lease runs out and the record is
	// delivered again.
	AckDeadline  time.Duration
	MaxExtension time.Duration

	// Acks and nacks go out in one message every AckFlushInterval (default 5 ms) or
	// every AckBatchSize ids (default 1000), whichever comes first.
	AckFlushInterval time.Duration
	AckBatchSize     int
	// Plain acks (Ack, not AckWithResult) of consecutive offsets of a partition go out as
	// one ack range, whatever order the handlers acked them in between two flushes,
	// answered by a count and the ids refused: less to send, parse and answer. A ksidecar
	// older than ack ranges refuses them (INVALID); NoAckRanges sends every id on its own,
	// as before.
	NoAckRanges bool

	// ValueFormat and KeyFormat: "avro", "avro_plain", "json_schema", "protobuf" or "auto"
	// decode values or keys in the schema wire format with the schema registry (Message.ValueJSON,
	// KeyJSON); "binary" none; "" (default) the group's group.value_format, group.key_format.
	ValueFormat, KeyFormat string

	// Reconnects wait from MinBackoff (default 100 ms), doubling up to MaxBackoff
	// (default 5 s), with jitter. Until a first stream was up, Receive gives up after
	// ConnectTimeout (default 10 s) with ErrUnavailable; after that it retries for as
	// long as its ctx lasts.
	MinBackoff, MaxBackoff time.Duration
	ConnectTimeout         time.Duration

	// CloseTimeout bounds Receive's end: waiting for running handlers, then flushing
	// pending acks and waiting for their results (default 10 s).
	CloseTimeout time.Duration
}

func (c *SubscriberConfig) defaults() error {
	if c.Group == "" || len(c.Topics) == 0 {
		return configErr("SubscriberConfig needs a Group and at least one topic in Topics")
	}
	setDur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.MaxOutstandingMessages <= 0 {
		c.MaxOutstandingMessages = 10000
	}
	if c.MaxOutstandingBytes <= 0 {
		c.MaxOutstandingBytes = 64 << 20
	}
	if c.MaxConcurrentHandlers <= 0 {
		c.MaxConcurrentHandlers = 8
	}
	if c.AckBatchSize <= 0 {
		c.AckBatchSize = 1000
	}
	setDur(&c.AckDeadline, 30*time.Second)
	setDur(&c.MaxExtension, 60*time.Minute)
	setDur(&c.AckFlushInterval, 5*time.Millisecond)
	setDur(&c.MinBackoff, 100*time.Millisecond)
	setDur(&c.MaxBackoff, 5*time.Second)
	setDur(&c.ConnectTimeout, 10*time.Second)
	setDur(&c.CloseTimeout, 10*time.Second)
	if c.AckDeadline < time.Millisecond {
		return configErr("AckDeadline %v is under 1 ms", c.AckDeadline)
	}
	return nil
}

// Subscriber consumes one group's topics. Make it with Client.Subscriber.
type Subscriber struct {
	c   *Client
	cfg SubscriberConfig
	log *slog.Logger

	running atomic.Bool
	cur     atomic.Pointer[stream]
	// held, heldBytes: records (and their bytes) delivered on any stream and neither
	// settled nor returned from their handler. A new stream's credits leave out what
	// older streams still hold, so the process never holds more than asked.
	held, heldBytes atomic.Int64
	omu             sync.Mutex
	old             []*stream    // ended streams whose records some handler still holds
	streams         atomic.Int64 // streams opened, for tests and logs
	stale           staleLog
}

// Subscriber makes a Subscriber; cfg's zero fields take their defaults.
func (c *Client) Subscriber(cfg SubscriberConfig) (*Subscriber, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	s := &Subscriber{c: c, cfg: cfg, log: c.log.With("group", cfg.Group)}
	s.stale.log = s.log
	return s, nil
}

// Streams says how many Subscribe streams Receive opened (1 plus reconnects).
func (s *Subscriber) Streams() int64 { return s.streams.Load() }

// Receive calls f for each record, with at most MaxConcurrentHandlers calls at once,
// until ctx ends or an error that a reconnect cannot fix (ErrUnauthenticated,
// ErrPermissionDenied, ErrInvalidArgument, ErrNotFound, ErrResourceExhausted, or
// ErrUnavailable before any stream was up). f must Ack or Nack each message, from any
// goroutine; the ctx given to f ends when Receive's does.
//
// When ctx ends, Receive stops giving out records, waits for running handlers, sends
// the acks still pending and waits for their results, all within CloseTimeout. It
// returns nil then, or an ErrTimeout that says what did not finish.
func (s *Subscriber) Receive(ctx context.Context, f func(context.Context, *Message)) error {
	if !s.running.CompareAndSwap(false, true) {
		return &Error{Kind: KindInvalidArgument, Op: "receive", Msg: "Receive is already running"}
	}
	defer s.running.Store(false)
	d := newDispatcher(ctx, f, s.cfg.MaxOutstandingMessages, s.cfg.MaxConcurrentHandlers)
	quit := d.quit
	var workers sync.WaitGroup
	for i := 0; i < s.cfg.MaxConcurrentHandlers; i++ {
		workers.Add(1)
		go func() {
			defer workers.Done()
			d.worker()
		}()
	}
	extQuit := make(chan struct{})
	extDone := make(chan struct{})
	go s.extender(extQuit, extDone)
	defer func() {
		close(extQuit)
		<-extDone
	}()

	start := time.Now()
	everUp := false
	backoff := s.cfg.MinBackoff
	for {
		for s.held.Load() >= int64(s.cfg.MaxOutstandingMessages) ||
			s.heldBytes.Load() >= s.cfg.MaxOutstandingBytes {
			// An old stream's records fill the credits: wait for their handlers.
			select {
			case <-ctx.Done():
				close(quit)
				workers.Wait()
				s.stale.flush()
				return nil
			case <-time.After(10 * time.Millisecond):
			}
		}
		st := newStream(s, d)
		st.credRecords = int64(s.cfg.MaxOutstandingMessages) - s.held.Load()
		st.credBytes = s.cfg.MaxOutstandingBytes - s.heldBytes.Load()
		st.reduced.Store(st.credRecords < int64(s.cfg.MaxOutstandingMessages) ||
			st.credBytes < s.cfg.MaxOutstandingBytes)
		s.streams.Add(1)
		st.start()
		s.cur.Store(st)
		var err error
		select {
		case <-st.done:
			err = st.err
		case <-ctx.Done():
			return s.close(st, quit, &workers)
		}
		s.cur.Store(nil)
		st.die("the stream ended: " + errText(err))
		s.omu.Lock()
		s.old = append(s.old, st)
		s.omu.Unlock()
		if st.up() {
			everUp = true
			backoff = s.cfg.MinBackoff
		}
		if !retryable(err) {
			close(quit)
			workers.Wait()
			return wrapErr("subscribe to group "+s.cfg.Group, s.c.target, err)
		}
		if !everUp && time.Since(start) > s.cfg.ConnectTimeout {
			close(quit)
			workers.Wait()
			e := wrapErr("subscribe to group "+s.cfg.Group, s.c.target, err).(*Error)
			e.Kind = KindUnavailable
			e.Msg = fmt.Sprintf("no stream came up within %v (ConnectTimeout): %s",
				s.cfg.ConnectTimeout, e.Msg)
			return e
		}
		d := backoff/2 + rand.N(backoff/2+1)
		s.log.Warn("ksidecar: Subscribe stream broke; reconnecting", "target", s.c.target,
			"err", errText(err), "in", d)
		select {
		case <-time.After(d):
		case <-ctx.Done():
			close(quit)
			workers.Wait()
			s.stale.flush()
			return nil
		}
		backoff = min(backoff*2, s.cfg.MaxBackoff)
	}
}

// close ends Receive: handlers first, then acks and their results, then the stream.
func (s *Subscriber) close(st *stream, quit chan struct{}, workers *sync.WaitGroup) error {
	deadline := time.Now().Add(s.cfg.CloseTimeout)
	close(quit)
	wdone := make(chan struct{})
	go func() { workers.Wait(); close(wdone) }()
	var problems []string
	select {
	case <-wdone:
	case <-time.After(time.Until(deadline)):
		problems = append(problems, "handlers still running")
	}
	if n := st.drain(deadline); n > 0 {
		problems = append(problems, fmt.Sprintf("%d ack results did not arrive", n))
	}
	if st.cs != nil { // set before the sender started, which drain waited out
		st.cs.CloseSend()
	}
	select {
	case <-st.done:
	case <-time.After(max(time.Until(deadline), 100*time.Millisecond)):
	}
	st.cancel()
	<-st.done
	s.cur.Store(nil)
	st.die("the subscriber closed")
	s.stale.flush()
	if len(problems) > 0 {
		return &Error{Kind: KindTimeout, Op: "close subscriber of group " + s.cfg.Group,
			Target: s.c.target, Msg: fmt.Sprintf("%v within CloseTimeout %v", problems,
				s.cfg.CloseTimeout)}
	}
	return nil
}

// extender extends the leases of records still in (or waiting for) a handler.
func (s *Subscriber) extender(quit, done chan struct{}) {
	defer close(done)
	tick := min(max(s.cfg.AckDeadline/10, 20*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case now := <-t.C:
			if st := s.cur.Load(); st != nil {
				st.extendDue(now)
				st.restoreCredits()
			}
		}
	}
}

func errText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// staleLog counts acks that came back STALE (or were answered STALE locally) and
// logs them at most once a second, so a reconnect does not print one line per record.
type staleLog struct {
	mu    sync.Mutex
	log   *slog.Logger
	n     int
	why   string
	last  time.Time
	total atomic.Int64
}

func (l *staleLog) add(n int, why string) {
	l.total.Add(int64(n))
	l.mu.Lock()
	l.n += n
	l.why = why
	if time.Since(l.last) >= time.Second {
		l.flushLocked()
	}
	l.mu.Unlock()
}

func (l *staleLog) flush() {
	l.mu.Lock()
	l.flushLocked()
	l.mu.Unlock()
}

func (l *staleLog) flushLocked() {
	if l.n > 0 {
		l.log.Warn("ksidecar: acks came back STALE; those records are (or will be) delivered again",
			"count", l.n, "reason", l.why)
	}
	l.n = 0
	l.last = time.Now()
}

// StaleAcks is how many acks and nacks resolved STALE so far.
func (s *Subscriber) StaleAcks() int64 { return s.stale.total.Load() }

// ---- one stream ----

const (
	opAck = iota
	opNack
	opExtend
	opAckCommit    // an ack that waits for its commit: answered at once, then ...
	opAckCommitted // ... again once committed (the second answer's in-flight entry)
)

// leaseBatch is the records of one received batch; live counts those neither settled
// nor returned from their handler, the ones whose leases are extended.
type leaseBatch struct {
	msgs    []Message
	chained int // records of an ordering chain
	recvAt  time.Time
	lastExt time.Time
	live    atomic.Int32
}

type pendingList struct {
	ids  []string
	futs []*AckResult // nil, or parallel to ids
}

func (p *pendingList) add(id string, fut *AckResult) {
	p.ids = append(p.ids, id)
	if fut != nil && p.futs == nil {
		p.futs = make([]*AckResult, len(p.ids)-1, cap(p.ids))
	}
	if p.futs != nil {
		p.futs = append(p.futs, fut)
	}
}

// inflight is one sent request whose AckResults have not come back. The server
// answers a stream's requests in order, one AckResults per request.
type inflight struct {
	op    int
	first string
	n     int
	futs  []*AckResult
	byPos bool // answered by position (ackRangeRequest): a count and the refused ids
}

type stream struct {
	s      *Subscriber
	d      *dispatcher
	ctx    context.Context
	cancel context.CancelFunc
	cs     kspb.Consumer_SubscribeClient
	opened time.Time
	gotAny atomic.Bool
	dead   atomic.Bool
	done   chan struct{} // closed when the receive loop ended; err is why
	err    error

	mu      sync.Mutex // pending acks and nacks
	acks    pendingList
	cacks   pendingList // acks that wait for their commit
	nacks   map[nackKey]*pendingList
	closing bool
	kick    chan struct{} // first pending id
	sendMu  sync.Mutex    // one sender at a time: takes pending ids and sends them in order
	stopped chan struct{} // sender gone
	extend  chan []string
	ctrl    chan *kspb.SubscribeRequest // credit updates

	credRecords, credBytes int64       // the credits this stream opened with
	reduced                atomic.Bool // opened with less than asked (older streams held some)
	held, heldBytes        atomic.Int64
	stopReq                chan struct{}

	imu sync.Mutex
	in  []inflight

	bmu     sync.Mutex
	batches []*leaseBatch
}

func newStream(s *Subscriber, d *dispatcher) *stream {
	ctx, cancel := context.WithCancel(context.Background())
	return &stream{s: s, d: d, ctx: ctx, cancel: cancel,
		done: make(chan struct{}), kick: make(chan struct{}, 1), stopped: make(chan struct{}), extend: make(chan []string, 4),
		stopReq: make(chan struct{}), ctrl: make(chan *kspb.SubscribeRequest, 1)}
}

// up says whether the stream got as far as working: it got a message, or lived a
// second without an error.
func (st *stream) up() bool {
	return st.gotAny.Load() || (!st.opened.IsZero() && time.Since(st.opened) > time.Second)
}

func (st *stream) start() {
	cfg := &st.s.cfg
	go func() {
		defer close(st.done)
		cs, err := st.s.c.consumer.Subscribe(st.ctx, grpc.ForceCodecV2(streamCodec{}))
		if err != nil {
			st.err = err
			close(st.stopped)
			return
		}
		st.cs = cs
		err = cs.Send(&kspb.SubscribeRequest{Kind: &kspb.SubscribeRequest_Open{Open: &kspb.Open{
			Group: cfg.Group, Topics: cfg.Topics, Subscriber: cfg.Name,
			Credits:    &kspb.Credits{Records: st.credRecords, Bytes: st.credBytes},
			DeadlineMs: int32(cfg.AckDeadline.Milliseconds()), OrderedBatches: true,
			ValueFormat: cfg.ValueFormat, KeyFormat: cfg.KeyFormat}}})
		if err != nil && err != io.EOF {
			st.err = err
			close(st.stopped)
			return
		}
		st.opened = time.Now()
		go st.sender()
		st.err = st.recvLoop()
	}()
}

func (st *stream) recvLoop() error {
	var results []ackResult
	for {
		var resp rawResponse
		if err := st.cs.RecvMsg(&resp); err != nil {
			if err == io.EOF {
				return errors.New("ksidecar ended the stream")
			}
			return err
		}
		st.gotAny.Store(true)
		kind, body, err := respKind(resp.buf)
		if err != nil {
			return err
		}
		switch kind {
		case 1:
			b := &leaseBatch{recvAt: time.Now()}
			b.lastExt = b.recvAt
			if err := decodeBatch(st, b, body); err != nil {
				return err
			}
			if len(b.msgs) == 0 {
				continue
			}
			b.live.Store(int32(len(b.msgs)))
			var bytes int64
			for i := range b.msgs {
				bytes += b.msgs[i].size
			}
			st.held.Add(int64(len(b.msgs)))
			st.heldBytes.Add(bytes)
			st.s.held.Add(int64(len(b.msgs)))
			st.s.heldBytes.Add(bytes)
			st.bmu.Lock()
			st.batches = append(st.batches, b)
			st.bmu.Unlock()
			st.d.dispatch(st, b, st.s.cfg.MaxConcurrentHandlers)
		case 4:
			var accepted int
			if results, accepted, err = decodeAckResults(body, results); err != nil {
				return err
			}
			st.onResults(results, accepted)
		case 2, 3:
			st.s.log.Debug("ksidecar: assignment or revocation", "kind", kind)
		}
	}
}

// queue adds one ack or nack to the pending batch, or answers STALE at once when the
// stream has ended (its leases went back to ksidecar's pool with it).
func (st *stream) queue(op int, id string, nk nackKey, fut *AckResult) {
	st.mu.Lock()
	if st.closing || st.dead.Load() {
		st.mu.Unlock()
		if fut != nil {
			fut.resolve(AckStale, "its stream ended before the ack was sent; the record is delivered again")
		}
		st.s.stale.add(1, "acked after its stream ended")
		return
	}
	var n int
	if op == opAck {
		st.acks.add(id, fut)
		n = len(st.acks.ids)
	} else if op == opAckCommit {
		st.cacks.add(id, fut)
		n = len(st.cacks.ids)
	} else {
		if st.nacks == nil {
			st.nacks = map[nackKey]*pendingList{}
		}
		p := st.nacks[nk]
		if p == nil {
			p = &pendingList{}
			st.nacks[nk] = p
		}
		p.add(id, fut)
		n = len(p.ids)
	}
	st.mu.Unlock()
	if n == 1 {
		select {
		case st.kick <- struct{}{}:
		default:
		}
	}
	if n >= st.s.cfg.AckBatchSize {
		// A full batch goes out from here: no wake-up of the sender on the way.
		st.flush()
	}
}

// sender is the only goroutine that sends on the stream after open.
func (st *stream) sender() {
	defer close(st.stopped)
	t := time.NewTimer(time.Hour)
	t.Stop()
	var tc <-chan time.Time
	for {
		select {
		case <-st.kick:
			if tc == nil {
				t.Reset(st.s.cfg.AckFlushInterval)
				tc = t.C
			}
		case <-tc:
			tc = nil
			st.flush()
		case req := <-st.ctrl:
			st.sendMu.Lock()
			st.cs.SendMsg(req)
			st.sendMu.Unlock()
		case ids := <-st.extend:
			st.sendMu.Lock()
			st.send(opExtend, ids, nil, &kspb.SubscribeRequest{Kind: &kspb.SubscribeRequest_ModifyDeadline{
				ModifyDeadline: &kspb.ExtendIds{AckIds: ids,
					DeadlineMs: st.s.cfg.AckDeadline.Milliseconds()}}})
			st.sendMu.Unlock()
		case <-st.stopReq:
			st.flush()
			return
		case <-st.ctx.Done():
			return
		}
	}
}

const maxIdsPerMessage = 20000 // well under the server's 4 MiB message limit

// maxRangeRecords is the most records a message with ack ranges may name (ksidecar's
// KS_ACK_RANGE_MAX): its answer, a result for each refused record, must fit one message.
const maxRangeRecords = 8000

func (st *stream) flush() {
	st.sendMu.Lock()
	defer st.sendMu.Unlock()
	st.mu.Lock()
	acks, cacks, nacks := st.acks, st.cacks, st.nacks
	st.acks, st.cacks, st.nacks = pendingList{ids: make([]string, 0, min(st.s.cfg.AckBatchSize, 4096))}, pendingList{}, nil
	st.mu.Unlock()
	if acks.futs == nil && !st.s.cfg.NoAckRanges {
		// Plain acks: consecutive offsets as ranges, answered by position.
		for ids := acks.ids; len(ids) > 0; {
			n := min(len(ids), maxRangeRecords)
			st.imu.Lock()
			st.in = append(st.in, inflight{op: opAck, n: n, byPos: true})
			st.imu.Unlock()
			if err := st.cs.SendMsg(ackRangeRequest(ids[:n])); err != nil {
				st.s.log.Debug("ksidecar: send failed", "err", err)
			}
			ids = ids[n:]
		}
	} else {
		st.sendChunks(opAck, acks, func(ids []string) any { return ackRequest(ids) })
	}
	st.sendChunks(opAckCommit, cacks, func(ids []string) any {
		return &kspb.SubscribeRequest{Kind: &kspb.SubscribeRequest_Ack{
			Ack: &kspb.AckIds{AckIds: ids, WaitCommit: true}}}
	})
	for nk, p := range nacks {
		st.sendChunks(opNack, *p, func(ids []string) any {
			return &kspb.SubscribeRequest{Kind: &kspb.SubscribeRequest_Nack{
				Nack: &kspb.NackIds{AckIds: ids, DelayMs: nk.delayMs, Reason: nk.reason,
					DeadLetter: nk.deadLetter}}}
		})
	}
}

// sendChunks sends p's ids in messages of at most maxIdsPerMessage.
func (st *stream) sendChunks(op int, p pendingList, mk func([]string) any) {
	for len(p.ids) > 0 {
		n := min(len(p.ids), maxIdsPerMessage)
		var futs []*AckResult
		if p.futs != nil {
			futs = p.futs[:n]
			p.futs = p.futs[n:]
		}
		ids := p.ids[:n]
		p.ids = p.ids[n:]
		st.send(op, ids, futs, mk(ids))
	}
}

// send registers the request as in flight, then sends it. A failed send leaves it
// there: die answers it STALE. The caller holds sendMu.
func (st *stream) send(op int, ids []string, futs []*AckResult, req any) {
	st.imu.Lock()
	st.in = append(st.in, inflight{op: op, first: ids[0], n: len(ids), futs: futs})
	st.imu.Unlock()
	if err := st.cs.SendMsg(req); err != nil {
		st.s.log.Debug("ksidecar: send failed", "err", err)
	}
}

func (st *stream) onResults(rs []ackResult, accepted int) {
	if len(rs) == 0 && accepted == 0 {
		return
	}
	st.imu.Lock()
	idx := -1
	if len(rs) > 0 {
		for i := range st.in {
			if !st.in[i].byPos && st.in[i].n == len(rs) && st.in[i].first == string(rs[0].id) {
				idx = i
				break
			}
		}
	}
	if idx < 0 {
		// An answer by position: the oldest such request of as many records.
		for i := range st.in {
			if st.in[i].byPos && st.in[i].n == accepted+len(rs) {
				idx = i
				break
			}
		}
	}
	if idx < 0 {
		st.imu.Unlock()
		first := ""
		if len(rs) > 0 {
			first = string(rs[0].id)
		}
		st.s.log.Warn("ksidecar: ack results that match no request sent", "first", first,
			"accepted", accepted)
		return
	}
	e := st.in[idx]
	if idx == 0 {
		st.in[0] = inflight{}
		st.in = st.in[1:]
	} else {
		st.in = append(st.in[:idx], st.in[idx+1:]...)
	}
	if e.op == opAckCommit {
		// The answer at once: a refused ack resolves now; the others wait for the second
		// answer, which comes with the same ids in the same order.
		var later []*AckResult
		if e.futs != nil {
			later = make([]*AckResult, len(rs))
			for i := range rs {
				if rs[i].status == AckAccepted {
					later[i], e.futs[i] = e.futs[i], nil
				}
			}
		}
		st.in = append(st.in, inflight{op: opAckCommitted, first: e.first, n: e.n, futs: later})
	}
	st.imu.Unlock()
	if e.op == opAckCommitted {
		for i := range rs {
			if e.futs != nil && e.futs[i] != nil {
				e.futs[i].off = rs[i].committed
				e.futs[i].resolve(rs[i].status, string(rs[i].msg))
			}
		}
		return
	}
	if e.op == opNack {
		st.d.nackResults(rs)
	}
	var bad, stale int
	var firstBad, firstStale *ackResult
	for i := range rs {
		r := &rs[i]
		if e.futs != nil && e.futs[i] != nil {
			e.futs[i].resolve(r.status, string(r.msg))
		}
		switch {
		case r.status == AckAccepted:
		case r.status == AckStale && e.op != opExtend:
			if stale++; firstStale == nil {
				firstStale = r
			}
		default:
			if bad++; firstBad == nil {
				firstBad = r
			}
		}
	}
	if stale > 0 {
		st.s.stale.add(stale, string(firstStale.msg))
	}
	if bad > 0 {
		what := map[int]string{opAck: "acks", opAckCommit: "acks", opNack: "nacks",
			opExtend: "lease extensions"}[e.op]
		lvl := slog.LevelWarn
		if e.op == opExtend {
			lvl = slog.LevelDebug // a lease that moved on is not extended: nothing to do
		}
		st.s.log.Log(context.Background(), lvl, "ksidecar: "+what+" refused", "count", bad,
			"first", string(firstBad.id), "status", firstBad.status.String(),
			"reason", string(firstBad.msg))
	}
}

// release takes one ended record (of size bytes) off the held counts.
func (st *stream) release(size int64) {
	st.held.Add(-1)
	st.heldBytes.Add(-size)
	st.s.held.Add(-1)
	st.s.heldBytes.Add(-size)
}

// restoreCredits gives a stream opened with reduced credits the full ones, once the
// older streams' records are all done.
func (st *stream) restoreCredits() {
	s := st.s
	if !st.reduced.Load() {
		return
	}
	s.omu.Lock()
	keep := s.old[:0]
	for _, o := range s.old {
		if o.held.Load() > 0 || o.heldBytes.Load() > 0 {
			keep = append(keep, o)
		}
	}
	clear(s.old[len(keep):])
	s.old = keep
	s.omu.Unlock()
	if len(keep) > 0 {
		return
	}
	st.reduced.Store(false)
	select {
	case st.ctrl <- &kspb.SubscribeRequest{Kind: &kspb.SubscribeRequest_Credits{Credits: &kspb.Credits{
		Records: int64(s.cfg.MaxOutstandingMessages), Bytes: s.cfg.MaxOutstandingBytes}}}:
		s.log.Debug("ksidecar: credits back to full after a reconnect")
	case <-st.stopped:
	}
}

// extendDue sends ExtendIds for the live records of batches whose last extension
// (or delivery) is two thirds of a deadline old, within MaxExtension of delivery.
func (st *stream) extendDue(now time.Time) {
	cfg := &st.s.cfg
	due := cfg.AckDeadline * 2 / 3
	var ids []string
	st.bmu.Lock()
	keep := st.batches[:0]
	for _, b := range st.batches {
		if b.live.Load() == 0 {
			continue
		}
		keep = append(keep, b)
		if now.Sub(b.lastExt) < due || now.Sub(b.recvAt) >= cfg.MaxExtension {
			continue
		}
		b.lastExt = now
		for i := range b.msgs {
			if b.msgs[i].state.Load() == 0 {
				ids = append(ids, b.msgs[i].AckID)
			}
		}
	}
	for i := len(keep); i < len(st.batches); i++ {
		st.batches[i] = nil
	}
	st.batches = keep
	st.bmu.Unlock()
	for len(ids) > 0 {
		n := min(len(ids), maxIdsPerMessage)
		select {
		case st.extend <- ids[:n]:
		case <-st.stopped:
			return
		}
		ids = ids[n:]
	}
}

// drain sends what is pending and waits for every result until deadline; it returns
// how many results are still missing.
func (st *stream) drain(deadline time.Time) int {
	select {
	case st.stopReq <- struct{}{}:
	case <-st.stopped:
	case <-time.After(time.Until(deadline)):
		st.cancel() // still opening (a connect in progress): give up on it
	}
	<-st.stopped
	st.mu.Lock()
	st.closing = true
	st.mu.Unlock()
	if st.cs != nil {
		st.flush() // what came in between
	}
	for {
		st.imu.Lock()
		n := 0
		for _, e := range st.in {
			n += e.n
		}
		st.imu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		select {
		case <-st.done:
			return n
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// die marks the stream ended and answers STALE for what it will never answer.
func (st *stream) die(why string) {
	st.dead.Store(true)
	st.d.purge(st)
	st.cancel()
	<-st.stopped
	st.sendMu.Lock() // a flush from a handler finishes (its sends fail) before we look
	defer st.sendMu.Unlock()
	st.mu.Lock()
	st.closing = true
	acks, cacks, nacks := st.acks, st.cacks, st.nacks
	st.acks, st.cacks, st.nacks = pendingList{}, pendingList{}, nil
	st.mu.Unlock()
	n := 0
	resolve := func(futs []*AckResult, k int, msg string) {
		for _, f := range futs {
			if f != nil {
				f.resolve(AckStale, msg)
			}
		}
		n += k
	}
	const unsent = "its stream ended before the ack was sent; the record is delivered again"
	resolve(acks.futs, len(acks.ids), unsent)
	resolve(cacks.futs, len(cacks.ids), unsent)
	for _, p := range nacks {
		resolve(p.futs, len(p.ids), unsent)
	}
	st.imu.Lock()
	in := st.in
	st.in = nil
	st.imu.Unlock()
	for _, e := range in {
		if e.op == opAckCommitted {
			// Taken already; whether a commit covers it is not known.
			resolve(e.futs, 0, "its stream ended before the commit was confirmed; the record may be delivered again")
		} else if e.op != opExtend {
			resolve(e.futs, e.n, "its stream ended before the result came; the record may be delivered again")
		}
	}
	if n > 0 {
		st.s.stale.add(n, why)
	}
}

// Config is the configuration in force, defaults filled in.
func (s *Subscriber) Config() SubscriberConfig { return s.cfg }
