// Test fixtures: real ksidecar processes on free ports against the real broker, and
// kstool for topics, records, watermarks and committed offsets.
package ksidecar_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	ksidecar "ksidecar/clients/go"
)

func env(t *testing.T, name, def string) string {
	t.Helper()
	if v := os.Getenv(name); v != "" {
		return v
	}
	if def == "" {
		t.Fatalf("%s is not set: run tests/clients/go.sh (under tests/kafka/kafka.sh run), which sets it", name)
	}
	return def
}

func repoRoot() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(f), "..", "..")
}

func bootstrap(t *testing.T) string { return env(t, "KSIDECAR_TEST_BOOTSTRAP", "") }
func ksBin(t *testing.T) string {
	return env(t, "KSIDECAR_TEST_BIN", filepath.Join(repoRoot(), "build", "ksidecar"))
}
func kstoolBin(t *testing.T) string {
	return env(t, "KSIDECAR_TEST_KSTOOL", filepath.Join(repoRoot(), "build", "kstool"))
}

func unique(prefix string) string {
	b := make([]byte, 5)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func kstool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, kstoolBin(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("kstool %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// topic creates a topic of parts partitions holding n records (keys distinct keys, 0: none).
func topic(t *testing.T, parts, n, keys, size int) string {
	t.Helper()
	name := unique("go")
	kstool(t, "create", "-b", bootstrap(t), "-t", name, "-p", strconv.Itoa(parts))
	if n > 0 {
		args := []string{"produce", "-b", bootstrap(t), "-t", name, "-n", strconv.Itoa(n),
			"-p", strconv.Itoa(parts)}
		if keys > 0 {
			args = append(args, "-k", strconv.Itoa(keys))
		}
		if size > 0 {
			args = append(args, "-s", strconv.Itoa(size))
		}
		kstool(t, args...)
	}
	t.Cleanup(func() {
		exec.Command(kstoolBin(t), "delete", "-b", bootstrap(t), "-t", name).Run()
	})
	return name
}

// offsets parses "partition offset..." lines (kstool watermarks: p lo hi; committed: p off).
func offsets(out string, col int) map[int32]int64 {
	res := map[int32]int64{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) <= col {
			continue
		}
		p, _ := strconv.Atoi(f[0])
		v, _ := strconv.ParseInt(f[col], 10, 64)
		res[int32(p)] = v
	}
	return res
}

func endOffsets(t *testing.T, tp string) map[int32]int64 {
	return offsets(kstool(t, "watermarks", "-b", bootstrap(t), "-t", tp), 2)
}

func committed(t *testing.T, tp, group string, parts int) map[int32]int64 {
	return offsets(kstool(t, "committed", "-b", bootstrap(t), "-t", tp, "-g", group,
		"-p", strconv.Itoa(parts)), 1)
}

// waitCommitted waits (bounded, generously) until the group's committed offsets are the
// topic's end offsets, as the broker reports them.
func waitCommitted(t *testing.T, tp, group string, parts int, timeout time.Duration) {
	t.Helper()
	end := endOffsets(t, tp)
	start := time.Now()
	var got map[int32]int64
	for time.Since(start) < timeout {
		got = committed(t, tp, group, parts)
		if fmt.Sprint(got) == fmt.Sprint(end) {
			t.Logf("committed == end offsets %v after %v", end, time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Fatalf("committed offsets %v never reached the end offsets %v within %v", got, end, timeout)
}

type sidecar struct {
	httpsCfg *tls.Config // for /healthz over HTTPS, when ksidecar has TLS on
	t        *testing.T
	cmd      *exec.Cmd
	args     []string
	httpPort int
	grpcPort int
	logPath  string
	exited   chan struct{}
}

func (s *sidecar) target() string { return fmt.Sprintf("127.0.0.1:%d", s.grpcPort) }

// startSidecar runs ksidecar on free ports with short test timeouts and waits for /healthz.
func startSidecar(t *testing.T, extra ...string) *sidecar {
	t.Helper()
	return launch(t, nil, extra)
}

// startSidecarTLS is startSidecar for a ksidecar given tls.* flags; cfg is how its
// /healthz is asked over HTTPS.
func startSidecarTLS(t *testing.T, cfg *tls.Config, extra ...string) *sidecar {
	t.Helper()
	return launch(t, cfg, extra)
}

func launch(t *testing.T, httpsCfg *tls.Config, extra []string) *sidecar {
	t.Helper()
	s := &sidecar{t: t, httpsCfg: httpsCfg, httpPort: freePort(t), grpcPort: freePort(t)}
	for s.grpcPort == s.httpPort {
		s.grpcPort = freePort(t)
	}
	s.args = append([]string{
		"--kafka.bootstrap.servers=" + bootstrap(t),
		fmt.Sprintf("--http.listen=127.0.0.1:%d", s.httpPort),
		fmt.Sprintf("--grpc.listen=127.0.0.1:%d", s.grpcPort),
		"--commit.interval_ms=200", "--kafka.session.timeout.ms=6000",
		"--kafka.heartbeat.interval.ms=500"}, extra...)
	s.logPath = filepath.Join(t.TempDir(), "ksidecar.log")
	t.Cleanup(func() { s.kill(syscall.SIGKILL) }) // also when run fails part way
	s.run()
	return s
}

func (s *sidecar) run() {
	t := s.t
	t.Helper()
	log, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	s.cmd = exec.Command(ksBin(t), s.args...)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", ksBin(t), err)
	}
	s.exited = make(chan struct{})
	go func() { s.cmd.Wait(); log.Close(); close(s.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			t.Fatalf("ksidecar exited at start:\n%s", s.logs())
		default:
		}
		resp, err := s.healthz()
		if err == nil {
			body := make([]byte, 4096)
			n, _ := resp.Body.Read(body)
			resp.Body.Close()
			up := resp.StatusCode == 200 || (resp.StatusCode == 503 &&
				!strings.Contains(string(body[:n]), "not been probed"))
			if up {
				if c, err := net.Dial("tcp", s.target()); err == nil { // and gRPC listens
					c.Close()
					return
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("ksidecar /healthz did not answer within 30 s:\n%s", s.logs())
}

func (s *sidecar) healthz() (*http.Response, error) {
	if s.httpsCfg == nil {
		return http.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", s.httpPort))
	}
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: s.httpsCfg}}
	return c.Get(fmt.Sprintf("https://127.0.0.1:%d/healthz", s.httpPort))
}

func sha256hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// kill signals this test's own ksidecar process (never the broker) and waits for it.
func (s *sidecar) kill(sig syscall.Signal) {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(sig)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *sidecar) logs() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// testLogger sends the library's log lines to the test's log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func (s *sidecar) dial(t *testing.T, opts ...ksidecar.Option) *ksidecar.Client {
	t.Helper()
	opts = append([]ksidecar.Option{ksidecar.WithLogger(testLogger(t))}, opts...)
	c, err := ksidecar.Dial(context.Background(), s.target(), opts...)
	if err != nil {
		t.Fatalf("%v\nksidecar's log:\n%s", err, s.logs())
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type pos struct {
	p   int32
	off int64
}
