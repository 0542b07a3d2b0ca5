// Client: one gRPC connection to ksidecar, with TLS and a bearer token, that makes
// Subscribers and Publishers.
package ksidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"ksidecar/clients/go/kspb"
)

// Client is safe for concurrent use. Close it when done.
type Client struct {
	target   string
	conn     *grpc.ClientConn
	consumer kspb.ConsumerClient
	producer kspb.ProducerClient
	log      *slog.Logger
}

type clientOpts struct {
	tls         *tls.Config
	tlsErr      error
	token       string
	logger      *slog.Logger
	dialTimeout time.Duration
	checkHealth bool
	extra       []grpc.DialOption
}

// Option configures Dial.
type Option func(*clientOpts)

// WithToken sends "authorization: Bearer token" on every call (ksidecar's auth.tokens_file).
func WithToken(token string) Option { return func(o *clientOpts) { o.token = token } }

// WithTLS connects over TLS with this config (root CAs, client certificates for mTLS).
func WithTLS(cfg *tls.Config) Option { return func(o *clientOpts) { o.tls = cfg } }

// WithTLSFiles connects over TLS, trusting the PEM CA in caFile (empty: the system's
// roots) and, when certFile and keyFile are given, presenting that client certificate (mTLS).
func WithTLSFiles(caFile, certFile, keyFile string) Option {
	return func(o *clientOpts) {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if caFile != "" {
			pem, err := os.ReadFile(caFile)
			if err != nil {
				o.tlsErr = configErr("TLS CA file: %v", err)
				return
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				o.tlsErr = configErr("TLS CA file %s holds no PEM certificate", caFile)
				return
			}
			cfg.RootCAs = pool
		}
		if certFile != "" || keyFile != "" {
			cert, err := tls.LoadX509KeyPair(certFile, keyFile)
			if err != nil {
				o.tlsErr = configErr("TLS client certificate: %v", err)
				return
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		o.tls = cfg
	}
}

// WithLogger sets where warnings go (STALE acks, reconnects). Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *clientOpts) { o.logger = l } }

// WithDialTimeout bounds Dial's first health check (default 10 s).
func WithDialTimeout(d time.Duration) Option { return func(o *clientOpts) { o.dialTimeout = d } }

// WithoutHealthCheck makes Dial return at once, without checking that ksidecar answers.
func WithoutHealthCheck() Option { return func(o *clientOpts) { o.checkHealth = false } }

// WithDialOptions adds raw grpc-go dial options.
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *clientOpts) { o.extra = append(o.extra, opts...) }
}

type bearer struct{ md map[string]string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return b.md, nil
}

// RequireTransportSecurity is false: a sidecar on loopback is often plaintext.
func (b bearer) RequireTransportSecurity() bool { return false }

// Dial connects to ksidecar at target (host:port) and, unless WithoutHealthCheck,
// checks that it answers grpc.health.v1 within the dial timeout: a bad target fails
// here with an ErrUnavailable that names it.
func Dial(ctx context.Context, target string, opts ...Option) (*Client, error) {
	o := clientOpts{logger: slog.Default(), dialTimeout: 10 * time.Second, checkHealth: true}
	for _, f := range opts {
		f(&o)
	}
	if o.tlsErr != nil {
		return nil, o.tlsErr
	}
	dopts := []grpc.DialOption{
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64 << 20)),
		// Big windows: a stream of records should not wait on flow-control updates.
		grpc.WithInitialWindowSize(4 << 20), grpc.WithInitialConnWindowSize(16 << 20),
		grpc.WithReadBufferSize(256 << 10), grpc.WithWriteBufferSize(256 << 10),
	}
	if o.tls != nil {
		dopts = append(dopts, grpc.WithTransportCredentials(credentials.NewTLS(o.tls)))
	} else {
		dopts = append(dopts, grpc.WithTransportCredentials(insecure.NewCredentials()))
	}
	if o.token != "" {
		dopts = append(dopts, grpc.WithPerRPCCredentials(bearer{
			md: map[string]string{"authorization": "Bearer " + o.token}}))
	}
	dopts = append(dopts, o.extra...)
	conn, err := grpc.NewClient(target, dopts...)
	if err != nil {
		return nil, &Error{Kind: KindInvalidArgument, Op: "dial", Target: target,
			Msg: fmt.Sprintf("bad target: %v", err), Cause: err}
	}
	c := &Client{target: target, conn: conn, consumer: kspb.NewConsumerClient(conn),
		producer: kspb.NewProducerClient(conn), log: o.logger}
	if o.checkHealth {
		if err := c.waitHealthy(ctx, o.dialTimeout); err != nil {
			conn.Close()
			return nil, err
		}
	}
	return c, nil
}

// waitHealthy asks Health/Check until it answers (SERVING or not: a server that answers
// is reachable) or the timeout ends.
func (c *Client) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	h := healthpb.NewHealthClient(c.conn)
	_, err := h.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err == nil {
		return nil
	}
	e := wrapErr("dial", c.target, err).(*Error)
	if e.Kind == KindTimeout || e.Kind == KindUnavailable {
		e.Kind = KindUnavailable
		e.Msg = fmt.Sprintf("no ksidecar answered within %v (is the address right and ksidecar "+
			"running, with TLS on both sides or neither?): %s", timeout, c.conn.GetState())
	}
	return e
}

// Target is the address this client dials.
func (c *Client) Target() string { return c.target }

// Consumer gives the raw generated stub, for the unary calls (GetGroup, Seek, ...).
func (c *Client) Consumer() kspb.ConsumerClient { return c.consumer }

// Close closes the connection. Close Subscribers (end their Receive) first.
func (c *Client) Close() error { return c.conn.Close() }
