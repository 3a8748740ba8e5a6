// The Go side of the cross-runtime counter (the critical section is
// described in ../counter.c), through Lock/Unlock (sync.Locker).
//
//	counter URI LOCK DIR ITERATIONS LABEL READY
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	redlockc "github.com/libredlockc/libredlockc/bindings/go"
)

// critical reports whether someone else was inside.
func critical(dir, label string) (bool, error) {
	inside := filepath.Join(dir, "inside")
	marker, err := os.OpenFile(inside, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	overlap := errors.Is(err, fs.ErrExist)
	if err != nil && !overlap {
		return false, err
	}
	value := 0
	if b, err := os.ReadFile(filepath.Join(dir, "counter")); err == nil {
		value, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	time.Sleep(time.Millisecond)
	tmp := filepath.Join(dir, "counter."+label)
	if err := os.WriteFile(tmp, []byte(fmt.Sprintf("%d\n", value+1)), 0o644); err != nil {
		return overlap, err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "counter")); err != nil {
		return overlap, err
	}
	if marker != nil {
		marker.Close()
		os.Remove(inside)
	}
	return overlap, nil
}

func run() (int, int, error) {
	if len(os.Args) != 7 {
		return 0, 0, errors.New("usage: counter URI LOCK DIR ITERATIONS LABEL READY")
	}
	uri, name, dir, label, ready := os.Args[1], os.Args[2], os.Args[3], os.Args[5], os.Args[6]
	iterations, err := strconv.Atoi(os.Args[4])
	if err != nil {
		return 0, 0, err
	}
	c, err := redlockc.NewClient(uri, "")
	if err != nil {
		return 0, 0, err
	}
	defer c.Close()
	l, err := c.NewLock(name)
	if err != nil {
		return 0, 0, err
	}
	defer l.Close()
	f, err := os.OpenFile(ready, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return 0, 0, err
	}
	fmt.Fprintf(f, "ready %s\n", label)
	f.Close()
	overlaps, errs := 0, 0
	for i := 0; i < iterations; i++ {
		l.Lock()
		overlap, err := critical(dir, label)
		l.Unlock()
		if overlap {
			overlaps++
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: iteration %d: %v\n", label, i, err)
			errs++
		}
	}
	fmt.Printf("%s iterations=%d overlaps=%d errors=%d\n", label, iterations, overlaps, errs)
	return overlaps, errs, nil
}

func main() {
	overlaps, errs, err := run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "go counter:", err)
		os.Exit(1)
	}
	if overlaps != 0 || errs != 0 {
		os.Exit(1)
	}
}
