package redlockc

// The Go driver of one rlc_engine (redlockc.h, "Engine (1.1)"): the lock
// protocol runs in the engine, and this file only moves its bytes and its
// time, as bindings/node/lib/engine_driver.js and the asyncio driver do.
//
// One goroutine per client owns the engine ("the loop", run): every engine
// call is made from it, one at a time, and each is a short cgo call that
// neither blocks nor does I/O. Around it:
//   - per engine connection, a net.Conn (crypto/tls for a rediss:// node),
//     dialled by a goroutine of its own, a reader goroutine that hands what
//     it reads to the loop through one channel (in), and a writer goroutine
//     that writes what the loop queued (so a stalled server never blocks
//     the loop);
//   - one timer for rlc_engine_deadline() (and connect retries);
//   - per operation a buffered channel that its RLC_EV_DONE event fills.
// A goroutine waiting for a lock waits on that channel (or its context): no
// cgo call, no OS thread. Reads and writes wait in Go's netpoller.
//
// After everything the loop handles it "pumps" (pump): ticks if the
// deadline is due, opens what the engine wants, writes what it has pending,
// dispatches its events and log lines, and re-arms the timer. Messages that
// are ready together are handled before one pump, so operations started
// together leave in one write, and a reply read before a deadline is seen
// before the tick that would time it out.

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// One monotonic millisecond clock for every engine of the process (never
// going back: time.Since reads the monotonic clock).
var clockBase = time.Now()

func nowMs() int64 { return int64(time.Since(clockBase)/time.Millisecond) + 1000 }

// Connect retries: after a failed connect, the next try of that connection
// waits this long, doubling per failure up to the cap (a stopped server
// refuses at once, and the engine wants the connection while it has work).
const (
	retryFirstMs = 10
	retryCapMs   = 500
	drainMax     = 256 // messages handled before one pump
	readSize     = 64 << 10
)

type opKind int

const (
	opAcquire opKind = C.RLCGO_OP_ACQUIRE
	opRelease opKind = C.RLCGO_OP_RELEASE
	opExtend  opKind = C.RLCGO_OP_EXTEND
	opQuery   opKind = C.RLCGO_OP_QUERY
)

// done is an operation's RLC_EV_DONE event.
type done struct {
	status   Status
	token    uint64
	validity int64
	count    int64
	message  string
}

// op is an operation in flight; ch gets its done (buffered: never blocks).
type op struct {
	id        uint64
	kind      opKind
	name      string
	owner     uint64
	lease     int64
	waits     bool  // an acquire with a wait: counted in Waiters
	startMs   int64 // for the wait histogram
	abandoned bool  // its caller's context ended: a grant is given back
	ch        chan done
}

type msgKind int

const (
	msgConnected msgKind = iota
	msgFailed            // the dial or handshake failed
	msgData
	msgEnded // EOF or a read error
)

// msg is what a connection's goroutines tell the loop.
type msg struct {
	kind msgKind
	c    *econn
	nc   net.Conn
	data []byte
	err  error
}

// econn is one engine connection (connecting or up).
type econn struct {
	k     int
	label string // "host:port", for messages
	nc    net.Conn
	up    bool
	w     *writer
}

type retry struct {
	atMs     int64
	failures int
}

type driver struct {
	e       *C.rlc_engine
	uuid    string
	nconn   int
	fencing bool // holds take fencing tokens (option fencing=1): else a grant's token is 0

	calls chan func()   // run on the loop (do)
	in    chan msg      // from the connections' goroutines
	wake  chan struct{} // the timer fired
	quit  chan struct{} // closed when the loop ends: goroutines stop
	dead  chan struct{} // closed after the loop has ended

	// Everything below is the loop's alone.
	conns     []*econn
	lastError []string // per conn: what its socket saw last
	retries   map[int]retry
	ops       map[uint64]*op
	lost      map[uint64]chan error // owner -> its Lock's Lost() channel
	holds     map[holdKey]bool      // held now: true for a fixed lease
	stats     stats
	want      []C.int
	pending   []C.size_t
	timer     *time.Timer
	timerAt   int64
	tls       *tls.Config
	connectMs int64
	logs      chan logLine
	closing   bool
	closeByMs int64
	closeOnce sync.Once
}

type holdKey struct {
	name  string
	owner uint64
}

type logLine struct {
	level LogLevel
	text  string
}

// newUUID is a random (version 4) UUID: the engine's client id.
func newUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

