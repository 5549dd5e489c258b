package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// request is one unit of work for the writer: an audit record (rec), a
// state change (op), or neither, which only waits for a commit (Flush).
// The writer sets entry and err and then closes done; the caller reads
// them only after done is closed.
type request struct {
	rec *audit.Prepared
	op  func(context.Context, *sql.Tx) error

	done  chan struct{}
	entry api.AuditEntry
	err   error
}

func newRequest() *request { return &request{done: make(chan struct{})} }

const (
	insertAuditSQL = `INSERT INTO audit (seq, time, kind, source, actor, app_id, capability_id,
		params_digest, outcome, duration_us, detail, prev_hash, hash)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// A duplicate sequence number keeps the first event; RowsAffected
	// tells the writer whether a row was added.
	insertEventSQL = `INSERT INTO events (seq, type, timestamp, app_id, surface_id, data)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (seq) DO NOTHING`
	// trimEventsSQL keeps the newest N rows; its argument is N-1. With N
	// rows or fewer the subquery is NULL and nothing is deleted. It walks
	// N index entries, so the writer uses it only at start and uses
	// trimBelowSQL, which costs only the rows it deletes, per batch.
	trimEventsSQL = `DELETE FROM events WHERE seq <
		(SELECT seq FROM events ORDER BY seq DESC LIMIT 1 OFFSET ?)`
	trimBelowSQL = `DELETE FROM events WHERE seq < ?`
)

// writer owns the write connection. Its fields are guarded by commitMu,
// held by whoever commits: the writer goroutine, or a caller of
// AppendAudit that found no commit under way and commits the queue itself
// (group commit with a leader). It shares state with callers only through
// Store.mu (queue, events, closing, head), the request's done channel,
// and Store.journalLen.
type writer struct {
	s *Store

	commitMu sync.Mutex

	// head is the chain head including the batch in progress; Store.head
	// is set from it after each commit.
	head chainHead
	// jlen counts journal rows, including the batch in progress.
	jlen int64

	insAudit, insEvent, trim *sql.Stmt
	// seqsStale says seqs must be reread before use.
	seqsStale bool
	// multi caches multi-row INSERTs by row count.
	multi map[multiKey]*sql.Stmt
	// seqs holds the sequence numbers of the journal's rows, oldest
	// first, so the writer knows below which sequence to trim without
	// asking the database. It is loaded at start.
	seqs []int64

	// spare buffers, swapped with the Store's queues on each take.
	spareQ []*request
	spareE []api.Event

	// failed is set when an audit append fails to commit, and stays set:
	// after that the chain this writer extends and the file may disagree
	// (another process appended, say), so every later append is refused
	// with it (wrapping audit.ErrUnavailable) until the store is
	// reopened. Read by any goroutine; written under commitMu.
	failed atomic.Pointer[error]
}

// auditFailed makes err, the failure of an audit append's commit, the
// writer's sticky failure (if it is the first) and returns what the
// append's caller is answered.
func (w *writer) auditFailed(err error) error {
	wrapped := fmt.Errorf("%w: %w", audit.ErrUnavailable, err)
	w.failed.CompareAndSwap(nil, &wrapped)
	return wrapped
}

// failure returns the sticky failure, nil while appends may commit.
func (w *writer) failure() error {
	if p := w.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func newWriter(ctx context.Context, s *Store, jlen int64) (*writer, error) {
	w := &writer{s: s, head: s.head, jlen: jlen}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&w.insAudit, insertAuditSQL},
		{&w.insEvent, insertEventSQL},
		{&w.trim, trimBelowSQL},
	} {
		st, err := s.wdb.PrepareContext(ctx, p.sql)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("preparing statements: %w", err)
		}
		*p.stmt = st
	}
	for _, base := range []string{insertAuditSQL, insertEventSQL} {
		if err := w.prepareMulti(ctx, base); err != nil {
			w.close()
			return nil, err
		}
	}
	if err := w.loadSeqs(ctx); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// loadSeqs reads the journal's sequence numbers and row count.
func (w *writer) loadSeqs(ctx context.Context) error {
	return w.readSeqs(ctx, w.s.wdb.QueryContext)
}

func (w *writer) loadSeqsTx(ctx context.Context, tx *sql.Tx) error {
	return w.readSeqs(ctx, tx.QueryContext)
}

func (w *writer) readSeqs(ctx context.Context, query func(context.Context, string, ...any) (*sql.Rows, error)) error {
	rows, err := query(ctx, `SELECT seq FROM events ORDER BY seq`)
	if err != nil {
		return fmt.Errorf("store: reading event journal: %w", err)
	}
	defer rows.Close()
	w.seqs = w.seqs[:0]
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			return fmt.Errorf("store: reading event journal: %w", err)
		}
		w.seqs = append(w.seqs, seq)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: reading event journal: %w", err)
	}
	w.jlen = int64(len(w.seqs))
	w.seqsStale = false
	return nil
}

// close releases the prepared statements; called after run returned.
func (w *writer) close() {
	for _, st := range []*sql.Stmt{w.insAudit, w.insEvent, w.trim} {
		if st != nil {
			st.Close()
		}
	}
	for _, st := range w.multi {
		st.Close()
	}
}

// run is the writer goroutine. It returns once Close has set closing and
// everything queued before that is committed (or has failed).
func (w *writer) run() {
	defer close(w.s.writerDone)
	for range w.s.wake {
		w.commitMu.Lock()
		stop := w.drain()
		w.commitMu.Unlock()
		if stop {
			return
		}
	}
}

// lead commits the queue on the calling goroutine when no commit is under
// way (the caller becomes the group's leader and saves two goroutine
// handoffs); otherwise it wakes the writer goroutine, which commits after
// the current leader. Either way the caller's request gets committed.
func (w *writer) lead() {
	if w.commitMu.TryLock() {
		w.drain()
		w.commitMu.Unlock()
		return
	}
	w.s.poke()
}

// drain commits batches until the queue is empty. It reports whether the
// store is closing with nothing left, which ends the writer goroutine.
// w.commitMu must be held.
func (w *writer) drain() bool {
	for {
		reqs, evs, closing := w.take()
		if len(reqs) == 0 && len(evs) == 0 {
			return closing
		}
		w.commit(reqs, evs)
		clear(reqs)
		w.spareQ = reqs[:0]
		if evs != nil {
			clear(evs)
			w.spareE = evs[:0]
		}
	}
}

// take moves the queued work out of the Store. Pending events stay
// queued when the batch is only audit appends and the events are not due
// yet (see AppendEvent), so that a lone append can commit on its own.
func (w *writer) take() ([]*request, []api.Event, bool) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	reqs := s.queue
	s.queue = w.spareQ
	w.spareQ = nil
	withEvents := s.eventsDue || s.closing
	for _, r := range reqs {
		if r.rec == nil {
			withEvents = true // an op or a Flush: it commits the events
		}
	}
	if !withEvents {
		return reqs, nil, s.closing
	}
	evs := s.events
	s.events = w.spareE
	w.spareE = nil
	s.eventsDue = false
	return reqs, evs, s.closing
}

// commit writes one batch and then releases its callers. Once the
// writer has failed an audit append, the batch's audit appends are
// refused with that failure and the rest is written.
func (w *writer) commit(reqs []*request, evs []api.Event) {
	all := reqs
	if failed := w.failure(); failed != nil {
		reqs = make([]*request, 0, len(all))
		for _, r := range all {
			if r.rec != nil {
				r.err = failed
				continue
			}
			reqs = append(reqs, r)
		}
	}
	if len(reqs) > 0 || len(evs) > 0 {
		w.write(reqs, evs)
	}
	w.release(all)
}

// write writes reqs and evs in one transaction. If that fails it retries
// each request in a transaction of its own, so that one failing request
// does not fail the others; an audit append that fails then is the
// writer's sticky failure (auditFailed), and the appends after it are
// refused. Events that cannot be written are dropped: nobody waits for
// them.
func (w *writer) write(reqs []*request, evs []api.Event) {
	ctx := context.Background()
	head := w.head
	if len(reqs) == 1 && reqs[0].rec != nil && len(evs) == 0 {
		// One statement commits by itself: no BEGIN and COMMIT to pay.
		r := reqs[0]
		if r.err = w.apply(ctx, nil, w.insAudit, r); r.err != nil {
			w.head = head
			r.entry = api.AuditEntry{}
			r.err = w.auditFailed(r.err)
		}
		return
	}
	err := w.inTx(ctx, func(tx *sql.Tx) error {
		// Runs of audit appends go in multi-row INSERTs; ops run in order
		// between them.
		var run []*request
		for _, r := range reqs {
			if r.rec != nil {
				run = append(run, r)
				continue
			}
			if err := w.appendRun(ctx, tx, run); err != nil {
				return err
			}
			run = run[:0]
			if err := w.apply(ctx, tx, nil, r); err != nil {
				return err
			}
		}
		if err := w.appendRun(ctx, tx, run); err != nil {
			return err
		}
		return w.journal(ctx, tx, evs)
	})
	if err == nil {
		return
	}
	w.head = head
	for _, r := range reqs {
		if failed := w.failure(); failed != nil && r.rec != nil {
			r.err, r.entry = failed, api.AuditEntry{}
			continue
		}
		head := w.head
		r.err = w.inTx(ctx, func(tx *sql.Tx) error {
			return w.apply(ctx, tx, tx.StmtContext(ctx, w.insAudit), r)
		})
		if r.err != nil {
			w.head = head
			if r.rec != nil {
				r.entry = api.AuditEntry{}
				r.err = w.auditFailed(r.err)
			}
		}
	}
	if len(evs) > 0 {
		w.loadSeqs(ctx)
		if w.inTx(ctx, func(tx *sql.Tx) error { return w.journal(ctx, tx, evs) }) != nil {
			w.loadSeqs(ctx)
		}
	}
}

// release publishes the new chain head and wakes the batch's callers.
func (w *writer) release(reqs []*request) {
	w.s.mu.Lock()
	w.s.head = w.head
	w.s.mu.Unlock()
	w.s.journalLen.Store(w.jlen)
	for _, r := range reqs {
		close(r.done)
	}
}

// inTx runs fn in a transaction on the write connection and commits it.
func (w *writer) inTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := w.s.wdb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		// A COMMIT that fails with SQLITE_BUSY leaves the transaction
		// open on the connection, and database/sql has already returned
		// the connection to the pool. The pool holds one connection, so
		// this reaches it; "no transaction is active" is the usual answer.
		_, _ = w.s.wdb.ExecContext(ctx, "ROLLBACK")
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

// maxRows bounds the rows of one multi-row INSERT. Runs are cut into
// chunks whose sizes are powers of two, so few statements are prepared.
const maxRows = 32

// chunkSize is the largest power of two not above n or maxRows.
func chunkSize(n int) int {
	c := 1
	for c*2 <= n && c*2 <= maxRows {
		c *= 2
	}
	return c
}

// prepareMulti prepares the multi-row INSERTs of base for every chunk
// size. They are prepared up front: the write pool has one connection,
// which a transaction holds while it runs.
func (w *writer) prepareMulti(ctx context.Context, base string) error {
	i := strings.Index(base, "VALUES (")
	j := strings.Index(base[i:], ")")
	row := base[i+len("VALUES ") : i+j+1]
	for n := 1; n <= maxRows; n *= 2 {
		q := base[:i+len("VALUES ")] + row + strings.Repeat(", "+row, n-1) + base[i+j+1:]
		st, err := w.s.wdb.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("preparing statements: %w", err)
		}
		if w.multi == nil {
			w.multi = map[multiKey]*sql.Stmt{}
		}
		w.multi[multiKey{base, n}] = st
	}
	return nil
}

// multiInsert returns the prepared INSERT of n rows (a chunk size).
func (w *writer) multiInsert(base string, n int) (*sql.Stmt, error) {
	st, ok := w.multi[multiKey{base, n}]
	if !ok {
		return nil, fmt.Errorf("no prepared insert of %d rows", n)
	}
	return st, nil
}

type multiKey struct {
	sql string
	n   int
}

// appendRun seals a run of audit appends onto the chain and inserts them
// maxRows at a time.
func (w *writer) appendRun(ctx context.Context, tx *sql.Tx, run []*request) error {
	args := make([]any, 0, 13*min(len(run), maxRows))
	for len(run) > 0 {
		chunk := run[:chunkSize(len(run))]
		run = run[len(chunk):]
		args = args[:0]
		for _, r := range chunk {
			seq := w.head.seq + 1
			e, h, err := r.rec.Seal(w.head.hash, seq)
			if err != nil {
				return err
			}
			args = append(args, e.Seq, e.Time, e.Kind, e.Source, e.Actor, e.AppID,
				e.CapabilityID, e.ParamsDigest, e.Outcome, e.DurationUS, nullText(e.Detail), e.PrevHash, e.Hash)
			w.head = chainHead{seq: seq, hash: h}
			r.entry = e
		}
		st, err := w.multiInsert(insertAuditSQL, len(chunk))
		if err != nil {
			return fmt.Errorf("store: preparing audit insert: %w", err)
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("store: appending audit entries %d to %d: %w", chunk[0].entry.Seq, w.head.seq, err)
		}
	}
	return nil
}

// apply performs one request inside tx, advancing w.head for an audit
// entry.
func (w *writer) apply(ctx context.Context, tx *sql.Tx, ins *sql.Stmt, r *request) error {
	switch {
	case r.rec != nil:
		seq := w.head.seq + 1
		e, h, err := r.rec.Seal(w.head.hash, seq)
		if err != nil {
			return err
		}
		_, err = ins.ExecContext(ctx, e.Seq, e.Time, e.Kind, e.Source, e.Actor, e.AppID,
			e.CapabilityID, e.ParamsDigest, e.Outcome, e.DurationUS, nullText(e.Detail), e.PrevHash, e.Hash)
		if err != nil {
			return fmt.Errorf("store: appending audit entry %d: %w", seq, err)
		}
		w.head = chainHead{seq: seq, hash: h}
		r.entry = e
	case r.op != nil:
		return r.op(ctx, tx)
	}
	return nil
}

// journal inserts evs and trims the journal to its limit.
func (w *writer) journal(ctx context.Context, tx *sql.Tx, evs []api.Event) error {
	if len(evs) == 0 {
		return nil
	}
	args := make([]any, 0, 6*min(len(evs), maxRows))
	for rest := evs; len(rest) > 0; {
		chunk := rest[:chunkSize(len(rest))]
		rest = rest[len(chunk):]
		args = args[:0]
		for _, ev := range chunk {
			args = append(args, ev.Sequence, ev.Type, ev.Timestamp, ev.AppID, ev.SurfaceID, nullText(ev.Data))
		}
		st, err := w.multiInsert(insertEventSQL, len(chunk))
		if err != nil {
			return fmt.Errorf("store: preparing journal insert: %w", err)
		}
		res, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...)
		if err != nil {
			return fmt.Errorf("store: journaling events %d to %d: %w", chunk[0].Sequence, chunk[len(chunk)-1].Sequence, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: journaling events: %w", err)
		}
		w.jlen += n
		if n == int64(len(chunk)) {
			for _, ev := range chunk {
				w.seqs = append(w.seqs, ev.Sequence)
			}
		} else {
			// Some were already journaled: learn which from the table.
			w.seqsStale = true
		}
	}
	if w.seqsStale {
		if err := w.loadSeqsTx(ctx, tx); err != nil {
			return err
		}
	}
	excess := len(w.seqs) - w.s.journalLimit
	if excess <= 0 {
		return nil
	}
	// Sequences only grow, so the oldest rows are a prefix.
	below := w.seqs[excess]
	res, err := tx.StmtContext(ctx, w.trim).ExecContext(ctx, below)
	if err != nil {
		return fmt.Errorf("store: trimming event journal: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("store: trimming event journal: %w", err)
	}
	w.jlen -= n
	w.seqs = append(w.seqs[:0], w.seqs[excess:]...)
	return nil
}

// nullText stores an absent JSON value as NULL.
func nullText(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}
