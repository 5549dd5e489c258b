package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/tlog"
)

// Recovery is what opening the audit log found and did; the daemon logs
// it.
type Recovery struct {
	// Entries is the number of entries in the log once open.
	Entries int64
	// Torn describes the incomplete record cut off the end of the log
	// (a write the process was killed in, never acknowledged); "" if
	// there was none.
	Torn string
	// Corrupt describes the first record that could not be read; the log
	// then refuses appends (AuditErr) until it is repaired.
	Corrupt string
	// Migrated counts the entries copied from the database's audit rows
	// into a new log (a state directory from before the log existed).
	Migrated int64
	// Restored counts entries the index held and the log had lost (after
	// a power loss without fsync), appended to the log again.
	Restored int64
	// Indexed counts log entries added to the index, which was behind
	// (Rebuilt: rebuilt whole, because it disagreed with the log).
	Indexed int64
	Rebuilt bool
}

// AuditRecovery returns what opening the audit log found and did.
func (s *Store) AuditRecovery() Recovery { return s.recovery }

// indexed is called by the writer after it wrote (err nil) or failed to
// write idx into the index. Rows that failed go back to the front of the
// queue, to be tried again with the next batch; until they are written,
// audit reads fail with the error.
func (s *Store) indexed(idx []api.AuditEntry, err error) {
	if len(idx) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.index = append(slices.Clone(idx), s.index...)
		s.indexErr = fmt.Errorf("store: the audit index is behind the log (it stops at entry %d; the log goes on): %w", s.indexedSeq, err)
		return
	}
	s.indexedSeq = idx[len(idx)-1].Seq
	s.indexErr = nil
}

// openLog opens the audit log and brings its index up to date: it
// migrates the database's rows into a new log, restores entries the log
// lost from the index, and indexes entries the index lacks.
func (s *Store) openLog(ctx context.Context, o options, keyPath string) error {
	existed, err := tlog.Exists(s.logDir)
	if err != nil {
		return err
	}
	var idxSeq int64
	var idxHash string
	err = s.wdb.QueryRowContext(ctx, `SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1`).Scan(&idxSeq, &idxHash)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("reading the audit index: %w", err)
	}
	var (
		hashAt   []byte
		tail     []api.AuditEntry
		parseErr error
	)
	log, rec, err := tlog.Open(s.logDir, tlog.Options{Sync: o.auditSync, SegmentSize: o.segmentSize, Visit: func(r *tlog.Record) {
		seq := int64(r.Index) + 1
		switch {
		case seq == idxSeq:
			hashAt = bytes.Clone(r.Hash[:])
		case seq > idxSeq && parseErr == nil:
			e, err := audit.ParseCanonical(r.Canonical, r.Prev[:], r.Hash[:])
			if err != nil {
				parseErr = fmt.Errorf("entry %d in the log cannot be read: %w", seq, err)
				return
			}
			tail = append(tail, e)
		}
	}})
	if err != nil {
		return err
	}
	a := s.a
	a.log = log
	s.recovery = Recovery{Entries: int64(rec.Entries)}
	if rec.Torn != nil {
		s.recovery.Torn = rec.Torn.String()
	}
	if rec.Corrupt != nil {
		s.recovery.Corrupt = rec.Corrupt.String()
		a.auditFailed(log.Err())
	}
	s.key, err = tlog.LoadOrCreateKey(keyPath)
	if err != nil {
		return err
	}
	if parseErr != nil {
		a.auditFailed(parseErr)
		tail = nil
	}
	switch size := int64(log.Size()); {
	case !existed && idxSeq > 0:
		n, err := s.migrate(ctx)
		if err != nil {
			return err
		}
		s.recovery.Migrated = n
	case size < idxSeq && rec.Corrupt == nil:
		n, err := s.restore(ctx, size)
		if err != nil {
			a.auditFailed(err)
		}
		s.recovery.Restored = n
	case idxSeq > 0 && hex.EncodeToString(hashAt) != idxHash && size >= idxSeq:
		// The index disagrees with the log: rebuild it.
		if _, err := s.wdb.ExecContext(ctx, `DELETE FROM audit`); err != nil {
			return fmt.Errorf("clearing the audit index: %w", err)
		}
		tail = tail[:0]
		if _, err := tlog.Scan(s.logDir, tlog.Position{}, log.Size(), true, func(_ tlog.Position, r *tlog.Record) error {
			e, err := audit.ParseCanonical(r.Canonical, r.Prev[:], r.Hash[:])
			if err != nil {
				return fmt.Errorf("entry %d in the log cannot be read: %w", r.Index+1, err)
			}
			tail = append(tail, e)
			return nil
		}); err != nil {
			a.auditFailed(err)
			tail = nil
		}
		s.recovery.Rebuilt = true
		fallthrough
	default:
		if err := s.indexAll(ctx, tail); err != nil {
			return err
		}
		s.recovery.Indexed = int64(len(tail))
	}
	s.recovery.Entries = int64(log.Size())
	a.head = chainHead{seq: int64(log.Size())}
	if log.Size() > 0 {
		h := log.Head()
		a.head.hash = h[:]
	}
	s.head = a.head
	s.indexedSeq = int64(log.Size())
	if log.Size() < uint64(idxSeq) {
		s.indexedSeq = idxSeq
	}
	return nil
}

