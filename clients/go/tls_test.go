// TLS and mTLS against the real ksidecar: certificates made here with crypto/x509.
package ksidecar_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	ksidecar "ksidecar/clients/go"
)

// certs writes a CA, a server certificate for 127.0.0.1 and a client certificate with
// subject CN=go-client,O=Acme into dir; it returns their paths by name.
func certs(t *testing.T, dir string) map[string]string {
	t.Helper()
	paths := map[string]string{}
	write := func(name, typ string, der []byte) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		paths[name] = p
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "go test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	write("ca.pem", "CERTIFICATE", caDER)
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(name string, serial int64, subj pkix.Name, usage x509.ExtKeyUsage, ips []net.IP) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: subj,
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(48 * time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		write(name+".pem", "CERTIFICATE", der)
		kder, _ := x509.MarshalPKCS8PrivateKey(key)
		write(name+".key", "PRIVATE KEY", kder)
	}
	leaf("server", 2, pkix.Name{CommonName: "127.0.0.1"}, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	leaf("client", 3, pkix.Name{CommonName: "go-client", Organization: []string{"Acme"}}, x509.ExtKeyUsageClientAuth, nil)
	return paths
}

// TLS with a root CA and a token, then mTLS where the client certificate's subject is the
// identity (no token); a plaintext client of a TLS server gets a clear error.
func TestTLSAndMutualTLS(t *testing.T) {
	dir := t.TempDir()
	p := certs(t, dir)
	tp := topic(t, 1, 5, 0, 10)
	tokens := filepath.Join(dir, "tokens.json")
	os.WriteFile(tokens, []byte(fmt.Sprintf(`{"tokens": [
 {"sha256": "%s", "groups": ["*"], "consume": ["*"], "produce": ["*"]},
 {"subject": "CN=go-client,O=Acme", "groups": ["*"], "consume": ["*"], "produce": []}]}`,
		sha256hex("tls-token"))), 0o600)
	cert, err := tls.LoadX509KeyPair(p["client.pem"], p["client.key"])
	if err != nil {
		t.Fatal(err)
	}
	// Only whether /healthz answers matters; the library's own TLS is what is tested.
	hc := &tls.Config{Certificates: []tls.Certificate{cert}, InsecureSkipVerify: true}
	sc := startSidecarTLS(t, hc, "--tls.cert_file="+p["server.pem"], "--tls.key_file="+p["server.key"],
		"--tls.client_ca_file="+p["ca.pem"], "--auth.tokens_file="+tokens)

	consumeAll := func(c *ksidecar.Client, what string) {
		t.Helper()
		sub, _ := c.Subscriber(ksidecar.SubscriberConfig{Group: unique("g"), Topics: []string{tp}})
		got := make(chan struct{}, 5)
		stop := receive(t, sub, func(_ context.Context, m *ksidecar.Message) {
			m.Ack()
			got <- struct{}{}
		})
		for i := 0; i < 5; i++ {
			select {
			case <-got:
			case <-time.After(30 * time.Second):
				t.Fatalf("%s: got %d of 5 records", what, i)
			}
		}
		if err := stop(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Logf("%s: 5 records consumed and acked", what)
	}
	// The server requires a client certificate (client_ca_file), so even the token client
	// presents one; the token then says who calls.
	consumeAll(sc.dial(t, ksidecar.WithTLSFiles(p["ca.pem"], p["client.pem"], p["client.key"]),
		ksidecar.WithToken("tls-token")), "mTLS + token")
	consumeAll(sc.dial(t, ksidecar.WithTLSFiles(p["ca.pem"], p["client.pem"], p["client.key"])),
		"mTLS, certificate subject as identity")
	// The subject's produce scope is empty: a clear PERMISSION_DENIED.
	c := sc.dial(t, ksidecar.WithTLSFiles(p["ca.pem"], p["client.pem"], p["client.key"]))
	_, err = c.Publisher().Publish(context.Background(), ksidecar.ProducerRecord{Topic: tp, Value: []byte("x")})
	t.Logf("produce outside the subject's scope: %v", err)
	if !errors.Is(err, ksidecar.ErrPermissionDenied) {
		t.Fatalf("produce outside scope: %v, want ErrPermissionDenied", err)
	}
	// Plaintext to a TLS server: Dial's health check fails with a message that says so.
	_, err = ksidecar.Dial(context.Background(), sc.target(), ksidecar.WithDialTimeout(2*time.Second))
	t.Logf("plaintext client of a TLS server: %v", err)
	if !errors.Is(err, ksidecar.ErrUnavailable) {
		t.Fatalf("plaintext to TLS: %v, want ErrUnavailable", err)
	}
	// A CA file that is not there: ErrConfig naming it.
	_, err = ksidecar.Dial(context.Background(), sc.target(), ksidecar.WithTLSFiles(filepath.Join(dir, "nope.pem"), "", ""))
	t.Logf("missing CA file: %v", err)
	if !errors.Is(err, ksidecar.ErrConfig) {
		t.Fatalf("missing CA file: %v, want ErrConfig", err)
	}
}
