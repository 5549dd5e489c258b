package testkit

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestClock(t *testing.T) {
	c := NewClock(time.Unix(100, 0))
	var mu sync.Mutex
	var fired []string
	add := func(name string, d time.Duration) func() bool {
		return c.AfterFunc(d, func() { mu.Lock(); fired = append(fired, name); mu.Unlock() })
	}
	add("late", 3*time.Second)
	add("early", time.Second)
	stop := add("stopped", time.Second)
	if !stop() || stop() {
		t.Error("stop should report pending once")
	}
	c.Advance(500 * time.Millisecond)
	if len(fired) != 0 {
		t.Fatalf("fired %v before their time", fired)
	}
	c.Advance(5 * time.Second)
	if !slices.Equal(fired, []string{"early", "late"}) {
		t.Errorf("fired %v, want [early late]", fired)
	}
	if got := c.Now(); !got.Equal(time.Unix(105, 500_000_000)) {
		t.Errorf("now = %v", got)
	}
}

func TestSocketPair(t *testing.T) {
	a, b := SocketPair(t)
	if _, err := a.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	if _, err := b.Read(buf); err != nil || buf[0] != 'x' {
		t.Fatalf("read %q, %v", buf, err)
	}
}

func TestCheckGoroutinesCatchesALeak(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	defer func(d time.Duration) { leakWait = d }(leakWait)
	leakWait = 100 * time.Millisecond
	var inner fakeTB
	func() {
		CheckGoroutines(&inner)
		go func() { <-stop }()
		inner.runCleanups()
	}()
	if !inner.failed {
		t.Fatal("a goroutine left running was not reported")
	}
}

func TestCheckGoroutinesWaitsForEnding(t *testing.T) {
	var inner fakeTB
	CheckGoroutines(&inner)
	done := make(chan struct{})
	go func() { <-done }()
	close(done)
	inner.runCleanups()
	if inner.failed {
		t.Fatalf("a goroutine that ended was reported: %s", inner.msg)
	}
}

// fakeTB records what CheckGoroutines reports.
type fakeTB struct {
	testing.TB
	cleanups []func()
	failed   bool
	msg      string
}

func (f *fakeTB) Helper()           {}
func (f *fakeTB) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Errorf(format string, args ...any) {
	f.failed = true
	f.msg = fmt.Sprintf(format, args...)
}
func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}
