package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// request is one unit of work: an audit record (rec) for the appender,
// or a state change (op) or nothing (Flush) for the writer. Whoever
// serves it sets entry and err and then closes done; the caller reads
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

// writer owns the write connection to the database and is used by the
// writer goroutine alone. It writes, in one transaction per batch, the
// audit index rows of entries the appender has written, the state
// changes callers wait for, and the journal's events.
type writer struct {
	s *Store

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
	spareI []api.AuditEntry
}

func newWriter(ctx context.Context, s *Store, jlen int64) (*writer, error) {
	w := &writer{s: s, jlen: jlen}
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

// run is the writer goroutine. It returns once Close has set closing,
// the appender has stopped, and everything queued is written (or has
// failed).
func (w *writer) run() {
	defer close(w.s.writerDone)
	for range w.s.wake {
		if w.drain() {
			return
		}
	}
}

// drain writes batches until nothing is due. It reports whether the
// store is closing with nothing left, which ends the writer goroutine.
func (w *writer) drain() bool {
	for {
		reqs, evs, idx, closing := w.take()
		if len(reqs) == 0 && len(evs) == 0 && len(idx) == 0 {
			return closing
		}
		w.write(reqs, evs, idx)
		w.release(reqs)
		clear(reqs)
		w.spareQ = reqs[:0]
		if evs != nil {
			clear(evs)
			w.spareE = evs[:0]
		}
		if idx != nil {
			clear(idx)
			w.spareI = idx[:0]
		}
	}
}

// take moves the queued work out of the Store. Index rows and events
// stay queued until they are due (see pendingLocked) unless a change or
// a Flush is queued, which takes them along. Once closing, it waits for
// the appender to finish, so the index rows of every written entry are
// taken.
func (w *writer) take() ([]*request, []api.Event, []api.AuditEntry, bool) {
	s := w.s
	s.mu.Lock()
	closing := s.closing
	s.mu.Unlock()
	if closing {
		<-s.appenderDone
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	reqs := s.ops
	s.ops = w.spareQ
	w.spareQ = nil
	if !s.due && !closing && len(reqs) == 0 {
		return reqs, nil, nil, false
	}
	evs, idx := s.events, s.index
	s.events, s.index = w.spareE, w.spareI
	w.spareE, w.spareI = nil, nil
	s.due = false
	return reqs, evs, idx, closing
}

// write writes idx, reqs and evs in one transaction. If that fails it
// writes the index rows, each request and the events each in a
// transaction of their own, so that one failing request fails its caller
// alone. Index rows that cannot be written leave the index behind the
// log (indexFailed), which the next start repairs; events that cannot be
// written are dropped: nobody waits for them.
func (w *writer) write(reqs []*request, evs []api.Event, idx []api.AuditEntry) {
	ctx := context.Background()
	err := w.inTx(ctx, func(tx *sql.Tx) error {
		if err := w.indexRows(ctx, tx, idx); err != nil {
			return err
		}
		for _, r := range reqs {
			if err := w.apply(ctx, tx, r); err != nil {
				return err
			}
		}
		return w.journal(ctx, tx, evs)
	})
	if err == nil {
		w.s.indexed(idx, nil)
		return
	}
	if len(idx) > 0 {
		err := w.inTx(ctx, func(tx *sql.Tx) error { return w.indexRows(ctx, tx, idx) })
		w.s.indexed(idx, err)
	}
	for _, r := range reqs {
		r.err = w.inTx(ctx, func(tx *sql.Tx) error { return w.apply(ctx, tx, r) })
	}
	if len(evs) > 0 {
		w.loadSeqs(ctx)
		if w.inTx(ctx, func(tx *sql.Tx) error { return w.journal(ctx, tx, evs) }) != nil {
			w.loadSeqs(ctx)
		}
	}
}

// release publishes the journal's length and wakes the batch's callers.
func (w *writer) release(reqs []*request) {
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

// indexRows inserts audit index rows maxRows at a time.
func (w *writer) indexRows(ctx context.Context, tx *sql.Tx, idx []api.AuditEntry) error {
	return insertAudit(ctx, tx, w.multiInsert, idx)
}

// insertAudit inserts entries into the audit table, maxRows at a time,
// with the multi-row INSERTs multi returns.
func insertAudit(ctx context.Context, tx *sql.Tx, multi func(string, int) (*sql.Stmt, error), entries []api.AuditEntry) error {
	args := make([]any, 0, 13*min(len(entries), maxRows))
	for rest := entries; len(rest) > 0; {
		chunk := rest[:chunkSize(len(rest))]
		rest = rest[len(chunk):]
		args = args[:0]
		for _, e := range chunk {
			args = append(args, e.Seq, e.Time, e.Kind, e.Source, e.Actor, e.AppID,
				e.CapabilityID, e.ParamsDigest, e.Outcome, e.DurationUS, nullText(e.Detail), e.PrevHash, e.Hash)
		}
		st, err := multi(insertAuditSQL, len(chunk))
		if err != nil {
			return fmt.Errorf("store: preparing audit insert: %w", err)
		}
		if _, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("store: indexing audit entries %d to %d: %w", chunk[0].Seq, chunk[len(chunk)-1].Seq, err)
		}
	}
	return nil
}

// apply performs one state change inside tx.
func (w *writer) apply(ctx context.Context, tx *sql.Tx, r *request) error {
	if r.op != nil {
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
