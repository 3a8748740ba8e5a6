package redlockc

// The engine's connections: dialled, read and written by goroutines of
// their own, which hand everything to the loop (driver.go) as messages. A
// message from a connection the loop has already dropped finds it gone
// (d.conns[k] is another econn or nil) and is ignored.

/*
#include "shim.h"
*/
import "C"

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// open starts connecting conn k (unless a failed connect wants it to wait).
func (d *driver) open(k int, now int64) {
	if r, ok := d.retries[k]; ok && r.atMs > now {
		return // arm() wakes the loop when it may try again
	}
	// Asked at each connect: a sentinel node's master moves.
	var host [1024]C.char
	var port, secure C.int
	if C.rlcgo_engine_conn_address(d.e, C.int(k), &host[0], C.size_t(len(host)), &port, &secure) != 0 {
		return // a sentinel node's master is not known yet: not wanted
	}
	h := C.GoString(&host[0])
	c := &econn{k: k, label: h}
	network, address := "unix", h
	if port != 0 {
		network, address = "tcp", net.JoinHostPort(h, strconv.Itoa(int(port)))
		c.label = address
	}
	d.conns[k] = c
	var cfg *tls.Config
	if secure != 0 {
		cfg = d.tlsFor(h)
	}
	go d.dial(c, network, address, cfg, time.Duration(d.connectMs)*time.Millisecond)
}

// dial connects (and shakes hands), then tells the loop.
func (d *driver) dial(c *econn, network, address string, cfg *tls.Config, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	go func() { // the client's end stops a connect in progress
		select {
		case <-d.quit:
			cancel()
		case <-ctx.Done():
		}
	}()
	var dialer net.Dialer
	nc, err := dialer.DialContext(ctx, network, address)
	if err == nil && network == "tcp" {
		_ = nc.(*net.TCPConn).SetNoDelay(true)
	}
	if err == nil && cfg != nil {
		tc := tls.Client(nc, cfg)
		if err = tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			err = fmt.Errorf("TLS handshake failed: %w", err)
		} else {
			nc = tc
		}
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("connect timed out after %v", limit)
	}
	m := msg{kind: msgConnected, c: c, nc: nc, err: err}
	if err != nil {
		m.kind = msgFailed
	}
	if !d.send(m) && nc != nil && err == nil {
		nc.Close()
	}
}

// send hands m to the loop; false once the client has ended.
func (d *driver) send(m msg) bool {
	select {
	case d.in <- m:
		return true
	case <-d.quit:
		return false
	}
}

func (d *driver) read(c *econn, nc net.Conn) {
	buf := make([]byte, readSize)
	for {
		n, err := nc.Read(buf)
		if n > 0 && !d.send(msg{kind: msgData, c: c, data: append([]byte(nil), buf[:n]...)}) {
			return
		}
		if err != nil {
			d.send(msg{kind: msgEnded, c: c, err: err})
			return
		}
	}
}

// handle is the loop's side of a connection's message.
func (d *driver) handle(m msg) {
	c := m.c
	current := d.conns[c.k] == c && d.e != nil
	switch m.kind {
	case msgConnected:
		if !current {
			m.nc.Close() // given up or the client closed while it connected
			return
		}
		c.nc, c.up = m.nc, true
		c.w = newWriter(m.nc)
		d.lastError[c.k] = ""
		delete(d.retries, c.k)
		go d.read(c, m.nc)
		C.rlc_engine_connected(d.e, C.int(c.k), C.int64_t(nowMs()))
	case msgFailed:
		if !current {
			return
		}
		d.conns[c.k] = nil
		d.failed(c, m.err)
		r := d.retries[c.k]
		r.failures++
		delay := int64(retryFirstMs) << (r.failures - 1)
		if r.failures > 10 || delay > retryCapMs {
			delay = retryCapMs
		}
		r.atMs = nowMs() + delay
		d.retries[c.k] = r
		C.rlc_engine_closed(d.e, C.int(c.k), C.int64_t(nowMs()))
	case msgData:
		if !current || !c.up {
			return
		}
		rc := C.rlc_engine_received(d.e, C.int(c.k), (*C.char)(unsafe.Pointer(&m.data[0])),
			C.size_t(len(m.data)), C.int64_t(nowMs()))
		if rc != 0 { // not RESP: the engine counts it closed already
			d.drop(c, "the server sent something that is not RESP")
		}
	case msgEnded:
		if !current {
			return
		}
		why := "the server closed the connection"
		if m.err != nil && !errors.Is(m.err, net.ErrClosed) && m.err.Error() != "EOF" {
			why = m.err.Error()
		}
		d.drop(c, why)
		C.rlc_engine_closed(d.e, C.int(c.k), C.int64_t(nowMs()))
	}
}

