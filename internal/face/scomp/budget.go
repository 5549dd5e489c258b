package scomp

import (
	"context"
	"sync"
)

// DefaultMemoryTotal is Options.MemoryTotal's default: the heaps of the
// sessions open at once may reserve 2 GiB together.
const DefaultMemoryTotal = 2 << 30

// memoryBudget is the face-wide bound on the sandboxes' heaps: each
// session reserves its MemoryLimit before its upgrade and gives it back
// when its connection ends, so that the sessions open at once cannot
// hold more than total bytes of JavaScript heap between them, however
// many the connection and session caps let in.
//
// Concurrency: mu guards inUse and changed; it is a leaf.
type memoryBudget struct {
	total int64

	mu    sync.Mutex
	inUse int64
	// changed is closed, and replaced, after each release.
	changed chan struct{}
}

func newMemoryBudget(total int64) *memoryBudget {
	return &memoryBudget{total: total, changed: make(chan struct{})}
}

// reserve takes n bytes of the budget; when they are not left, it takes
// nothing and reports false with the bytes in use.
func (b *memoryBudget) reserve(n int64) (inUse int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inUse+n > b.total {
		return b.inUse, false
	}
	b.inUse += n
	return b.inUse, true
}

// release gives back n bytes reserve took.
func (b *memoryBudget) release(n int64) {
	b.mu.Lock()
	b.inUse -= n
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// used is the bytes reserved now.
func (b *memoryBudget) used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inUse
}

// wait calls f with the bytes in use, now and after each release, until
// f returns true or ctx ends; it reports whether f did.
func (b *memoryBudget) wait(ctx context.Context, f func(inUse int64) bool) bool {
	for {
		b.mu.Lock()
		done, changed := f(b.inUse), b.changed
		b.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}
