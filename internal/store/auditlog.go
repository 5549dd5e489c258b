package store

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/tlog"
)

const selectAuditSQL = `SELECT seq, time, kind, source, actor, app_id, capability_id,
	params_digest, outcome, duration_us, detail, prev_hash, hash FROM audit`

// AppendAudit seals r onto the audit chain and returns the entry once it
// is written to the audit log. A zero r.Time means now. Entries are
// numbered in write order, so concurrent callers' times need not
// increase with seq. If ctx ends while waiting, AppendAudit returns
// ctx.Err() and the entry may still be written.
//
// Once an append has failed, every later one fails at once with an error
// wrapping audit.ErrUnavailable (see AuditErr).
func (s *Store) AppendAudit(ctx context.Context, r audit.Record) (api.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return api.AuditEntry{}, err
	}
	if err := s.a.failure(); err != nil {
		return api.AuditEntry{}, err
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	// Validation and canonicalisation happen here, in the caller's
	// goroutine: a bad record fails its caller alone instead of a group,
	// and the appender is left with hashing and the write.
	p, err := audit.Prepare(r)
	if err != nil {
		return api.AuditEntry{}, fmt.Errorf("store: %w", err)
	}
	req := newRequest()
	req.rec = p
	if err := s.enqueue(req); err != nil {
		return api.AuditEntry{}, err
	}
	select {
	case <-req.done:
		return req.entry, req.err
	case <-ctx.Done():
		return api.AuditEntry{}, ctx.Err()
	}
}

// AuditTail returns the newest n entries in ascending seq order.
func (s *Store) AuditTail(ctx context.Context, n int) ([]api.AuditEntry, error) {
	return s.AuditBefore(ctx, 0, n)
}

// AuditBefore returns the newest n entries whose seq is below before (0:
// any), in ascending seq order. It reads the index, after the index rows
// of every entry written before the call are committed.
func (s *Store) AuditBefore(ctx context.Context, before int64, n int) ([]api.AuditEntry, error) {
	if n <= 0 {
		return nil, nil
	}
	if before <= 0 {
		before = math.MaxInt64
	}
	if err := s.syncIndex(ctx); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx,
		`SELECT * FROM (`+selectAuditSQL+` WHERE seq < ? ORDER BY seq DESC LIMIT ?) ORDER BY seq`, before, n)
	if err != nil {
		return nil, fmt.Errorf("store: reading audit tail: %w", err)
	}
	defer rows.Close()
	var out []api.AuditEntry
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: reading audit tail: %w", err)
	}
	return out, nil
}

