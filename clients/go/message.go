// Message: one delivered record with its lease; AckResult: the future of its ack or nack.
package ksidecar

import (
	"context"
	"encoding/json"
	"errors"
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
	// Set when the key or value is shown in a schema format (Config.ValueFormat, KeyFormat or
	// the group's): its JSON, or why it could not be decoded. Key and Value keep the bytes.
	KeyDecoded, ValueDecoded *Decoded

	st    *stream
	b     *leaseBatch
	ch    *chain // its chain, or nil (unordered)
	chain uint64 // its ordering_chain; 0: unordered
	size  int64
	state atomic.Int32 // bits: settled, handler returned
}

// Decoded is a key or value in the schema wire format decoded with its schema from the
// schema registry.
type Decoded struct {
	JSON     string // the JSON text; "" when it could not be decoded
	Format   string // "avro", "json_schema" or "protobuf"
	SchemaID int32  // its schema id, when in the wire format
	Error    string // why it could not be decoded (unknown schema id, corrupt bytes)
}

// DecodeError is ValueJSON's and KeyJSON's error for a key or value ksidecar could not decode.
type DecodeError struct{ Reason string }

func (e *DecodeError) Error() string { return "ksidecar: not decoded: " + e.Reason }

// ValueJSON unmarshals the decoded value into v (encoding/json). It returns a *DecodeError
// when ksidecar could not decode it, and ErrNotDecoded when it was not shown in a schema
// format (a binary format, a null value).
func (m *Message) ValueJSON(v any) error { return m.ValueDecoded.unmarshal(v) }

// KeyJSON is ValueJSON for the key.
func (m *Message) KeyJSON(v any) error { return m.KeyDecoded.unmarshal(v) }

// ErrNotDecoded: the key or value was not shown in a schema format.
var ErrNotDecoded = errors.New("ksidecar: not shown in a schema format (see Config.ValueFormat)")

func (d *Decoded) unmarshal(v any) error {
	if d == nil {
		return ErrNotDecoded
	}
	if d.Error != "" {
		return &DecodeError{Reason: d.Error}
	}
	return json.Unmarshal([]byte(d.JSON), v)
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
func (m *Message) Ack() { m.settle(opAck, nackKey{}, nil) }

// Nack puts the record back; it is delivered again after delay (0: at once).
func (m *Message) Nack(delay time.Duration) {
	m.settle(opNack, nackKey{delayMs: delay.Milliseconds()}, nil)
}

// DeadLetter rejects the record as poison (a nack with dead_letter): ksidecar puts it in the
// group's dead-letter topic at once, whatever its attempt count, with reason in its
// ksidecar.last_error header. A group without a dead-letter topic delivers it again.
func (m *Message) DeadLetter(reason string) {
	m.settle(opNack, nackKey{reason: reason, deadLetter: true}, nil)
}

// AckWithResult is Ack with a future of the server's answer.
func (m *Message) AckWithResult() *AckResult {
	r := newAckResult()
	m.settle(opAck, nackKey{}, r)
	return r
}

// AckWithCommit is AckWithResult whose future resolves only once a commit the broker
// confirmed covers the record (AckCommitted, with CommittedOffset), or AckLostToRebalance,
// AckCommitFailed, or AckAccepted when ksidecar's wait (5 s) ended first: the ack is then
// taken but not known durable. Such acks go in their own messages.
func (m *Message) AckWithCommit() *AckResult {
	r := newAckResult()
	m.settle(opAckCommit, nackKey{}, r)
	return r
}

// NackWithResult is Nack with a future of the server's answer.
func (m *Message) NackWithResult(delay time.Duration) *AckResult {
	r := newAckResult()
	m.settle(opNack, nackKey{delayMs: delay.Milliseconds()}, r)
	return r
}

// DeadLetterWithResult is DeadLetter with a future of the server's answer.
func (m *Message) DeadLetterWithResult(reason string) *AckResult {
	r := newAckResult()
	m.settle(opNack, nackKey{reason: reason, deadLetter: true}, r)
	return r
}

// nackKey is what a nack says besides its id; nacks that say the same go in one message.
type nackKey struct {
	delayMs    int64
	reason     string
	deadLetter bool
}

func (m *Message) settle(op int, nk nackKey, fut *AckResult) {
	if m.ch != nil {
		m.st.d.settle(m, op, nk, fut)
		return
	}
	if _, ok := m.end(msgSettled); !ok {
		if fut != nil {
			fut.resolve(AckInvalid, "this message was already acked or nacked")
		}
		return
	}
	m.st.queue(op, m.AckID, nk, fut)
}

func timeUnixMilli(ms int64) time.Time { return time.UnixMilli(ms) }
