package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

const selectAuditSQL = `SELECT seq, time, kind, source, actor, app_id, capability_id,
	params_digest, outcome, duration_us, detail, prev_hash, hash FROM audit`

// AppendAudit seals r onto the audit chain and returns the entry once it
// is committed. A zero r.Time means now. Entries are numbered in commit
// order, so concurrent callers' times need not increase with seq. If ctx
// ends while waiting, AppendAudit returns ctx.Err() and the entry may
// still be committed.
//
// Once an append has failed to commit, every later one fails at once
// with an error wrapping audit.ErrUnavailable (see AuditErr).
func (s *Store) AppendAudit(ctx context.Context, r audit.Record) (api.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
		return api.AuditEntry{}, err
	}
	if err := s.w.failure(); err != nil {
		return api.AuditEntry{}, err
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	// Validation and canonicalisation happen here, in the caller's
	// goroutine: a bad record fails its caller alone instead of a batch,
	// and the writer is left with hashing and the INSERT.
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
// any), in ascending seq order.
func (s *Store) AuditBefore(ctx context.Context, before int64, n int) ([]api.AuditEntry, error) {
	if n <= 0 {
		return nil, nil
	}
	if before <= 0 {
		before = math.MaxInt64
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

// AuditErr returns the failure that stopped the audit log, which wraps
// audit.ErrUnavailable, or nil while entries can be appended.
func (s *Store) AuditErr() error { return s.w.failure() }

// verification is the state of audit verification. At most one walk of
// the log runs at a time; callers that arrive while one runs wait for it
// and share its result, so concurrent callers cost one walk.
type verification struct {
	// mu guards the fields below; it is never held across I/O.
	mu sync.Mutex
	// checkpoint is the newest entry the last walk found intact and in
	// agreement with the head this Store committed.
	checkpoint audit.Checkpoint
	// flight is the walk in progress; nil when none is.
	flight *verifyFlight
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

// VerifyAudit reads the whole log from the file as it is now (edits by
// other processes included) and checks its chain. Besides what the chain
// itself shows, it checks the log against the newest entry this Store
// committed, so removing or rewriting the newest entries is caught too.
// A caller arriving while a whole walk runs shares its result.
func (s *Store) VerifyAudit(ctx context.Context) (api.AuditVerifyResult, error) {
	return s.verifyShared(ctx, true)
}

// VerifyAuditIncremental checks the log from the newest entry an earlier
// walk of this Store verified: that entry must still be there with the
// hash it had, the entries after it must follow the chain, and the log
// must reach the head this Store committed. It costs the entries
// appended since the last walk; an edit to an entry before that point is
// left to VerifyAudit and VerifyFile. The result is VerifyAudit's, counting
// every entry up to the head. A caller arriving while any walk runs
// shares its result.
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
				from = audit.Checkpoint{}
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

// walk runs f from the checkpoint from and publishes its result. The walk
// is shared, so no caller's context ends it.
func (s *Store) walk(f *verifyFlight, from audit.Checkpoint) {
	// The head is read before the query starts: everything it names is
	// committed, so the query's snapshot must contain it.
	s.mu.Lock()
	head := s.head
	s.mu.Unlock()
	var cp audit.Checkpoint
	f.res, cp, f.err = verify(context.Background(), s.rdb, head, from)
	s.ver.mu.Lock()
	if f.err == nil && f.res.OK && cp.Seq >= s.ver.checkpoint.Seq {
		s.ver.checkpoint = cp
	}
	s.ver.flight = nil
	s.ver.mu.Unlock()
	close(f.done)
}

// VerifyFile checks the audit chain of the state database at path,
// opening it read-only; the daemon may be running. It cannot tell whether
// the newest entries were removed: a shorter chain is still a chain.
func VerifyFile(ctx context.Context, path string) (api.AuditVerifyResult, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return api.AuditVerifyResult{}, fmt.Errorf("store: %s: %w", path, err)
	}
	// mode=ro would fail on a missing file too, less clearly.
	if _, err := os.Stat(abs); err != nil {
		return api.AuditVerifyResult{}, fmt.Errorf("store: %w", err)
	}
	db, err := sql.Open("sqlite", fileDSN(abs, url.Values{
		"mode":    {"ro"},
		"_pragma": {fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS)},
	}))
	if err != nil {
		return api.AuditVerifyResult{}, fmt.Errorf("store: %s: %w", abs, err)
	}
	defer db.Close()
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return api.AuditVerifyResult{}, fmt.Errorf("store: %s: %w", abs, err)
	}
	if v < 1 || v > schemaVersion {
		return api.AuditVerifyResult{}, fmt.Errorf("store: %s: not a PCP state database this build reads (schema version %d)", abs, v)
	}
	res, _, err := verify(ctx, db, chainHead{}, audit.Checkpoint{})
	if err != nil {
		return res, fmt.Errorf("%w (in %s)", err, abs)
	}
	return res, nil
}

// verify streams the log through an audit.Verifier in one read
// transaction, from the checkpoint from (the zero one: from seq 1),
// whose entry must still be stored with its hash. A non-zero head is an
// entry known to be committed: the log must reach it, with that hash. It
// returns the last entry that verified as a checkpoint.
func verify(ctx context.Context, db *sql.DB, head chainHead, from audit.Checkpoint) (api.AuditVerifyResult, audit.Checkpoint, error) {
	rows, err := db.QueryContext(ctx, selectAuditSQL+` WHERE seq >= ? ORDER BY seq`, from.Seq)
	if err != nil {
		return api.AuditVerifyResult{}, audit.Checkpoint{}, fmt.Errorf("store: reading audit log: %w", err)
	}
	defer rows.Close()
	v := audit.Resume(from)
	first := from.Seq > 0
	for rows.Next() {
		e, err := scanAudit(rows)
		if err != nil {
			return api.AuditVerifyResult{}, audit.Checkpoint{}, err
		}
		if first {
			// The entry resumed from must verify again, with the hash
			// it had.
			first = false
			if e.Seq != from.Seq || v.Add(e) != nil || e.Hash != hex.EncodeToString(from.Hash) {
				return rewritten(from), audit.Checkpoint{}, nil
			}
			continue
		}
		if v.Add(e) != nil {
			break
		}
		if e.Seq == head.seq && e.Hash != hex.EncodeToString(head.hash) {
			res := v.Result()
			res.OK = false
			res.Entries--
			res.BrokenSeq = e.Seq
			res.Problem = fmt.Sprintf("hash is %s but this process committed %x at seq %d: the log was rewritten",
				e.Hash, head.hash, e.Seq)
			return res, audit.Checkpoint{}, nil
		}
	}
	if err := rows.Err(); err != nil {
		return api.AuditVerifyResult{}, audit.Checkpoint{}, fmt.Errorf("store: reading audit log: %w", err)
	}
	if first {
		return rewritten(from), audit.Checkpoint{}, nil
	}
	res := v.Result()
	if last, _ := v.Head(); res.OK && last < head.seq {
		res.OK = false
		res.BrokenSeq = last + 1
		if last+1 == head.seq {
			res.Problem = fmt.Sprintf("the log ends at seq %d but seq %d was committed: entry %d was removed", last, head.seq, head.seq)
		} else {
			res.Problem = fmt.Sprintf("the log ends at seq %d but seq %d was committed: entries %d to %d were removed", last, head.seq, last+1, head.seq)
		}
	}
	return res, v.Checkpoint(), nil
}

// rewritten is the result of a walk that found the entry it resumed from
// gone or changed.
func rewritten(from audit.Checkpoint) api.AuditVerifyResult {
	return api.AuditVerifyResult{
		OK: false, Entries: from.Entries - 1, BrokenSeq: from.Seq,
		Problem: fmt.Sprintf("entry %d, verified earlier, is gone or was changed: the log was rewritten", from.Seq),
	}
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