// syncIndex waits until the index holds every entry written so far.
func (s *Store) syncIndex(ctx context.Context) error {
	s.mu.Lock()
	behind := s.indexedSeq < s.head.seq
	s.mu.Unlock()
	if !behind {
		return nil
	}
	if err := s.Flush(ctx); err != nil {
		return fmt.Errorf("store: bringing the audit index up to date: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.indexedSeq < s.head.seq && s.indexErr != nil {
		return s.indexErr
	}
	return nil
}

// AuditErr returns the failure that stopped the audit log, which wraps
// audit.ErrUnavailable, or nil while entries can be appended.
func (s *Store) AuditErr() error { return s.a.failure() }

// verification is the state of audit verification. At most one walk of
// the log runs at a time; callers that arrive while one runs wait for it
// and share its result, so concurrent callers cost one walk.
type verification struct {
	// mu guards the fields below; it is never held across I/O.
	mu sync.Mutex
	// checkpoint is the newest entry the last walk found intact and in
	// agreement with the head this Store wrote, and where its record is.
	checkpoint verifyPoint
	// flight is the walk in progress; nil when none is.
	flight *verifyFlight
}

// verifyPoint is a verified entry and the position of its record in the
// log, where an incremental walk resumes.
type verifyPoint struct {
	pos tlog.Position
	cp  audit.Checkpoint
}

// verifyFlight is one walk. res and err are set before done is closed
// and read only after.
type verifyFlight struct {
	full bool
	done chan struct{}
	// waiting counts the callers sharing the walk; guarded by
	// verification.mu.
	waiting int
	res     api.AuditVerifyResult
	err     error
}

// VerifyAudit reads the whole audit log from its files as they are now
// (edits by other processes included) and checks every record's checksum
// and the chain. Besides what the chain itself shows, it checks the log
// against the newest entry this Store wrote, so removing or rewriting the
// newest entries is caught too. A caller arriving while a whole walk runs
// shares its result.
func (s *Store) VerifyAudit(ctx context.Context) (api.AuditVerifyResult, error) {
	return s.verifyShared(ctx, true)
}

// VerifyAuditIncremental checks the log from the newest entry an earlier
// walk of this Store verified: that entry must still be there with the
// hash it had, the entries after it must follow the chain, and the log
// must reach the head this Store wrote. It costs the entries appended
// since the last walk; an edit to an entry before that point is left to
// VerifyAudit and VerifyFile. The result is VerifyAudit's, counting every
// entry up to the head. A caller arriving while any walk runs shares its
// result.
func (s *Store) VerifyAuditIncremental(ctx context.Context) (api.AuditVerifyResult, error) {
	return s.verifyShared(ctx, false)
}

func (s *Store) verifyShared(ctx context.Context, full bool) (api.AuditVerifyResult, error) {
	v := &s.ver
	for {
		v.mu.Lock()
		f := v.flight
		if f == nil {
			f = &verifyFlight{full: full, done: make(chan struct{})}
			v.flight = f
			from := v.checkpoint
			if full {
				from = verifyPoint{}
			}
			v.mu.Unlock()
			s.walk(f, from)
			return f.res, f.err
		}
		f.waiting++
		v.mu.Unlock()
		select {
		case <-f.done:
		case <-ctx.Done():
			return api.AuditVerifyResult{}, ctx.Err()
		}
		if f.full || !full {
			return f.res, f.err
		}
		// An incremental walk ended; a whole one was asked for.
	}
}

// walk runs f from the point from and publishes its result. The walk is
// shared, so no caller's context ends it.
func (s *Store) walk(f *verifyFlight, from verifyPoint) {
	// The head is read before the files are: everything it names is
	// written, so the files hold it.
	s.mu.Lock()
	head := s.head
	s.mu.Unlock()
	var vp verifyPoint
	f.res, vp, f.err = verifyLog(s.logDir, head, from, nil)
	s.ver.mu.Lock()
	if f.err == nil && f.res.OK && vp.cp.Seq >= s.ver.checkpoint.cp.Seq {
		s.ver.checkpoint = vp
	}
	s.ver.flight = nil
	s.ver.mu.Unlock()
	close(f.done)
}

// errStop ends a scan early.
var errStop = errors.New("stop")

// verifyLog reads the log in dir from the verified point from (the zero
// one: from seq 1), whose entry must still be there with its hash, and
// checks each record's entry against the chain. A non-zero head is an
// entry known to be written: the log must reach it, with that hash, and
// only the log up to it is read. When tree is not nil every leaf read
// is appended to it. It returns the last entry that verified and where
// its record is.
func verifyLog(dir string, head chainHead, from verifyPoint, tree *tlog.Tree) (api.AuditVerifyResult, verifyPoint, error) {
	v := audit.Resume(from.cp)
	first := from.cp.Seq > 0
	upTo := uint64(math.MaxUint64)
	if head.seq > 0 {
		upTo = uint64(head.seq)
	}
	var (
		last      verifyPoint
		rewritten bool
		broken    *api.AuditVerifyResult
	)
	res, err := tlog.Scan(dir, from.pos, upTo, false, func(at tlog.Position, r *tlog.Record) error {
		seq := int64(r.Index) + 1
		e, perr := audit.ParseCanonical(r.Canonical, r.Prev[:], r.Hash[:])
		if first {
			// The entry resumed from must verify again, with the hash it
			// had.
			first = false
			if perr != nil || e.Seq != from.cp.Seq || v.AddCanonical(e, r.Canonical) != nil || !bytes.Equal(r.Hash[:], from.cp.Hash) {
				rewritten = true
				return errStop
			}
			last = verifyPoint{pos: at, cp: v.Checkpoint()}
			if tree != nil {
				tree.Append(tlog.LeafHash(r.Canonical))
			}
			return nil
		}
		if perr == nil && e.Seq != seq {
			perr = fmt.Errorf("the record of leaf index %d holds seq %d", r.Index, e.Seq)
		}
		if perr != nil {
			b := v.Result()
			b.OK, b.BrokenSeq, b.Problem = false, seq, fmt.Sprintf("the record cannot be read as an entry (an edited record?): %v", perr)
			broken = &b
			return errStop
		}
		if v.AddCanonical(e, r.Canonical) != nil {
			return errStop
		}
		if seq == head.seq && !bytes.Equal(r.Hash[:], head.hash) {
			b := v.Result()
			b.OK, b.Entries, b.BrokenSeq = false, b.Entries-1, seq
			b.Problem = fmt.Sprintf("hash is %x but this process wrote %x at seq %d: the log was rewritten", r.Hash, head.hash, seq)
			broken = &b
			return errStop
		}
		last = verifyPoint{pos: at, cp: v.Checkpoint()}
		if tree != nil {
			tree.Append(tlog.LeafHash(r.Canonical))
		}
		return nil
	})
	if err != nil && !errors.Is(err, errStop) {
		return api.AuditVerifyResult{}, verifyPoint{}, fmt.Errorf("store: reading the audit log: %w", err)
	}
	switch {
	case rewritten || (first && from.cp.Seq > 0):
		return rewrittenResult(from.cp), verifyPoint{}, nil
	case broken != nil:
		return *broken, verifyPoint{}, nil
	}
	out := v.Result()
	if !out.OK {
		return out, verifyPoint{}, nil
	}
	if d := res.Corrupt; d != nil {
		out.OK, out.BrokenSeq = false, int64(d.Index)+1
		out.Problem = fmt.Sprintf("segment %s, offset %d: %s", d.Segment, d.Offset, d.Problem)
		return out, verifyPoint{}, nil
	}
	if lastSeq, _ := v.Head(); lastSeq < head.seq {
		out.OK = false
		out.BrokenSeq = lastSeq + 1
		if lastSeq+1 == head.seq {
			out.Problem = fmt.Sprintf("the log ends at seq %d but seq %d was written: entry %d was removed", lastSeq, head.seq, head.seq)
		} else {
			out.Problem = fmt.Sprintf("the log ends at seq %d but seq %d was written: entries %d to %d were removed", lastSeq, head.seq, lastSeq+1, head.seq)
		}
		return out, verifyPoint{}, nil
	}
	return out, last, nil
}

// rewrittenResult is the result of a walk that found the entry it
// resumed from gone or changed.
func rewrittenResult(from audit.Checkpoint) api.AuditVerifyResult {
	return api.AuditVerifyResult{
		OK: false, Entries: from.Entries - 1, BrokenSeq: from.Seq,
		Problem: fmt.Sprintf("entry %d, verified earlier, is gone or was changed: the log was rewritten", from.Seq),
	}
}

// VerifyFile checks the audit log of the state database at path (the
// log in AuditDir(path)), reading it without changing anything; the
// daemon may be running. A database whose rows have not been moved into
// a log yet (the daemon has not run since the log was introduced) has
// its rows checked instead. It cannot tell whether the newest entries
// were removed: a shorter chain is still a chain (VerifyCheckpointFile
// can, given a checkpoint).
func VerifyFile(ctx context.Context, path string) (api.AuditVerifyResult, error) {
	abs, db, err := openReadOnly(ctx, path)
	if err != nil {
		return api.AuditVerifyResult{}, err
	}
	defer db.Close()
	dir := AuditDir(abs)
	if ok, err := tlog.Exists(dir); err != nil {
		return api.AuditVerifyResult{}, err
	} else if ok {
		res, _, err := verifyLog(dir, chainHead{}, verifyPoint{}, nil)
		if err != nil {
			return res, fmt.Errorf("%w (in %s)", err, dir)
		}
		return res, nil
	}
	res, err := verifyRows(ctx, db)
	if err != nil {
		return res, fmt.Errorf("%w (in %s)", err, abs)
	}
	return res, nil
}

// openReadOnly opens the state database at path read-only, checking it
// is one.
func openReadOnly(ctx context.Context, path string) (string, *sql.DB, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", nil, fmt.Errorf("store: %s: %w", path, err)
	}
	// mode=ro would fail on a missing file too, less clearly.
	if _, err := os.Stat(abs); err != nil {
		return "", nil, fmt.Errorf("store: %w", err)
	}
	db, err := sql.Open("sqlite", fileDSN(abs, url.Values{
		"mode":    {"ro"},
		"_pragma": {fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS)},
	}))
	if err != nil {
		return "", nil, fmt.Errorf("store: %s: %w", abs, err)
	}
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		db.Close()
		return "", nil, fmt.Errorf("store: %s: %w", abs, err)
	}
	if v < 1 || v > schemaVersion {
		db.Close()
		return "", nil, fmt.Errorf("store: %s: not a PCP state database this build reads (schema version %d)", abs, v)
	}
	return abs, db, nil
}

