package store

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/stored"
)

// The incremental walk checks what was appended since the last walk, and
// the point it resumes from: tampering there or after is caught, and an
// edit before it is left to the whole walk.
func TestVerifyIncremental(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name        string
		edit        func([]api.AuditEntry) []api.AuditEntry
		incremental bool // whether the incremental walk sees it
		broken      int64
		problem     string
		whole       int64 // where the whole walk sees the break
	}{
		{"new entry altered", deny(14), true, 14, "altered", 14},
		{"checkpoint altered", deny(10), true, 10, "rewritten", 10},
		{"checkpoint deleted", drop(10), true, 10, "rewritten", 11},
		{"newest removed", drop(15), true, 15, "removed", 15},
		{"old entry altered", deny(3), false, 3, "altered", 3},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, path := openFile(t)
			appendN(t, s, 10)
			if res, err := s.VerifyAuditIncremental(ctx); err != nil || !res.OK || res.Entries != 10 {
				t.Fatalf("first walk: %+v, %v", res, err)
			}
			for i := 10; i < 15; i++ {
				if _, err := s.AppendAudit(ctx, record(i)); err != nil {
					t.Fatal(err)
				}
			}
			editEntries(t, path, tt.edit)
			res, err := s.VerifyAuditIncremental(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tt.incremental {
				if res.OK || res.BrokenSeq != tt.broken || !strings.Contains(res.Problem, tt.problem) {
					t.Errorf("incremental = %+v; want broken at %d, problem mentioning %q", res, tt.broken, tt.problem)
				}
			} else if !res.OK || res.Entries != 15 {
				t.Errorf("incremental = %+v; want ok with 15 entries (the edit is before its checkpoint)", res)
			}
			full, err := s.VerifyAudit(ctx)
			if err != nil || full.OK || full.BrokenSeq != tt.whole {
				t.Errorf("whole walk = %+v, %v; want broken at %d", full, err, tt.whole)
			}
		})
	}
}

// deny edits entry seq's outcome, keeping its length (so the records
// after it stay where they were).
func deny(seq int64) func([]api.AuditEntry) []api.AuditEntry {
	return func(es []api.AuditEntry) []api.AuditEntry {
		es[seq-1].Outcome = "failure"
		return es
	}
}

// drop removes entry seq.
func drop(seq int64) func([]api.AuditEntry) []api.AuditEntry {
	return func(es []api.AuditEntry) []api.AuditEntry {
		return append(es[:seq-1:seq-1], es[seq:]...)
	}
}

// An intact log gives the incremental walk the whole walk's answer.
func TestVerifyIncrementalMatchesWhole(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		for round := range 3 {
			appendN(t, s, 7)
			inc, err := s.VerifyAuditIncremental(ctx)
			if err != nil {
				t.Fatal(err)
			}
			full, err := s.VerifyAudit(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if inc != full || !inc.OK || inc.Entries != int64(7*(round+1)) {
				t.Errorf("round %d: incremental %+v, whole %+v", round, inc, full)
			}
		}
	})
}

// Callers that arrive while a walk runs share its result: sixteen
// concurrent verifies cost one walk.
func TestVerifyShared(t *testing.T) {
	s, _ := openFile(t)
	appendN(t, s, 50)
	ctx := context.Background()

	// Hold the first walk until everyone else is waiting on it.
	s.ver.mu.Lock()
	f := &verifyFlight{full: true, done: make(chan struct{})}
	s.ver.flight = f
	s.ver.mu.Unlock()
	const callers = 16
	var wg sync.WaitGroup
	results := make(chan api.AuditVerifyResult, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			verify := s.VerifyAudit
			if i%2 == 0 {
				verify = s.VerifyAuditIncremental
			}
			res, err := verify(ctx)
			if err != nil {
				t.Error(err)
			}
			results <- res
		}()
	}
	for {
		s.ver.mu.Lock()
		n := f.waiting
		s.ver.mu.Unlock()
		if n == callers {
			break
		}
		runtime.Gosched()
	}
	// Every caller waits on the held walk; none started one of its own.
	want := api.AuditVerifyResult{OK: true, Entries: 42, Head: "shared"}
	f.res = want
	s.ver.mu.Lock()
	s.ver.flight = nil
	s.ver.mu.Unlock()
	close(f.done)
	wg.Wait()
	close(results)
	for res := range results {
		if res != want {
			t.Errorf("a caller got %+v, want the shared walk's %+v", res, want)
		}
	}
}

// After an append fails to be written, every later one is refused at
// once with audit.ErrUnavailable, while other writes go on.
func TestAuditFailureIsSticky(t *testing.T) {
	ctx := context.Background()
	// Every group starts a new segment, so an append must create a file.
	s, path := openFile(t, withSegmentSize(1))
	appendN(t, s, 3)
	dir := AuditDir(path)
	if err := os.Rename(dir, dir+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AppendAudit(ctx, record(4)); !errors.Is(err, audit.ErrUnavailable) {
		t.Fatalf("append with no log directory: %v, want ErrUnavailable", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(dir+".moved", dir); err != nil {
		t.Fatal(err)
	}
	// Even with the directory back the log stays refused: only a reopen
	// rereads it.
	if _, err := s.AppendAudit(ctx, record(5)); !errors.Is(err, audit.ErrUnavailable) {
		t.Errorf("append after the failure: %v, want ErrUnavailable", err)
	}
	if err := s.AuditErr(); !errors.Is(err, audit.ErrUnavailable) {
		t.Errorf("AuditErr = %v", err)
	}
	if err := s.SaveApp(ctx, stored.App{AppID: "org.example.a", Manifest: []byte(`{}`), UpdatedAt: t0}); err != nil {
		t.Errorf("SaveApp with the audit log down: %v", err)
	}
	s = reopen(t, s, path, withSegmentSize(1))
	if e, err := s.AppendAudit(ctx, record(6)); err != nil || e.Seq != 4 {
		t.Errorf("append after reopening: seq %d, %v; want seq 4", e.Seq, err)
	}
	if res, err := s.VerifyAudit(ctx); err != nil || !res.OK || res.Entries != 4 {
		t.Errorf("VerifyAudit = %+v, %v", res, err)
	}
}
