// Command peers: redsync (v4, over go-redis v9) and rueidislock (rueidis),
// the Go peers of tests/bench, on the workloads of rlc_bench and against the
// same servers (tests/bench/peers/peers.py runs it):
//
//	<lib>.t1        1 goroutine, 1 node: uncontended acquire + release cycles
//	<lib>.t16       16 goroutines on distinct names, 1 node, one client
//	<lib>.redlock5  1 goroutine, a lock over 5 independent masters
//	<lib>.handoff   8 goroutines on one name; time from a holder's release to
//	                the next holder's acquire returning (the rules of
//	                tests/bench/handoff.c: a holder holds 1 ms, a releaser
//	                waits until someone else took the lock)
//	bare.t1, .t16   the floor: go-redis sending SET NX PX, then a
//	                compare-and-delete script (no lock client at all)
//	<lib>.cost      exactly --cycles cycles on one name (peers.py reads the
//	                server's INFO commandstats around the whole process)
//
//	peers --lib redsync|rueidislock|bare --nodes redis://h:p,... --seconds S
//	      [--workloads t1,t16,redlock5,handoff] [--cycles N]
//
// One JSON object per line on stdout. It never judges speed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

const (
	warmup     = 200
	holdTime   = time.Millisecond // the critical section of the hand-off
	patience   = 2 * time.Second  // a releaser waits this long for a taker
	lease      = 30 * time.Second // redsync's expiry, as node-redlock's bench
	maxSamples = 1 << 20
	maxErrors  = 1000
)

// A lock client: acquire waits (bounded by ctx) and returns the release.
type locker interface {
	acquire(ctx context.Context, name string) (func() error, error)
	close()
}

func hostPort(uri string) string {
	u, err := url.Parse(uri)
	if err != nil {
		return uri
	}
	return u.Host
}

// ---- redsync ---------------------------------------------------------------

type redsyncLocker struct {
	rs      *redsync.Redsync
	clients []*goredislib.Client
	opts    []redsync.Option
}

func newRedsync(uris []string, contended bool) (locker, error) {
	l := &redsyncLocker{opts: []redsync.Option{redsync.WithExpiry(lease)}}
	var pools []redsyncredis.Pool
	for _, u := range uris {
		c := goredislib.NewClient(&goredislib.Options{Addr: hostPort(u)})
		if err := c.Ping(context.Background()).Err(); err != nil {
			return nil, err
		}
		l.clients = append(l.clients, c)
		pools = append(pools, goredis.NewPool(c))
	}
	if contended {
		// Retry until the context ends, at redsync's default delay
		// (a random 50-250 ms between tries).
		l.opts = append(l.opts, redsync.WithTries(1<<30))
	}
	l.rs = redsync.New(pools...)
	return l, nil
}

func (l *redsyncLocker) acquire(ctx context.Context, name string) (func() error, error) {
	m := l.rs.NewMutex(name, l.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() error {
		ok, err := m.UnlockContext(context.Background())
		if err == nil && !ok {
			err = errors.New("unlock: not held")
		}
		return err
	}, nil
}

func (l *redsyncLocker) close() {
	for _, c := range l.clients {
		c.Close()
	}
}

// ---- bare: the floor of the classic format ---------------------------------

// bareLocker is no lock client: one SET NX PX, then one compare-and-delete
// script, over go-redis. What any single-key lock pays on this machine.
type bareLocker struct{ c *goredislib.Client }

var compareDel = goredislib.NewScript(
	`if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0`)

func newBare(uris []string) (locker, error) {
	c := goredislib.NewClient(&goredislib.Options{Addr: hostPort(uris[0]), PoolSize: 16})
	return &bareLocker{c}, c.Ping(context.Background()).Err()
}

func (b *bareLocker) acquire(ctx context.Context, name string) (func() error, error) {
	ok, err := b.c.SetNX(ctx, name, "token", lease).Result()
	if err == nil && !ok {
		err = errors.New("busy")
	}
	if err != nil {
		return nil, err
	}
	return func() error {
		return compareDel.Run(context.Background(), b.c, []string{name}, "token").Err()
	}, nil
}

func (b *bareLocker) close() { b.c.Close() }

// ---- rueidislock ------------------------------------------------------------

type rueidisLocker struct{ l rueidislock.Locker }

func newRueidis(uris []string) (locker, error) {
	if len(uris) != 1 {
		return nil, errors.New("rueidislock takes its majority over keys of one deployment")
	}
	// As its README advises for one Redis: KeyMajority 1, NoLoopTracking
	// (Redis >= 7.0.5). Waiters wake on client-side-caching invalidations.
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:   rueidis.ClientOption{InitAddress: []string{hostPort(uris[0])}},
		KeyMajority:    1,
		NoLoopTracking: true,
	})
	if err != nil {
		return nil, err
	}
	return &rueidisLocker{l}, nil
}

