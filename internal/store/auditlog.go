package store

import (
	"context"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
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
func (s *Store) AppendAudit(ctx context.Context, r audit.Record) (api.AuditEntry, error) {
	if err := ctx.Err(); err != nil {
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
	if n <= 0 {
		return nil, nil
	}
	rows, err := s.rdb.QueryContext(ctx,
		`SELECT * FROM (`+selectAuditSQL+` ORDER BY seq DESC LIMIT ?) ORDER BY seq`, n)
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

// VerifyAudit reads the whole log from the file as it is now (edits by
// other processes included) and checks its chain. Besides what the chain
// itself shows, it checks the log against the newest entry this Store
// committed, so removing or rewriting the newest entries is caught too.
func (s *Store) VerifyAudit(ctx context.Context) (api.AuditVerifyResult, error) {
	// The head is read before the query starts: everything it names is
	// committed, so the query's snapshot must contain it.
	s.mu.Lock()
	head := s.head
	s.mu.Unlock()
	return verify(ctx, s.rdb, head)
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
	res, err := verify(ctx, db, chainHead{})
	if err != nil {
		return res, fmt.Errorf("%w (in %s)", err, abs)
	}
	return res, nil
}

// verify streams the log through an audit.Verifier in one read
// transaction. A non-zero head is an entry known to be committed: the log
// must reach it, with that hash.
func verify(ctx context.Context, db *sql.DB, head chainHead) (api.AuditVerifyResult, error) {
	rows, err := db.QueryContext(ctx, selectAuditSQL+` ORDER BY seq`)
	if err != nil {
		return api.AuditVerifyResult{}, fmt.Errorf("store: reading audit log: %w", err)
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
		if e.Seq == head.seq && e.Hash != hex.EncodeToString(head.hash) {
			res := v.Result()
			res.OK = false
			res.Entries--
			res.BrokenSeq = e.Seq
			res.Problem = fmt.Sprintf("hash is %s but this process committed %x at seq %d: the log was rewritten",
				e.Hash, head.hash, e.Seq)
			return res, nil
		}
	}
	if err := rows.Err(); err != nil {
		return api.AuditVerifyResult{}, fmt.Errorf("store: reading audit log: %w", err)
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
	return res, nil
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
