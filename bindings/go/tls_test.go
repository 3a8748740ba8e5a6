package redlockc

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tlsServer starts a redis-server that speaks TLS only and wants a client
// certificate, with a PKI from tests/tls/make_certs.sh; its rediss:// URI
// and the certificates' directory. Stopped by its pid at the test's end.
func tlsServer(t *testing.T) (string, string) {
	t.Helper()
	certs := t.TempDir()
	if out, err := exec.Command("bash", "../../tests/tls/make_certs.sh", certs).CombinedOutput(); err != nil {
		t.Fatalf("make_certs.sh: %v\n%s", err, out)
	}
	port := ownServer(t, func(port int) []string {
		return []string{"--port", "0", "--tls-port", fmt.Sprint(port),
			"--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", certs,
			"--tls-cert-file", filepath.Join(certs, "server.crt"),
			"--tls-key-file", filepath.Join(certs, "server.key"),
			"--tls-ca-cert-file", filepath.Join(certs, "ca.crt"), "--tls-auth-clients", "yes"}
	})
	return fmt.Sprintf("rediss://127.0.0.1:%d", port), certs
}

// A rediss:// node is spoken to through crypto/tls, configured by the tls_*
// options or a tls.Config; a certificate from another CA fails the
// handshake, and New says so.
func TestTLSNode(t *testing.T) {
	uri, certs := tlsServer(t)
	file := func(n string) string { return filepath.Join(certs, n) }
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	lockOnce := func(c *Client) {
		t.Helper()
		l := newLock(t, c, name(t))
		if err := l.Lock(); err != nil {
			t.Fatalf("Lock over TLS: %v", err)
		}
		if tok, err := l.FencingToken(); err != nil || tok == 0 {
			t.Fatalf("FencingToken over TLS: (%d, %v)", tok, err)
		}
		if err := l.Unlock(); err != nil {
			t.Fatalf("Unlock over TLS: %v", err)
		}
	}

	c, err := New(ctx, uri, WithTLSCAFile(file("ca.crt")), WithTLSClientCert(file("client.crt"), file("client.key")),
		WithFencing(true))
	if err != nil {
		t.Fatalf("New with the tls_* options: %v", err)
	}
	lockOnce(c)
	c.Close()

	pem, err := os.ReadFile(file("ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	pair, err := tls.LoadX509KeyPair(file("client.crt"), file("client.key"))
	if err != nil {
		t.Fatal(err)
	}
	c, err = New(ctx, uri, WithTLSConfig(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}),
		WithFencing(true))
	if err != nil {
		t.Fatalf("New with a tls.Config: %v", err)
	}
	lockOnce(c)
	c.Close()

	_, err = New(ctx, uri, WithTLSCAFile(file("other-ca.crt")), WithTLSClientCert(file("client.crt"), file("client.key")),
		WithConnectTimeout(time.Second))
	if !errors.Is(err, ErrConnect) || !strings.Contains(err.Error(), "TLS handshake failed") {
		t.Fatalf("New trusting another CA: expected ErrConnect with 'TLS handshake failed', saw %v", err)
	}
	if _, err := New(ctx, "redis://127.0.0.1:1", WithTLSConfig(&tls.Config{})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("WithTLSConfig without a rediss:// node: expected ErrInvalid, saw %v", err)
	}
}