func newDriver(nodes string, cfg *config) (*driver, error) {
	uuid, err := newUUID()
	if err != nil {
		return nil, errorf(StatusInvalid, "new client", "no random UUID: %v", err)
	}
	cnodes, cuuid, copts := C.CString(nodes), C.CString(uuid), C.CString(cfg.String())
	defer C.free(unsafe.Pointer(cnodes))
	defer C.free(unsafe.Pointer(cuuid))
	defer C.free(unsafe.Pointer(copts))
	d := &driver{uuid: uuid, calls: make(chan func()), in: make(chan msg, 64),
		wake: make(chan struct{}, 1), quit: make(chan struct{}), dead: make(chan struct{}),
		retries: map[int]retry{}, ops: map[uint64]*op{}, lost: map[uint64]chan error{},
		holds: map[holdKey]bool{}, timerAt: -1}
	if err := check("new client", C.rlcgo_engine_new(cnodes, cuuid, copts, &d.e)); err != nil {
		return nil, err
	}
	d.nconn = int(C.rlc_engine_conns(d.e))
	d.conns = make([]*econn, d.nconn)
	d.lastError = make([]string, d.nconn)
	d.want = make([]C.int, d.nconn)
	d.pending = make([]C.size_t, d.nconn)
	d.connectMs = 1000
	if v := d.option("connect_timeout_ms"); v != "" {
		fmt.Sscan(v, &d.connectMs)
	}
	var fencing int64
	if v := d.option("fencing"); v != "" {
		fmt.Sscan(v, &fencing)
	}
	d.fencing = fencing != 0
	if err := d.setupTLS(cfg); err != nil {
		C.rlc_engine_free(d.e)
		return nil, err
	}
	d.stats.init()
	if cfg.logger != nil {
		d.logs = make(chan logLine, 64)
		go runLogger(d.logs, cfg.logger)
	}
	go d.run()
	return d, nil
}

// option is an option as given to rlc_engine_new ("" when not given).
func (d *driver) option(name string) string {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	if v := C.rlc_engine_option(d.e, cname); v != nil {
		return C.GoString(v)
	}
	return ""
}

func runLogger(lines <-chan logLine, fn func(LogLevel, string)) {
	for l := range lines {
		fn(l.level, l.text)
	}
}

func (d *driver) log(level LogLevel, text string) {
	if d.logs == nil {
		return
	}
	select {
	case d.logs <- logLine{level, text}:
	default: // the hook is behind: drop rather than hold up the loop
	}
}

// ---- calls from other goroutines ----------------------------------------------

// do runs f on the loop and waits until it has run; ErrClosed once the loop
// has ended (f then never runs).
func (d *driver) do(what string, f func()) error {
	ran := make(chan struct{})
	select {
	case d.calls <- func() { f(); close(ran) }:
	case <-d.dead:
		return errorf(StatusClosed, what, "the client is closed")
	}
	<-ran // the loop runs a call it took before anything else
	return nil
}

// start starts an operation on the loop; its done comes on the op's ch.
func (d *driver) start(kind opKind, what, name string, owner uint64, a, b int64) (*op, error) {
	var p *op
	var err error
	if e := d.do(what, func() { p, err = d.startOnLoop(kind, what, name, owner, a, b) }); e != nil {
		return nil, e
	}
	return p, err
}

func (d *driver) startOnLoop(kind opKind, what, name string, owner uint64, a, b int64) (*op, error) {
	if d.closing {
		return nil, errorf(StatusClosed, what, "the client is closed")
	}
	now := nowMs()
	var cname *C.char
	if name != "" {
		bytes := []byte(name)
		cname = (*C.char)(unsafe.Pointer(&bytes[0]))
	}
	r := C.rlcgo_engine_start(d.e, C.int(kind), cname, C.size_t(len(name)), C.uint64_t(owner),
		C.int64_t(a), C.int64_t(b), C.int64_t(now))
	if err := check(what, r); err != nil {
		return nil, err
	}
	p := &op{id: uint64(r.value), kind: kind, name: name, owner: owner, startMs: now,
		ch: make(chan done, 1)}
	if kind == opAcquire {
		p.lease = b
		p.waits = a != 0
		if p.waits {
			d.stats.waiters++
		}
	}
	d.ops[p.id] = p
	return p, nil
}

// wait is the op's done, or ErrClosed if the loop ended without one.
func (d *driver) wait(p *op) done {
	select {
	case ev := <-p.ch:
		return ev
	case <-d.dead:
		select {
		case ev := <-p.ch:
			return ev
		default:
			return done{status: StatusClosed, message: "the client is closed"}
		}
	}
}

// abandon: the caller of acquire p stopped waiting (its context ended). A
// running acquire is cancelled; a grant that comes anyway, or came already,
// is released, since nobody will.
func (d *driver) abandon(p *op) {
	_ = d.do("cancel", func() {
		if _, running := d.ops[p.id]; running {
			p.abandoned = true
			C.rlc_engine_cancel(d.e, C.uint64_t(p.id), C.int64_t(nowMs()))
			return
		}
		select {
		case ev := <-p.ch:
			if ev.status == StatusOK {
				d.releaseQuietly(p.name, p.owner)
			}
		default:
		}
	})
}