func (r *rueidisLocker) acquire(ctx context.Context, name string) (func() error, error) {
	_, cancel, err := r.l.WithContext(ctx, name)
	if err != nil {
		return nil, err
	}
	return func() error { cancel(); return nil }, nil // cancel waits for the DEL
}

func (r *rueidisLocker) close() { r.l.Close() }

// ---- measuring ---------------------------------------------------------------

func cpuNs() int64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func quantileUs(v []time.Duration, q float64) float64 {
	if len(v) == 0 {
		return -1
	}
	sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
	return float64(v[int(q*float64(len(v)-1)+0.5)].Nanoseconds()) / 1000
}

func emit(row map[string]any) {
	b, _ := json.Marshal(row)
	fmt.Println(string(b))
}

type sampler struct {
	mu     sync.Mutex
	lat    []time.Duration
	count  int
	errors int
}

func (s *sampler) add(d time.Duration) {
	s.mu.Lock()
	s.count++
	if len(s.lat) < maxSamples {
		s.lat = append(s.lat, d)
	}
	s.mu.Unlock()
}

func (s *sampler) fail(row string, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.errors == 0 {
		fmt.Fprintf(os.Stderr, "%s: %v\n", row, err)
	}
	s.errors++
	return s.errors < maxErrors
}

func cycle(l locker, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	release, err := l.acquire(ctx, name)
	if err != nil {
		return err
	}
	return release()
}

// cycles: `workers` goroutines, each cycling a name of its own.
func cycles(row string, l locker, workers, nodes int, seconds float64) {
	for w := 0; w < workers; w++ {
		for i := 0; i < warmup; i++ {
			if err := cycle(l, fmt.Sprintf("bench:%s:%d", row, w)); err != nil {
				emit(map[string]any{"row": row, "error": err.Error()})
				return
			}
		}
	}
	s := &sampler{}
	cpu0, t0 := cpuNs(), time.Now()
	end := t0.Add(time.Duration(seconds * 1e9))
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(name string) {
			defer wg.Done()
			for t := time.Now(); t.Before(end); {
				if err := cycle(l, name); err != nil {
					if !s.fail(row, err) {
						return
					}
					t = time.Now()
					continue
				}
				t1 := time.Now()
				s.add(t1.Sub(t))
				t = t1
			}
		}(fmt.Sprintf("bench:%s:%d", row, w))
	}
	wg.Wait()
	wall := time.Since(t0)
	emit(map[string]any{
		"row": row, "threads": workers, "nodes": nodes,
		"cycles": float64(s.count) / wall.Seconds(),
		"p50_us": quantileUs(s.lat, 0.5), "p90_us": quantileUs(s.lat, 0.9),
		"p99_us": quantileUs(s.lat, 0.99), "errors": s.errors,
		"client_cpu_pct": 100 * float64(cpuNs()-cpu0) / float64(wall.Nanoseconds()),
	})
}