// verifyRows checks the chain of the audit rows of a database.
func verifyRows(ctx context.Context, db *sql.DB) (api.AuditVerifyResult, error) {
	rows, err := db.QueryContext(ctx, selectAuditSQL+` ORDER BY seq`)
	if err != nil {
		return api.AuditVerifyResult{}, fmt.Errorf("store: reading audit rows: %w", err)
	}
	defer rows.Close()
	var v audit.Verifier
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return api.AuditVerifyResult{}, err
		}
		if v.Add(e) != nil {
			break
		}
	}
	if err := rows.Err(); err != nil {
		return api.AuditVerifyResult{}, fmt.Errorf("store: reading audit rows: %w", err)
	}
	return v.Result(), nil
}

// scanAudit reads one row of selectAuditSQL.
func scanAudit(rows *sql.Rows) (api.AuditEntry, error) {
	var e api.AuditEntry
	var detail sql.NullString
	err := rows.Scan(&e.Seq, &e.Time, &e.Kind, &e.Source, &e.Actor, &e.AppID, &e.CapabilityID,
		&e.ParamsDigest, &e.Outcome, &e.DurationUS, &detail, &e.PrevHash, &e.Hash)
	if err != nil {
		return api.AuditEntry{}, fmt.Errorf("store: reading audit entry: %w", err)
	}
	if detail.Valid {
		e.Detail = []byte(detail.String)
	}
	return e, nil
}
