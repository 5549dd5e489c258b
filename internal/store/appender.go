package store

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/tlog"
)

// appender owns the audit log file. Audit appends are committed by
// writing them to the log, a whole group with one write(2): the caller
// that finds no append under way writes the queue itself (group commit
// with a leader); the others wake the appender goroutine, which writes
// after the current leader. Callers are released once their group is
// written; the SQLite index is fed afterwards by the writer goroutine,
// off the reply's path.
//
// Its fields are guarded by mu, held by whoever appends, and by the
// readers of the tree (checkpoints, proofs). Lock order: mu before
// Store.mu, never the other way round.
type appender struct {
	s  *Store
	mu sync.Mutex

	log  *tlog.Log
	head chainHead

	recs  []tlog.Record
	canon []byte
	ends  []int
	spare []*request

	// failed is set when an append fails, and stays set: the file and
	// the chain this appender extends may then disagree, so every later
	// append is refused with it (wrapping audit.ErrUnavailable) until the
	// store is reopened. Read by anyone; written under mu.
	failed atomic.Pointer[error]
}

// auditFailed makes err the sticky failure (if it is the first) and
// returns what the append's caller is answered.
func (a *appender) auditFailed(err error) error {
	wrapped := fmt.Errorf("%w: %w", audit.ErrUnavailable, err)
	a.failed.CompareAndSwap(nil, &wrapped)
	return *a.failed.Load()
}

// failure returns the sticky failure, nil while appends may be written.
func (a *appender) failure() error {
	if p := a.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// lead writes the queue on the calling goroutine when no append is
// under way; otherwise it wakes the appender goroutine.
func (a *appender) lead() {
	if a.mu.TryLock() {
		a.drain()
		a.mu.Unlock()
		return
	}
	a.s.pokeAppender()
}

// run is the appender goroutine; it returns once Close has set closing
// and the queue is written.
func (a *appender) run() {
	defer close(a.s.appenderDone)
	for range a.s.awake {
		a.mu.Lock()
		stop := a.drain()
		a.mu.Unlock()
		if stop {
			return
		}
	}
}

// drain writes groups until the queue is empty and reports whether the
// store is closing. a.mu must be held.
func (a *appender) drain() bool {
	for {
		s := a.s
		s.mu.Lock()
		reqs, closing := s.appends, s.closing
		s.appends = a.spare
		a.spare = nil
		s.mu.Unlock()
		if len(reqs) == 0 {
			a.spare = reqs
			return closing
		}
		a.write(reqs)
		clear(reqs)
		a.spare = reqs[:0]
	}
}

// write seals reqs onto the chain, writes them, and releases them.
func (a *appender) write(reqs []*request) {
	if err := a.failure(); err != nil {
		for _, r := range reqs {
			r.err = err
			close(r.done)
		}
		return
	}
	a.recs, a.canon, a.ends = a.recs[:0], a.canon[:0], a.ends[:0]
	head := a.head
	for _, r := range reqs {
		seq := head.seq + 1
		e, h, err := r.rec.Seal(head.hash, seq)
		if err != nil {
			r.err = fmt.Errorf("store: %w", err)
			continue
		}
		a.canon = r.rec.AppendCanonical(a.canon, seq)
		a.ends = append(a.ends, len(a.canon))
		rec := tlog.Record{Index: uint64(seq - 1)}
		copy(rec.Prev[:], head.hash)
		copy(rec.Hash[:], h)
		a.recs = append(a.recs, rec)
		r.entry = e
		head = chainHead{seq: seq, hash: h}
	}
	start := 0
	for i := range a.recs {
		a.recs[i].Canonical = a.canon[start:a.ends[i]]
		start = a.ends[i]
	}
	err := a.log.Append(a.recs)
	if err != nil {
		err = a.auditFailed(err)
	} else {
		a.head = head
	}
	s := a.s
	var entries int
	s.mu.Lock()
	s.head = a.head
	for _, r := range reqs {
		if r.err != nil {
			continue
		}
		if err != nil {
			r.err, r.entry = err, api.AuditEntry{}
			continue
		}
		s.index = append(s.index, r.entry)
		entries++
	}
	poke := s.pendingLocked(entries)
	s.mu.Unlock()
	for _, r := range reqs {
		close(r.done)
	}
	if poke {
		s.poke()
	}
}

// pendingLocked notes n more rows for the writer (index rows or events)
// and reports whether the writer must be woken now. Rows wait for a
// batch: they go in with the writer's next transaction, after
// pendingDelay, or once pendingBatch are waiting, whichever comes first.
// s.mu must be held.
func (s *Store) pendingLocked(n int) bool {
	if n == 0 {
		return false
	}
	if len(s.index)+len(s.events) >= pendingBatch {
		s.due = true
		return true
	}
	if !s.timerArmed {
		s.timerArmed = true
		time.AfterFunc(pendingDelay, func() {
			s.mu.Lock()
			s.due, s.timerArmed = true, false
			s.mu.Unlock()
			s.poke()
		})
	}
	return false
}

const (
	// pendingDelay bounds how long an index row or an event waits to be
	// written to the database.
	pendingDelay = 5 * time.Millisecond
	// pendingBatch waiting rows are written without waiting.
	pendingBatch = 256
)
