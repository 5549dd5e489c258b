package store

import (
	"context"
	"database/sql"
	"fmt"

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

// writer is the goroutine that owns the write connection. All its fields
// are owned by that goroutine once run starts; it shares state with
// callers only through Store.mu (queue, events, closing, head), the
// request's done channel, and Store.journalLen.
type writer struct {
	s *Store

	// head is the chain head including the batch in progress; Store.head
	// is set from it after each commit.
	head chainHead
	// jlen counts journal rows, including the batch in progress.
	jlen int64

	insAudit, insEvent, trim *sql.Stmt
	// seqs holds the sequence numbers of the journal's rows, oldest
	// first, so the writer knows below which sequence to trim without
	// asking the database. It is loaded at start.
	seqs []int64

	// spare buffers, swapped with the Store's queues on each take.
	spareQ []*request
	spareE []api.Event
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
	if err := w.loadSeqs(ctx); err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// loadSeqs reads the journal's sequence numbers and row count.
func (w *writer) loadSeqs(ctx context.Context) error {
	rows, err := w.s.wdb.QueryContext(ctx, `SELECT seq FROM events ORDER BY seq`)
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
	return nil
}

// close releases the prepared statements; called after run returned.
func (w *writer) close() {
	for _, st := range []*sql.Stmt{w.insAudit, w.insEvent, w.trim} {
		if st != nil {
			st.Close()
		}
	}
}

// run is the writer goroutine. It returns once Close has set closing and
// everything queued before that is committed (or has failed).
func (w *writer) run() {
	defer close(w.s.writerDone)
	for range w.s.wake {
		for {
			reqs, evs, closing := w.take()
			if len(reqs) == 0 && len(evs) == 0 {
				if closing {
					return
				}
				break
			}
			w.commit(reqs, evs)
			clear(reqs)
			clear(evs)
			w.spareQ, w.spareE = reqs[:0], evs[:0]
		}
	}
}

// take moves the queued work out of the Store.
func (w *writer) take() ([]*request, []api.Event, bool) {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	reqs, evs := s.queue, s.events
	s.queue, s.events = w.spareQ, w.spareE
	w.spareQ, w.spareE = nil, nil
	return reqs, evs, s.closing
}

// commit writes one batch in one transaction and then releases its
// callers. If that fails it retries each request in a transaction of its
// own, so that one failing request does not fail the others. Events that
// cannot be written are dropped: nobody waits for them.
func (w *writer) commit(reqs []*request, evs []api.Event) {
	ctx := context.Background()
	head := w.head
	err := w.inTx(ctx, func(tx *sql.Tx) error {
		ins := tx.StmtContext(ctx, w.insAudit)
		for _, r := range reqs {
			if err := w.apply(ctx, tx, ins, r); err != nil {
				return err
			}
		}
		return w.journal(ctx, tx, evs)
	})
	if err != nil {
		w.head = head
		for _, r := range reqs {
			head := w.head
			r.err = w.inTx(ctx, func(tx *sql.Tx) error {
				return w.apply(ctx, tx, tx.StmtContext(ctx, w.insAudit), r)
			})
			if r.err != nil {
				w.head = head
				r.entry = api.AuditEntry{}
			}
		}
		if len(evs) > 0 {
			w.loadSeqs(ctx)
			if w.inTx(ctx, func(tx *sql.Tx) error { return w.journal(ctx, tx, evs) }) != nil {
				w.loadSeqs(ctx)
			}
		}
	}

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
	ins := tx.StmtContext(ctx, w.insEvent)
	for _, ev := range evs {
		res, err := ins.ExecContext(ctx, ev.Sequence, ev.Type, ev.Timestamp, ev.AppID, ev.SurfaceID, nullText(ev.Data))
		if err != nil {
			return fmt.Errorf("store: journaling event %d: %w", ev.Sequence, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("store: journaling event %d: %w", ev.Sequence, err)
		}
		if n > 0 {
			w.jlen += n
			w.seqs = append(w.seqs, ev.Sequence)
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
