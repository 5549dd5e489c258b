// Package testkit holds what the project's tests share: a controllable
// clock for the broker and connected Unix socket pairs. Only tests import
// it.
package testkit

import (
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Clock is a clock that moves only when the test advances it. Its Now and
// AfterFunc fit core.Config.
type Clock struct {
	mu     sync.Mutex
	t      time.Time
	timers []*timer
}

type timer struct {
	at      time.Time
	f       func()
	stopped bool
}

// NewClock returns a clock reading start.
func NewClock(start time.Time) *Clock { return &Clock{t: start} }

// Now reads the clock.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// AfterFunc runs f once the clock has been advanced by d; the returned
// function cancels it and reports whether it was still pending.
func (c *Clock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{at: c.t.Add(d), f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped
		t.stopped = true
		return was
	}
}

// Advance moves the clock by d and runs the timers that came due, one
// after the other in the order they came due, off the caller's goroutine
// (as time.AfterFunc would: a timer may wait for something the caller
// does next). It waits for them, but at most a second.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	var due []*timer
	kept := c.timers[:0]
	for _, t := range c.timers {
		switch {
		case t.stopped:
		case !t.at.After(c.t):
			t.stopped = true
			due = append(due, t)
		default:
			kept = append(kept, t)
		}
	}
	c.timers = kept
	c.mu.Unlock()
	sort.SliceStable(due, func(i, j int) bool { return due[i].at.Before(due[j].at) })
	done := make(chan struct{})
	go func() {
		defer close(done)
		for _, t := range due {
			t.f()
		}
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

// SocketPair returns two connected Unix stream sockets, closed when the
// test ends.
func SocketPair(t testing.TB) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	mk := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "socketpair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		return c.(*net.UnixConn)
	}
	a, b := mk(fds[0]), mk(fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// GoldenTime is the fixed clock of golden transcripts:
// 2023-11-13T11:55:43Z, the timestamp of spec 000's pushed-event example.
var GoldenTime = time.Unix(1699876543, 0).UTC()

// SeqIDs returns a core.Config NewID that numbers ids per prefix from 1
// ("sub-1", "conf-2"), so transcripts can be compared byte for byte. It is
// safe for concurrent use.
func SeqIDs() func(prefix string) string {
	var mu sync.Mutex
	ids := map[string]int{}
	return func(prefix string) string {
		mu.Lock()
		defer mu.Unlock()
		ids[prefix]++
		return prefix + "-" + strconv.Itoa(ids[prefix])
	}
}

// OpenFDs counts this process's open descriptors.
func OpenFDs(t testing.TB) int {
	t.Helper()
	all, _ := FDs(t)
	return all
}

// FDs counts this process's open descriptors and, of them, the memfds.
func FDs(t testing.TB) (all, memfds int) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.HasPrefix(target, "/memfd:") {
			memfds++
		}
	}
	return len(ents), memfds
}
