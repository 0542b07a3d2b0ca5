// Typed errors: each names what went wrong, where, and what ksidecar said.
package ksidecar

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Kind says what class of problem an Error is. Compare with errors.Is against the
// Err* sentinels below (errors.Is(err, ksidecar.ErrUnauthenticated)).
type Kind int

const (
	KindUnknown           Kind = iota
	KindUnavailable            // ksidecar could not be reached (bad target, not running, Kafka down)
	KindUnauthenticated        // no token, or a wrong one
	KindPermissionDenied       // the token's scopes do not cover the group or topic
	KindInvalidArgument        // a bad request (group name, topics, credits, deadline)
	KindNotFound               // unknown group
	KindResourceExhausted      // a limit (credits above the server's maximum, too many streams)
	KindTimeout                // Close's wait for ack results ran out
	KindClosed                 // the Subscriber or Client is closed
	KindProduce                // a record could not be produced
	KindConfig                 // a bad option
)

var kindNames = map[Kind]string{
	KindUnknown: "unknown error", KindUnavailable: "unavailable",
	KindUnauthenticated: "unauthenticated", KindPermissionDenied: "permission denied",
	KindInvalidArgument: "invalid argument", KindNotFound: "not found",
	KindResourceExhausted: "resource exhausted", KindTimeout: "timeout",
	KindClosed: "closed", KindProduce: "produce failed", KindConfig: "bad config",
}

func (k Kind) String() string { return kindNames[k] }

// Error is every error this package returns. Op names the call ("subscribe",
// "produce", "dial"), Target the ksidecar address, Msg the server's or our words.
type Error struct {
	Kind   Kind
	Op     string
	Target string
	Msg    string
	Code   codes.Code // the gRPC status code, when one came
	Cause  error
}

func (e *Error) Error() string {
	s := "ksidecar: " + e.Op
	if e.Target != "" {
		s += " at " + e.Target
	}
	s += ": " + e.Kind.String()
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

func (e *Error) Unwrap() error { return e.Cause }

// Is makes errors.Is(err, ErrX) true for any *Error of X's kind.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Op == "" && t.Kind == e.Kind
}

// Sentinels for errors.Is.
var (
	ErrUnavailable       = &Error{Kind: KindUnavailable}
	ErrUnauthenticated   = &Error{Kind: KindUnauthenticated}
	ErrPermissionDenied  = &Error{Kind: KindPermissionDenied}
	ErrInvalidArgument   = &Error{Kind: KindInvalidArgument}
	ErrNotFound          = &Error{Kind: KindNotFound}
	ErrResourceExhausted = &Error{Kind: KindResourceExhausted}
	ErrTimeout           = &Error{Kind: KindTimeout}
	ErrClosed            = &Error{Kind: KindClosed}
	ErrProduce           = &Error{Kind: KindProduce}
	ErrConfig            = &Error{Kind: KindConfig}
)

var codeKinds = map[codes.Code]Kind{
	codes.Unavailable: KindUnavailable, codes.Unauthenticated: KindUnauthenticated,
	codes.PermissionDenied: KindPermissionDenied, codes.InvalidArgument: KindInvalidArgument,
	codes.NotFound: KindNotFound, codes.ResourceExhausted: KindResourceExhausted,
	codes.DeadlineExceeded: KindTimeout,
}

// hints add what a person can do to the server's words.
var hints = map[Kind]string{
	KindUnauthenticated: " (send a bearer token the server's auth.tokens_file lists: WithToken)",
}

// wrapErr turns a gRPC error into an *Error; it keeps an *Error as it is.
func wrapErr(op, target string, err error) error {
	if err == nil {
		return nil
	}
	var ke *Error
	if errors.As(err, &ke) {
		return err
	}
	st, ok := status.FromError(err)
	if !ok {
		return &Error{Kind: KindUnknown, Op: op, Target: target, Msg: err.Error(), Cause: err}
	}
	k := codeKinds[st.Code()]
	msg := st.Message()
	if k == KindUnavailable && msg != "" {
		msg = "cannot reach ksidecar: " + msg
	}
	return &Error{Kind: k, Op: op, Target: target, Msg: msg + hints[k], Code: st.Code(), Cause: err}
}

// retryable says whether a stream error is worth a reconnect: an unreachable or
// restarting server and a broken stream are; a refused token or a bad request are not.
func retryable(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return true
	}
	switch st.Code() {
	case codes.Unavailable, codes.Internal, codes.Unknown, codes.Aborted, codes.Canceled,
		codes.DeadlineExceeded:
		return true
	}
	return false
}

func configErr(format string, a ...any) error {
	return &Error{Kind: KindConfig, Op: "config", Msg: fmt.Sprintf(format, a...)}
}
