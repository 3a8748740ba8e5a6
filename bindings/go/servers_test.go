package redlockc

import (
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"
)

// ownServer starts a redis-server of the test's own on a free port, with the
// arguments args gives for that port, and waits until the port answers; its
// port. Stopped by its pid at the test's end. A server that lost the race
// for the port is tried again on another, five times at most.
func ownServer(t *testing.T, args func(port int) []string) int {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		cmd := exec.Command("redis-server", args(port)...)
		if err := cmd.Start(); err != nil {
			t.Fatalf("redis-server: %v", err)
		}
		exited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(exited) }()
		for i := 0; i < 200; i++ { // 10 s
			select {
			case <-exited: // lost the port race: the next one
				i = 200
				continue
			default:
			}
			if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second); err == nil {
				c.Close()
				t.Cleanup(func() {
					_ = cmd.Process.Kill()
					<-exited
				})
				return port
			}
			time.Sleep(50 * time.Millisecond)
		}
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Fatal("no redis-server started")
	return 0
}