func (d *driver) failed(c *econn, err error) {
	d.lastError[c.k] = c.label + ": " + err.Error()
	level := LogDebug // a node that is down: the engine logs "reconnecting"
	if strings.HasPrefix(err.Error(), "TLS handshake failed") {
		level = LogWarn // a certificate or configuration to fix
	}
	d.log(level, d.lastError[c.k])
}

// drop closes connection c (no engine call: the caller says what the engine
// must hear). why, when not "", is kept for the error messages.
func (d *driver) drop(c *econn, why string) {
	if d.conns[c.k] == c {
		d.conns[c.k] = nil
	}
	if why != "" {
		d.lastError[c.k] = c.label + ": " + why
	}
	if c.w != nil {
		c.w.stop()
	}
	if c.nc != nil {
		c.nc.Close() // its reader ends; its message finds it gone
	}
}

// writer writes what the loop queued, in order, on a goroutine of its own:
// a server that stops reading fills the socket and blocks this goroutine,
// never the loop (the engine's call deadline then gives the connection up).
type writer struct {
	mu      sync.Mutex
	queue   net.Buffers
	signal  chan struct{}
	stopped chan struct{}
	once    sync.Once
}

func newWriter(nc net.Conn) *writer {
	w := &writer{signal: make(chan struct{}, 1), stopped: make(chan struct{})}
	go w.run(nc)
	return w
}

func (w *writer) push(b []byte) {
	if len(b) == 0 {
		return
	}
	w.mu.Lock()
	w.queue = append(w.queue, b)
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *writer) stop() { w.once.Do(func() { close(w.stopped) }) }

func (w *writer) run(nc net.Conn) {
	for {
		select {
		case <-w.signal:
		case <-w.stopped:
			return
		}
		w.mu.Lock()
		bufs := w.queue
		w.queue = nil
		w.mu.Unlock()
		if _, err := bufs.WriteTo(nc); err != nil {
			nc.Close() // the reader sees it end and tells the loop
			return
		}
	}
}

// ---- TLS ------------------------------------------------------------------------

// setupTLS builds the crypto/tls configuration of the rediss:// nodes from
// WithTLSConfig or the tls_* options the engine keeps.
func (d *driver) setupTLS(cfg *config) error {
	secure := false
	for i := 0; i < int(C.rlc_engine_nodes(d.e)); i++ {
		if C.rlc_engine_node_tls(d.e, C.int(i)) == 1 {
			secure = true
		}
	}
	if cfg.tls != nil {
		if !secure {
			return errorf(StatusInvalid, "new client", "WithTLSConfig is given but no node is rediss:// (write rediss://host:port for a TLS node)")
		}
		d.tls = cfg.tls.Clone()
		if d.tls.ServerName == "" {
			d.tls.ServerName = d.option("tls_server_name")
		}
		return nil
	}
	if !secure {
		return nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: d.option("tls_server_name")}
	pool, err := d.caPool()
	if err != nil {
		return err
	}
	t.RootCAs = pool
	if cert := d.option("tls_cert_file"); cert != "" {
		key := d.option("tls_key_file")
		if key == "" {
			key = cert
		}
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return errorf(StatusInvalid, "new client", "option tls_cert_file/tls_key_file: %v", err)
		}
		t.Certificates = []tls.Certificate{pair}
	}
	t.InsecureSkipVerify = d.option("tls_verify") == "0"
	d.tls = t
	return nil
}

// caPool is the CAs of tls_ca_file and tls_ca_dir alone, or nil (the
// system's) when neither is given.
func (d *driver) caPool() (*x509.CertPool, error) {
	file, dir := d.option("tls_ca_file"), d.option("tls_ca_dir")
	if file == "" && dir == "" {
		return nil, nil
	}
	pool := x509.NewCertPool()
	if file != "" {
		pem, err := os.ReadFile(file)
		if err != nil || !pool.AppendCertsFromPEM(pem) {
			return nil, errorf(StatusInvalid, "new client", "option tls_ca_file: no PEM certificate read from %s (%v)", file, err)
		}
	}
	if dir != "" {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, errorf(StatusInvalid, "new client", "option tls_ca_dir: %v", err)
		}
		names := make([]string, 0, len(entries))
		for _, e := range entries {
			names = append(names, e.Name())
		}
		sort.Strings(names)
		found := false
		for _, n := range names {
			if pem, err := os.ReadFile(filepath.Join(dir, n)); err == nil && pool.AppendCertsFromPEM(pem) {
				found = true
			}
		}
		if !found {
			return nil, errorf(StatusInvalid, "new client", "option tls_ca_dir: no PEM certificate in %s", dir)
		}
	}
	return pool, nil
}

// tlsFor is the configuration for one connection: the node's host is the
// name its certificate must carry unless a server name was given.
func (d *driver) tlsFor(host string) *tls.Config {
	t := d.tls.Clone()
	if t.ServerName == "" {
		t.ServerName = host
	}
	return t
}
