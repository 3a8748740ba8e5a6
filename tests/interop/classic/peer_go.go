// peer_go.go - redsync v4 (with go-redis v9), the Go peer of judge.py:
//
//	peer_go MODE URIS CHECKER SIDE ARGS...
//
// redsync keys a mutex by its name as given, SETs a random base64 token with
// NX PX on each pool, releases with a compare-and-DEL and extends with a
// compare-and-PEXPIRE to its expiry; over N pools it is Redlock. It has no
// pub/sub: a waiter retries after a random 50-250 ms (its default delay).
// run.sh copies this file into a module of its own (never committed) and
// builds it there. The modes and control protocol are judge.py's.
package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	goredislib "github.com/redis/go-redis/v9"
)

var (
	ctx     = context.Background()
	rs      *redsync.Redsync
	ctl     *goredislib.Client
	checker string
	side    string
)

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// mutex: the wait is bounded by the number of tries (about 150 ms apart).
func mutex(name string, leaseMs, waitMs int) *redsync.Mutex {
	tries := 1
	if waitMs > 0 {
		tries = waitMs/150 + 1
	}
	return rs.NewMutex(name, redsync.WithExpiry(time.Duration(leaseMs)*time.Millisecond),
		redsync.WithTries(tries))
}

// acquire: the mutex, nil when it stayed busy, or an error of another kind.
func acquire(name string, leaseMs, waitMs int) (*redsync.Mutex, error) {
	m := mutex(name, leaseMs, waitMs)
	err := m.LockContext(ctx)
	var taken *redsync.ErrTaken
	if err == nil {
		return m, nil
	}
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
		return nil, nil
	}
	return nil, err
}

func release(m *redsync.Mutex) error {
	ok, err := m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("unlock: not held")
	}
	return err
}

func check(name string, delta int) error {
	keys := []string{"chk:" + name, "chk:" + name + ":who", "chk:bad", "chk:sections"}
	return ctl.Eval(ctx, checker, keys, delta, side, name).Err()
}

func say(name, value string) { ctl.RPush(ctx, "ctl:"+name, value) }

func take(name string) string {
	got, err := ctl.BLPop(ctx, 30*time.Second, "go:"+name).Result()
	if err != nil {
		panic(fmt.Sprintf("nothing on go:%s within 30 s: %v", name, err))
	}
	return got[1]
}

func contend(args []string) {
	seconds, workers, leaseMs, waitMs := atoi(args[0]), atoi(args[1]), atoi(args[2]), atoi(args[3])
	names := strings.Split(args[4], ",")
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	var mu sync.Mutex
	sections, tries, errs := 0, 0, 0
	firstErr := ""
	count := func(sec, try int, err error) {
		mu.Lock()
		defer mu.Unlock()
		sections, tries = sections+sec, tries+try
		if err != nil {
			errs++
			if firstErr == "" {
				firstErr = err.Error()
			}
		}
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			rnd := rand.New(rand.NewSource(seed))
			for i := 0; i < 100000 && time.Now().Before(deadline); i++ {
				name := names[rnd.Intn(len(names))]
				m, err := acquire(name, leaseMs, waitMs)
				if m == nil {
					count(0, 1, err)
					continue
				}
				err = check(name, 1)
				time.Sleep(time.Duration(rnd.Intn(2000)) * time.Microsecond)
				if err == nil {
					err = check(name, -1)
				}
				if err2 := release(m); err == nil {
					err = err2
				}
				count(1, 1, err)
			}
		}(time.Now().UnixNano() + int64(w))
	}
	wg.Wait()
	fmt.Printf("RESULT sections %d\nRESULT tries %d\nRESULT errors %d\n", sections, tries, errs)
	if firstErr != "" {
		fmt.Printf("ERROR %s\n", firstErr)
	}
}

func hold(args []string) {
	rounds, prefix, leaseMs := atoi(args[0]), args[1], atoi(args[2])
	for i := 0; i < rounds; i++ {
		name := fmt.Sprintf("%s:%d", prefix, i)
		m, err := acquire(name, leaseMs, 5000)
		if m == nil {
			say(name, fmt.Sprintf("none %v", err))
			continue
		}
		say(name, "held")
		take(name)
		t0 := time.Now().UnixNano()
		if err := release(m); err != nil {
			panic(err)
		}
		say(name, strconv.FormatInt(t0, 10))
	}
}

func wait(args []string) {
	rounds, prefix, leaseMs := atoi(args[0]), args[1], atoi(args[2])
	for i := 0; i < rounds; i++ {
		name := fmt.Sprintf("%s:%d", prefix, i)
		take(name)
		say(name, "waiting")
		m, _ := acquire(name, leaseMs, 10000)
		t1 := time.Now().UnixNano()
		if m == nil {
			say(name, "none")
			continue
		}
		say(name, strconv.FormatInt(t1, 10))
		if err := release(m); err != nil {
			panic(err)
		}
	}
}

func extend(args []string) {
	name, leaseMs, holdMs, everyMs := args[0], atoi(args[1]), atoi(args[2]), atoi(args[3])
	m, _ := acquire(name, leaseMs, 5000)
	if m == nil {
		say(name, "none")
		return
	}
	say(name, "held")
	ok, bad := 0, 0
	end := time.Now().Add(time.Duration(holdMs) * time.Millisecond)
	for i := 0; i < 1000 && time.Now().Before(end); i++ {
		time.Sleep(time.Duration(everyMs) * time.Millisecond)
		if done, err := m.ExtendContext(ctx); done && err == nil {
			ok++
		} else {
			bad++
		}
	}
	say(name, fmt.Sprintf("extended %d failed %d", ok, bad))
	take(name)
	if err := release(m); err != nil {
		panic(err)
	}
	say(name, "released")
}

func tryWhileHeld(args []string) {
	name, leaseMs, everyMs := args[0], atoi(args[1]), atoi(args[2])
	take(name) // "held"
	tries, got := 0, 0
	for i := 0; i < 10000; i++ {
		if v, _ := ctl.LPop(ctx, "go:"+name).Result(); v != "" { // "done"
			break
		}
		tries++
		if m, _ := acquire(name, leaseMs, 0); m != nil {
			got++
			_ = release(m)
		}
		time.Sleep(time.Duration(everyMs) * time.Millisecond)
	}
	say(name, fmt.Sprintf("tries %d got %d", tries, got))
	take(name) // "released"
	m, _ := acquire(name, leaseMs, 3000)
	if m == nil {
		say(name, "after none")
		return
	}
	say(name, "after got")
	_ = release(m)
}

func main() {
	mode, uris := os.Args[1], strings.Split(os.Args[2], ",")
	text, err := os.ReadFile(os.Args[3])
	if err != nil {
		panic(err)
	}
	checker, side = string(text), os.Args[4]
	var pools []redis.Pool
	for _, u := range uris {
		opt, err := goredislib.ParseURL(u)
		if err != nil {
			panic(err)
		}
		pools = append(pools, goredis.NewPool(goredislib.NewClient(opt)))
	}
	rs = redsync.New(pools...)
	opt, _ := goredislib.ParseURL(uris[0])
	ctl = goredislib.NewClient(opt)
	defer func() {
		if r := recover(); r != nil {
			fmt.Printf("ERROR %v\n", r)
			os.Exit(1)
		}
	}()
	modes := map[string]func([]string){"contend": contend, "hold": hold, "wait": wait,
		"extend": extend, "try": tryWhileHeld}
	modes[mode](os.Args[5:])
}
