// Message: one delivered record with its lease; AckResult: the future of its ack or nack.
package ksidecar

import (
	"context"
	"sync/atomic"
	"time"

	"ksidecar/clients/go/kspb"
)

// AckStatus is the server's answer to an ack or nack.
type AckStatus int32

const (
	AckUnspecified AckStatus = 0
	AckAccepted    AckStatus = AckStatus(kspb.AckStatus_ACCEPTED)
	AckInvalid     AckStatus = AckStatus(kspb.AckStatus_INVALID)   // malformed, of another group, or settled twice
	AckNotFound    AckStatus = AckStatus(kspb.AckStatus_NOT_FOUND) // no delivered record has it
	// AckStale: the lease is gone (revoked, expired and redelivered, from an earlier
	// stream or process). The record is, or will be, delivered again.
	AckStale AckStatus = AckStatus(kspb.AckStatus_STALE)
	// Only for AckWithCommit: a commit the broker confirmed covers the record.
	AckCommitted AckStatus = AckStatus(kspb.AckStatus_COMMITTED)
	// Only for AckWithCommit: the partition moved before a commit covered it; the record
	// is delivered again.
	AckLostToRebalance AckStatus = AckStatus(kspb.AckStatus_LOST_TO_REBALANCE)
	// Only for AckWithCommit: the commit that was to cover it failed (Reason says why).
	AckCommitFailed AckStatus = AckStatus(kspb.AckStatus_COMMIT_FAILED)
)

func (s AckStatus) String() string { return kspb.AckStatus(s).String() }

// AckResult resolves once ksidecar answered an ack or nack (or the library knows the
// answer: STALE for a lease of a stream that ended). Safe for concurrent use.
type AckResult struct {
	done   chan struct{}
	status AckStatus
	msg    string
	off    int64
}

func newAckResult() *AckResult { return &AckResult{done: make(chan struct{})} }

func (r *AckResult) resolve(st AckStatus, msg string) {
	r.status, r.msg = st, msg
	close(r.done)
}

// Ready is closed once the result is known.
func (r *AckResult) Ready() <-chan struct{} { return r.done }

// Get waits for the result. Its error is ctx's, when ctx ends first.
func (r *AckResult) Get(ctx context.Context) (AckStatus, error) {
	select {
	case <-r.done:
		return r.status, nil
	case <-ctx.Done():
		return AckUnspecified, ctx.Err()
	}
}

// Reason is the server's words for a status other than ACCEPTED ("" until Ready).
func (r *AckResult) Reason() string {
	select {
	case <-r.done:
		return r.msg
	default:
		return ""
	}
}

// CommittedOffset is, for AckWithCommit, the partition's commit point the broker confirmed
// when the answer came (the next offset it delivers from; -1 none); 0 otherwise.
func (r *AckResult) CommittedOffset() int64 {
	select {
	case <-r.done:
		return r.off
	default:
		return 0
	}
}

// Header is one record header; Value is nil for a null value.
type Header struct {
	Key   string
	Value []byte
}

// Message is one record, leased to this subscriber until Ack or Nack. Its methods are
// safe from any goroutine; the first Ack or Nack wins, later ones do nothing (their
// futures resolve INVALID).
type Message struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte // nil for a null key
	Value     []byte // nil for a null value
	Headers   []Header
	Timestamp time.Time // zero when unknown
	Attempt   int       // 1 on first delivery
	AckID     string

	st    *stream
	b     *leaseBatch
	ch    *chain // its chain, or nil (unordered)
	chain uint64 // its ordering_chain; 0: unordered
	size  int64
	state atomic.Int32 // bits: settled, handler returned
}

const (
	msgSettled  = 1
	msgReturned = 2
)

// end sets bit and returns the bits set before; ok is false when bit already was. The
// first end of a message takes it off its batch's live count.
func (m *Message) end(bit int32) (old int32, ok bool) {
	for {
		old = m.state.Load()
		if old&bit != 0 {
			return old, false
		}
		if m.state.CompareAndSwap(old, old|bit) {
			if old == 0 {
				m.b.live.Add(-1)
				m.st.release(m.size)
			}
			return old, true
		}
	}
}

// Ack acknowledges the record: it is done, and its offset may be committed.
func (m *Message) Ack() { m.settle(opAck, 0, nil) }

// Nack puts the record back; it is delivered again after delay (0: at once).
func (m *Message) Nack(delay time.Duration) { m.settle(opNack, delay, nil) }

// AckWithResult is Ack with a future of the server's answer.
func (m *Message) AckWithResult() *AckResult {
	r := newAckResult()
	m.settle(opAck, 0, r)
	return r
}

// AckWithCommit is AckWithResult whose future resolves only once a commit the broker
// confirmed covers the record (AckCommitted, with CommittedOffset), or AckLostToRebalance,
// AckCommitFailed, or AckAccepted when ksidecar's wait (5 s) ended first: the ack is then
// taken but not known durable. Such acks go in their own messages.
func (m *Message) AckWithCommit() *AckResult {
	r := newAckResult()
	m.settle(opAckCommit, 0, r)
	return r
}

// NackWithResult is Nack with a future of the server's answer.
func (m *Message) NackWithResult(delay time.Duration) *AckResult {
	r := newAckResult()
	m.settle(opNack, delay, r)
	return r
}

func (m *Message) settle(op int, delay time.Duration, fut *AckResult) {
	if m.ch != nil {
		m.st.d.settle(m, op, delay.Milliseconds(), fut)
		return
	}
	if _, ok := m.end(msgSettled); !ok {
		if fut != nil {
			fut.resolve(AckInvalid, "this message was already acked or nacked")
		}
		return
	}
	m.st.queue(op, m.AckID, delay.Milliseconds(), fut)
}

func timeUnixMilli(ms int64) time.Time { return time.UnixMilli(ms) }
