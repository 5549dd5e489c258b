package testkit

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// CheckGoroutines fails t if goroutines started during the test are still
// running once it and its cleanups registered after this call have ended.
// Call it first in a connection test: cleanups run last-in first-out, so
// the check runs after the test's own servers and clients are closed. Do
// not use it in a test that runs in parallel with others: their
// goroutines would count as leaks.
//
// Goroutines end asynchronously after a Close returns, so the check waits
// for them to go, re-reading the goroutine list each time the scheduler
// has run, for at most five seconds.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	before := goroutineIDs()
	t.Cleanup(func() {
		deadline := time.Now().Add(leakWait)
		for {
			extra := leaked(before)
			if len(extra) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%d goroutines leaked:\n\n%s", len(extra), strings.Join(extra, "\n\n"))
				return
			}
			runtime.Gosched()
			time.Sleep(5 * time.Millisecond) // polling the goroutine list; no event signals "all gone"
		}
	})
}

// ignored names what the runtime and the testing package run for
// themselves: a goroutine whose stack holds one of these is not the
// test's.
var ignored = []string{
	"created by testing.(*T).Run", // another test's own goroutine
	"created by testing.runTests",
	"testing.(*M).",
	"os/signal.signal_recv",
	"runtime.ensureSigM",
	"testkit.CheckGoroutines",
}

func goroutineIDs() map[uint64]bool {
	ids := map[uint64]bool{}
	for _, g := range stacks() {
		ids[g.id] = true
	}
	return ids
}

type goroutine struct {
	id    uint64
	stack string
}

func stacks() []goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []goroutine
	for _, chunk := range bytes.Split(buf, []byte("\n\n")) {
		s := string(chunk)
		rest, ok := strings.CutPrefix(s, "goroutine ")
		if !ok {
			continue
		}
		idText, _, _ := strings.Cut(rest, " ")
		id, err := strconv.ParseUint(idText, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, goroutine{id: id, stack: s})
	}
	return out
}

func leaked(before map[uint64]bool) []string {
	var extra []string
	for _, g := range stacks() {
		if !before[g.id] && !isIgnored(g.stack) {
			extra = append(extra, g.stack)
		}
	}
	return extra
}

func isIgnored(stack string) bool {
	for _, p := range ignored {
		if strings.Contains(stack, p) {
			return true
		}
	}
	return false
}

// leakWait is how long CheckGoroutines waits for goroutines to end.
var leakWait = 5 * time.Second
