package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/pcp-dev/pcp/internal/stored"
)

// Job states, as api.JobQueued and its siblings spell them. A job is
// queued until its undo window closes, then running, then done or failed;
// the user may undo it while it is queued. A job still queued or running
// when the daemon stops is settled at the next start by InterruptJobs.
const (
	jobQueued    = "queued"
	jobRunning   = "running"
	jobDone      = "done"
	jobFailed    = "failed"
	jobUndone    = "undone"
	jobCancelled = "cancelled"
)

var jobStates = map[string]bool{
	jobQueued: true, jobRunning: true, jobDone: true,
	jobFailed: true, jobUndone: true, jobCancelled: true,
}

// DefaultJobsLimit is how many jobs Jobs returns when asked for none.
const DefaultJobsLimit = 100

var errNoJobID = errors.New("store: empty job id")

const jobColumns = `id, capability_id, app_id, source, actor, params, state,
	run_at, created_at, updated_at, result, error, reason`

// SaveJob inserts the job or, if a job with its ID exists, replaces every
// field but CreatedAt. It returns once that is committed.
func (s *Store) SaveJob(ctx context.Context, j stored.Job) error {
	if j.ID == "" {
		return errNoJobID
	}
	if !jobStates[j.State] {
		return fmt.Errorf("store: job %s: unknown state %q", j.ID, j.State)
	}
	for _, f := range []struct {
		name string
		v    json.RawMessage
	}{{"params", j.Params}, {"result", j.Result}, {"error", j.Error}} {
		if len(f.v) > 0 && !json.Valid(f.v) {
			return fmt.Errorf("store: job %s: %s is not valid JSON", j.ID, f.name)
		}
	}
	now := time.Now()
	if j.CreatedAt.IsZero() {
		j.CreatedAt = now
	}
	if j.UpdatedAt.IsZero() {
		j.UpdatedAt = now
	}
	err := s.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO jobs (`+jobColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET capability_id = excluded.capability_id,
				app_id = excluded.app_id, source = excluded.source, actor = excluded.actor,
				params = excluded.params, state = excluded.state, run_at = excluded.run_at,
				updated_at = excluded.updated_at, result = excluded.result,
				error = excluded.error, reason = excluded.reason`,
			j.ID, j.CapabilityID, j.AppID, j.Source, j.Actor, nullText(j.Params), j.State,
			formatTime(j.RunAt), formatTime(j.CreatedAt), formatTime(j.UpdatedAt),
			nullText(j.Result), nullText(j.Error), j.Reason)
		return err
	})
	if err != nil {
		return fmt.Errorf("store: saving job %s: %w", j.ID, err)
	}
	return nil
}

// Jobs returns up to limit jobs, newest first (by CreatedAt, then by ID
// descending). limit <= 0 selects DefaultJobsLimit.
func (s *Store) Jobs(ctx context.Context, limit int) ([]stored.Job, error) {
	return s.JobsBefore(ctx, "", limit)
}

// JobsBefore is Jobs of the jobs older than the job with id before (by
// CreatedAt, then by ID), or of all jobs for an empty before. A before
// that names no job lists none.
func (s *Store) JobsBefore(ctx context.Context, before string, limit int) ([]stored.Job, error) {
	if limit <= 0 {
		limit = DefaultJobsLimit
	}
	query, args := `SELECT `+jobColumns+` FROM jobs ORDER BY created_at DESC, id DESC LIMIT ?`, []any{limit}
	if before != "" {
		query = `SELECT ` + jobColumns + ` FROM jobs
		WHERE (created_at, id) < (SELECT created_at, id FROM jobs WHERE id = ?)
		ORDER BY created_at DESC, id DESC LIMIT ?`
		args = []any{before, limit}
	}
	rows, err := s.rdb.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("store: loading jobs: %w", err)
	}
	out, err := scanJobs(rows)
	if err != nil {
		return nil, fmt.Errorf("store: loading jobs: %w", err)
	}
	return out, nil
}