// handoff: `workers` goroutines on one name; every hand-off goes to a
// goroutine that was waiting (see handoff.c).
func handoff(row string, l locker, workers int, seconds float64) {
	const name = "bench:handoff"
	if err := cycle(l, name); err != nil {
		emit(map[string]any{"row": row, "error": err.Error()})
		return
	}
	var (
		mu         sync.Mutex
		taken      = sync.NewCond(&mu)
		holder     = -1
		releasedAt time.Time
		timeouts   int
	)
	s := &sampler{}
	cpu0, t0 := cpuNs(), time.Now()
	end := t0.Add(time.Duration(seconds * 1e9))
	ctx, cancel := context.WithDeadline(context.Background(), end.Add(patience))
	defer cancel()
	var wg sync.WaitGroup
	for id := 0; id < workers; id++ {
		wg.Add(1)
		go func(id int) {
			defer wg.Done()
			for time.Now().Before(end) {
				release, err := l.acquire(ctx, name)
				if err != nil {
					if ctx.Err() != nil || !s.fail(row, err) {
						return
					}
					continue
				}
				got := time.Now()
				mu.Lock()
				if holder >= 0 && holder != id && got.Before(end) {
					s.add(got.Sub(releasedAt))
				}
				holder = id
				taken.Broadcast()
				mu.Unlock()
				time.Sleep(holdTime)
				mu.Lock()
				releasedAt = time.Now()
				mu.Unlock()
				if err := release(); err != nil && !s.fail(row, err) {
					return
				}
				waitForTaker(&mu, taken, &holder, id, end, &timeouts)
			}
		}(id)
	}
	// Sleepers on the condition are woken by a ticker: Cond has no timeout.
	stop := make(chan struct{})
	go func() {
		for t := time.NewTicker(50 * time.Millisecond); ; {
			select {
			case <-stop:
				t.Stop()
				return
			case <-t.C:
				mu.Lock()
				taken.Broadcast()
				mu.Unlock()
			}
		}
	}()
	wg.Wait()
	close(stop)
	wall := end.Sub(t0)
	emit(map[string]any{
		"row": row, "threads": workers, "cycles": float64(s.count) / wall.Seconds(),
		"handoff_p50_us": quantileUs(s.lat, 0.5), "handoff_p90_us": quantileUs(s.lat, 0.9),
		"handoff_p99_us": quantileUs(s.lat, 0.99), "errors": s.errors,
		"patience_timeouts": timeouts,
		"client_cpu_pct":    100 * float64(cpuNs()-cpu0) / float64(time.Since(t0).Nanoseconds()),
	})
}

func waitForTaker(mu *sync.Mutex, taken *sync.Cond, holder *int, me int, end time.Time, timeouts *int) {
	mu.Lock()
	defer mu.Unlock()
	limit := time.Now().Add(patience)
	for *holder == me && time.Now().Before(end) {
		if time.Now().After(limit) {
			*timeouts++
			return
		}
		taken.Wait()
	}
}

// costCycles: exactly n cycles on one name, nothing else.
func costCycles(row string, l locker, n int) {
	errs := 0
	t0 := time.Now()
	for i := 0; i < n && time.Since(t0) < 60*time.Second; i++ {
		if err := cycle(l, "bench:cost"); err != nil {
			errs++
		}
	}
	emit(map[string]any{"row": row, "n": n, "errors": errs})
}

func open(lib string, uris []string, contended bool) (locker, error) {
	switch lib {
	case "redsync":
		return newRedsync(uris, contended)
	case "rueidislock":
		return newRueidis(uris)
	case "bare":
		return newBare(uris)
	}
	return nil, fmt.Errorf("unknown --lib %q", lib)
}

func run(lib, w string, nodes []string, seconds float64, n int) {
	row := lib + "." + w
	if w == "redlock5" && lib == "rueidislock" {
		emit(map[string]any{"row": row, "not_run": "rueidislock takes its majority over " +
			"KeyMajority*2-1 keys through one client (one Redis or one cluster), not over " +
			"independent masters"})
		return
	}
	uris := nodes[:1]
	if w == "redlock5" {
		uris = nodes[:5]
	}
	l, err := open(lib, uris, w == "handoff")
	if err != nil {
		emit(map[string]any{"row": row, "not_run": err.Error()})
		return
	}
	defer l.close()
	switch w {
	case "t1", "redlock5":
		cycles(row, l, 1, len(uris), seconds)
	case "t16":
		cycles(row, l, 16, 1, seconds)
	case "handoff":
		handoff(row, l, 8, seconds)
	case "cost":
		costCycles(row, l, n)
	default:
		emit(map[string]any{"row": row, "error": "unknown workload"})
	}
}

func main() {
	lib := flag.String("lib", "redsync", "redsync, rueidislock or bare")
	nodes := flag.String("nodes", "", "comma-separated redis:// URIs (5)")
	seconds := flag.Float64("seconds", 3, "per workload")
	workloads := flag.String("workloads", "t1,t16,redlock5,handoff", "comma-separated")
	n := flag.Int("cycles", 2000, "cycles of the cost workload")
	flag.Parse()
	uris := strings.Split(*nodes, ",")
	if len(uris) < 5 || *seconds <= 0 || *seconds > 600 {
		fmt.Fprintln(os.Stderr, "need --nodes (5 URIs) and 0 < --seconds <= 600")
		os.Exit(2)
	}
	// A hard bound on the whole run, whatever happens to the servers.
	time.AfterFunc(time.Duration(*seconds*8+60)*time.Second, func() {
		fmt.Fprintln(os.Stderr, "peers: out of time")
		os.Exit(3)
	})
	for _, w := range strings.Split(*workloads, ",") {
		run(*lib, w, uris, *seconds, *n)
	}
}
