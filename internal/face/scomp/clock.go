package scomp

import (
	"context"
	"sync"
	"time"
)

// evalClock is an eval's time limit. It ends the eval's context once the
// eval has used up its time, leaving out the time it spends waiting for
// the user to decide a confirmation (paused): a person's decision is not
// the code's running time. Only the connection's goroutine pauses and
// resumes it; the timer's own goroutine ends the context.
type evalClock struct {
	mu      sync.Mutex
	t       *time.Timer
	left    time.Duration
	started time.Time
	paused  bool
}

// startClock starts a clock of limit that calls cancel when it runs out.
func startClock(limit time.Duration, cancel context.CancelFunc) *evalClock {
	return &evalClock{t: time.AfterFunc(limit, cancel), left: limit, started: time.Now()}
}

// pause stops the clock. It reports false when the time had run out
// already (the context is ended, or about to be).
func (c *evalClock) pause() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused {
		return true
	}
	if !c.t.Stop() {
		return false
	}
	c.left -= time.Since(c.started)
	c.paused = true
	return true
}

// resume starts the clock again with the time left.
func (c *evalClock) resume() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused {
		return
	}
	c.paused = false
	c.started = time.Now()
	c.t.Reset(max(c.left, 0))
}

// stop ends the clock for good.
func (c *evalClock) stop() {
	c.mu.Lock()
	c.t.Stop()
	c.mu.Unlock()
}