// Job returns the job with the given id; ok is false if there is none.
func (s *Store) Job(ctx context.Context, id string) (j stored.Job, ok bool, err error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE id = ?`, id)
	if err != nil {
		return stored.Job{}, false, fmt.Errorf("store: loading job %s: %w", id, err)
	}
	jobs, err := scanJobs(rows)
	if err != nil {
		return stored.Job{}, false, fmt.Errorf("store: loading job %s: %w", id, err)
	}
	if len(jobs) == 0 {
		return stored.Job{}, false, nil
	}
	return jobs[0], true, nil
}

// InterruptJobs settles the jobs a previous run left unfinished; the
// daemon calls it once at start, before it queues new jobs. Every queued
// job becomes cancelled and every running job failed (whether its action
// took effect is unknown), both with the given reason and UpdatedAt set
// to now; Result and Error are left as they were. A zero now means the
// current time. It returns the changed jobs as they are after the change,
// oldest first (by CreatedAt, then by ID), so that the caller can audit
// and announce each one.
func (s *Store) InterruptJobs(ctx context.Context, now time.Time, reason string) ([]stored.Job, error) {
	if now.IsZero() {
		now = time.Now()
	}
	var out []stored.Job
	err := s.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `UPDATE jobs
			SET state = CASE state WHEN ? THEN ? ELSE ? END, reason = ?, updated_at = ?
			WHERE state IN (?, ?)
			RETURNING `+jobColumns,
			jobQueued, jobCancelled, jobFailed, reason, formatTime(now), jobQueued, jobRunning)
		if err != nil {
			return err
		}
		out, err = scanJobs(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("store: interrupting jobs: %w", err)
	}
	// RETURNING yields rows in no defined order.
	sort.Slice(out, func(a, b int) bool {
		if !out[a].CreatedAt.Equal(out[b].CreatedAt) {
			return out[a].CreatedAt.Before(out[b].CreatedAt)
		}
		return out[a].ID < out[b].ID
	})
	return out, nil
}

// PruneJobs deletes the finished jobs (done, failed, undone or cancelled)
// last updated before the given time, and returns how many it deleted.
// Queued and running jobs are never deleted.
func (s *Store) PruneJobs(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.do(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM jobs
			WHERE state IN (?, ?, ?, ?) AND updated_at < ?`,
			jobDone, jobFailed, jobUndone, jobCancelled, formatTime(before))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("store: pruning jobs: %w", err)
	}
	return int(n), nil
}

// scanJobs reads every row of rows, selected as jobColumns, and closes
// rows.
func scanJobs(rows *sql.Rows) ([]stored.Job, error) {
	defer rows.Close()
	var out []stored.Job
	for rows.Next() {
		var j stored.Job
		var params, result, jerr sql.NullString
		var runAt, created, updated string
		if err := rows.Scan(&j.ID, &j.CapabilityID, &j.AppID, &j.Source, &j.Actor, &params,
			&j.State, &runAt, &created, &updated, &result, &jerr, &j.Reason); err != nil {
			return nil, err
		}
		var err error
		if j.RunAt, err = parseTime("jobs.run_at", runAt); err != nil {
			return nil, fmt.Errorf("job %s: %w", j.ID, err)
		}
		if j.CreatedAt, err = parseTime("jobs.created_at", created); err != nil {
			return nil, fmt.Errorf("job %s: %w", j.ID, err)
		}
		if j.UpdatedAt, err = parseTime("jobs.updated_at", updated); err != nil {
			return nil, fmt.Errorf("job %s: %w", j.ID, err)
		}
		j.Params = rawJSON(params)
		j.Result = rawJSON(result)
		j.Error = rawJSON(jerr)
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// rawJSON is the inverse of nullText: NULL reads as nil.
func rawJSON(s sql.NullString) json.RawMessage {
	if !s.Valid {
		return nil
	}
	return json.RawMessage(s.String)
}