// indexAll inserts entries into the index, a thousand per transaction.
func (s *Store) indexAll(ctx context.Context, entries []api.AuditEntry) error {
	for len(entries) > 0 {
		n := min(len(entries), 1024)
		if err := s.w.inTx(ctx, func(tx *sql.Tx) error { return s.w.indexRows(ctx, tx, entries[:n]) }); err != nil {
			return err
		}
		entries = entries[n:]
	}
	return nil
}

// readIndex calls fn with the index rows from seq from on, in order.
func (s *Store) readIndex(ctx context.Context, from int64, fn func(api.AuditEntry) error) error {
	rows, err := s.wdb.QueryContext(ctx, selectAuditSQL+` WHERE seq >= ? ORDER BY seq`, from)
	if err != nil {
		return fmt.Errorf("reading the audit index: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return rows.Err()
}

// record turns a verified entry into a log record.
func logRecord(e api.AuditEntry) (tlog.Record, error) {
	c, err := audit.Canonical(e)
	if err != nil {
		return tlog.Record{}, err
	}
	r := tlog.Record{Index: uint64(e.Seq - 1), Canonical: c}
	prev, err := hex.DecodeString(e.PrevHash)
	if err != nil || len(prev) != tlog.HashSize {
		return tlog.Record{}, fmt.Errorf("entry %d: malformed prev_hash", e.Seq)
	}
	h, err := hex.DecodeString(e.Hash)
	if err != nil || len(h) != tlog.HashSize {
		return tlog.Record{}, fmt.Errorf("entry %d: malformed hash", e.Seq)
	}
	copy(r.Prev[:], prev)
	copy(r.Hash[:], h)
	return r, nil
}

// migrate copies the database's audit rows into the new, empty log,
// after checking their chain: a broken chain is not carried over.
func (s *Store) migrate(ctx context.Context) (int64, error) {
	var v audit.Verifier
	var batch []tlog.Record
	var n int64
	flush := func() error {
		if err := s.a.log.Append(batch); err != nil {
			return err
		}
		n += int64(len(batch))
		batch = batch[:0]
		return nil
	}
	err := s.readIndex(ctx, 1, func(e api.AuditEntry) error {
		if err := v.Add(e); err != nil {
			return fmt.Errorf("the database's audit rows cannot be moved into the audit log: %w (pcpctl audit verify --db names the entry); move the database aside to start afresh", err)
		}
		r, err := logRecord(e)
		if err != nil {
			return err
		}
		if batch = append(batch, r); len(batch) == 1024 {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		return n, fmt.Errorf("migrating the audit log: %w", err)
	}
	return n, nil
}

// restore appends to the log, of size entries, the index rows after it,
// which the log lost; they must continue its chain.
func (s *Store) restore(ctx context.Context, size int64) (int64, error) {
	log := s.a.log
	head := log.Head()
	prev := head[:]
	if size == 0 {
		prev = nil
	}
	v := audit.Resume(audit.Checkpoint{})
	if size > 0 {
		v = audit.Resume(audit.Checkpoint{Seq: size + 1, Prev: prev, Entries: size + 1})
	}
	var batch []tlog.Record
	var n int64
	err := s.readIndex(ctx, size+1, func(e api.AuditEntry) error {
		if err := v.Add(e); err != nil {
			return fmt.Errorf("the index holds entries the log lost, but they do not continue it: %w", err)
		}
		r, err := logRecord(e)
		if err != nil {
			return err
		}
		batch = append(batch, r)
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = log.Append(batch)
	}
	if err != nil {
		return 0, err
	}
	n = int64(len(batch))
	return n, nil
}