// releaseQuietly gives back one level nobody waits for.
func (d *driver) releaseQuietly(name string, owner uint64) {
	if d.closing {
		return // the client's end forgets it; it expires
	}
	if _, err := d.startOnLoop(opRelease, "release", name, owner, 0, 0); err != nil {
		d.log(LogDebug, "release of a cancelled acquire of "+name+": "+err.Error())
	}
}

// ---- the loop -----------------------------------------------------------------

func (d *driver) run() {
	defer close(d.dead)
	for {
		select {
		case f := <-d.calls:
			f()
		case m := <-d.in:
			d.handle(m)
		case <-d.wake:
			d.timer, d.timerAt = nil, -1
		}
		d.drain()
		d.pump()
		if d.closing && (d.idle() || nowMs() >= d.closeByMs) {
			d.finish()
			return
		}
	}
}

// drain handles what else is ready now (bounded), so that it all goes
// before the next pump: the reads first, then the calls.
func (d *driver) drain() {
	for i := 0; i < drainMax; i++ {
		select {
		case m := <-d.in:
			d.handle(m)
			continue
		default:
		}
		select {
		case m := <-d.in:
			d.handle(m)
		case f := <-d.calls:
			f()
		default:
			return
		}
	}
}

func (d *driver) idle() bool {
	return len(d.ops) == 0 && C.rlc_engine_idle(d.e) != 0
}

func (d *driver) pump() {
	for round := 0; round < 100; round++ {
		now := nowMs()
		if dl := int64(C.rlc_engine_deadline(d.e)); dl >= 0 && dl <= now {
			C.rlc_engine_tick(d.e, C.int64_t(now))
		}
		if !d.service(now) {
			break
		}
	}
	d.arm()
}

// service does what the engine asks for now; true when it should be asked
// again (something it did gave the engine more to do).
func (d *driver) service(now int64) bool {
	again := false
	if d.nconn > 0 {
		C.rlcgo_engine_scan(d.e, C.int(d.nconn), &d.want[0], &d.pending[0])
	}
	for k := 0; k < d.nconn; k++ {
		c, want := d.conns[k], int(d.want[k])
		switch {
		case c == nil && want == 1:
			d.open(k, now)
		case c == nil && want == -1:
			C.rlc_engine_closed(d.e, C.int(k), C.int64_t(now)) // given up while closed: acknowledged
		case c != nil && want == -1:
			// The engine gave it up (a stalled server, bytes not RESP, a
			// sentinel node's master moved): close it, and say so.
			d.drop(c, "")
			C.rlc_engine_closed(d.e, C.int(k), C.int64_t(now))
			again = true
		case c != nil && c.up && d.pending[k] > 0:
			buf := make([]byte, int(d.pending[k]))
			n := C.rlcgo_engine_take(d.e, C.int(k), (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
			c.w.push(buf[:int(n)])
		}
	}
	if d.events() {
		again = true
	}
	d.readLogs()
	return again
}

// events dispatches the engine's events; true if one started an operation.
func (d *driver) events() bool {
	started := false
	for {
		var ev C.rlc_engine_event
		if C.rlc_engine_next_event(d.e, &ev) == 0 {
			return started
		}
		switch ev._type {
		case C.RLC_EV_DONE:
			if d.dispatchDone(&ev) {
				started = true
			}
		case C.RLC_EV_LOST:
			d.dispatchLost(&ev)
		}
	}
}

func (d *driver) dispatchDone(ev *C.rlc_engine_event) bool {
	p, ok := d.ops[uint64(ev.op)]
	if !ok {
		return false
	}
	delete(d.ops, p.id)
	r := done{status: Status(ev.status), token: uint64(ev.token), validity: int64(ev.validity_ms),
		count: int64(ev.count)}
	if ev.message != nil {
		r.message = C.GoString(ev.message)
	}
	if r.status == StatusConnect || r.status == StatusTimeout {
		r.message = d.detail(r.message)
	}
	if d.closing && r.status == StatusCanceled {
		r.status, r.message = StatusClosed, "the client is closed"
	}
	d.account(p, r)
	started := false
	if p.abandoned && r.status == StatusOK {
		d.releaseQuietly(p.name, p.owner)
		started = true
	}
	p.ch <- r
	return started
}

// account keeps the client's gauges and counters (Stats) up to date.
func (d *driver) account(p *op, r done) {
	key := holdKey{p.name, p.owner}
	switch p.kind {
	case opAcquire:
		if p.waits {
			d.stats.waiters--
		}
		d.stats.observe(resultOf(p, r), nowMs()-p.startMs)
		if r.status == StatusOK && r.count >= 1 && !p.abandoned {
			if _, held := d.holds[key]; !held {
				d.holds[key] = p.lease > 0
			}
		}
	case opExtend:
		if r.status == StatusOK {
			d.holds[key] = p.lease > 0
		}
	case opRelease:
		if r.count == 0 && r.status != StatusTimeout && r.status != StatusConnect &&
			r.status != StatusNoQuorum {
			delete(d.holds, key)
		}
	}
}

func resultOf(p *op, r done) string {
	switch {
	case r.status == StatusOK && p.abandoned, r.status == StatusCanceled:
		return ResultCanceled
	case r.status == StatusOK:
		return ResultAcquired
	case r.status == StatusNotAcquired:
		return ResultBusy
	}
	return ResultError
}

func (d *driver) dispatchLost(ev *C.rlc_engine_event) {
	name := C.GoStringN(ev.name, C.int(ev.name_len))
	key := holdKey{name, uint64(ev.owner)}
	fixed, held := d.holds[key]
	delete(d.holds, key)
	status := Status(ev.status)
	reason := LostTaken
	switch {
	case status != StatusLost:
		reason = LostRenewalFailed
	case held && fixed:
		reason = LostExpired
	}
	d.stats.lost[reason]++
	if !fixed {
		d.stats.renewalsLost++
	}
	ch, ok := d.lost[uint64(ev.owner)]
	if !ok {
		return
	}
	detail := "its validity ran out (a fixed lease ended) or a renewal found it gone"
	if status != StatusLost {
		detail = "renewals failed until its validity ran out: " + status.String()
		if ev.message != nil && C.GoString(ev.message) != "" {
			detail += " (" + C.GoString(ev.message) + ")"
		}
	}
	select {
	case ch <- &Error{Status: StatusLost, Op: "hold", Detail: detail}:
	default: // a notice is already waiting
	}
}

func (d *driver) readLogs() {
	var buf [1024]C.char
	for {
		var level C.int
		n := C.rlc_engine_next_log(d.e, &level, &buf[0], C.size_t(len(buf)))
		if n == 0 {
			return
		}
		d.log(LogLevel(level), C.GoString(&buf[0]))
	}
}

// detail adds what the sockets saw last ("127.0.0.1:6379: connection
// refused") to a connection error's message.
func (d *driver) detail(message string) string {
	var seen []string
	for _, e := range d.lastError {
		if e != "" && !strings.Contains(message, e) && !contains(seen, e) {
			seen = append(seen, e)
		}
	}
	if len(seen) == 0 {
		return message
	}
	if message == "" {
		return strings.Join(seen, "; ")
	}
	return message + " (" + strings.Join(seen, "; ") + ")"
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// arm sets the one timer at the engine's deadline, the next connect retry
// or the end of a close, whichever comes first. A timer that fires early is
// harmless (nothing is due; it is armed again), so an armed timer is only
// moved earlier.
func (d *driver) arm() {
	at := int64(C.rlc_engine_deadline(d.e))
	now := nowMs()
	for _, r := range d.retries {
		if r.atMs > now && (at < 0 || r.atMs < at) { // one due now was tried by service
			at = r.atMs
		}
	}
	if d.closing && (at < 0 || d.closeByMs < at) {
		at = d.closeByMs
	}
	if at < 0 || (d.timer != nil && d.timerAt <= at) {
		return
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timerAt = at
	delay := time.Duration(at-nowMs()+1) * time.Millisecond // now rounds down
	d.timer = time.AfterFunc(delay, func() {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	})
}

// ---- shutdown -----------------------------------------------------------------

// close cancels the waiting acquisitions, lets releases and extends in
// flight end (at most bound), then frees the engine and closes the sockets.
func (d *driver) close(bound time.Duration) {
	d.closeOnce.Do(func() {
		_ = d.do("close", func() {
			d.closing = true
			d.closeByMs = nowMs() + ms(bound)
			now := C.int64_t(nowMs())
			for id, p := range d.ops {
				if p.kind == opAcquire {
					C.rlc_engine_cancel(d.e, C.uint64_t(id), now)
				}
			}
		})
		<-d.dead
	})
}

// finish is the loop's last act: whatever is still in flight ends
// ErrClosed, the engine is freed, and the connections' goroutines stop.
func (d *driver) finish() {
	for _, p := range d.ops {
		if p.kind == opAcquire && p.waits {
			d.stats.waiters--
		}
		p.ch <- done{status: StatusClosed, message: "the client is closed"}
	}
	d.ops = map[uint64]*op{}
	if d.timer != nil {
		d.timer.Stop()
	}
	for _, c := range d.conns {
		if c != nil {
			d.drop(c, "")
		}
	}
	C.rlc_engine_free(d.e)
	d.e = nil
	close(d.quit)
	if d.logs != nil {
		close(d.logs)
	}
}
