package store

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pcp-dev/pcp/api"

	"github.com/pcp-dev/pcp/internal/stored"
)

// job returns a queued job created i seconds after t0.
func job(i int) stored.Job {
	at := t0.Add(time.Duration(i) * time.Second)
	return stored.Job{
		ID:           fmt.Sprintf("job-%02d", i),
		CapabilityID: "org.example.mail.send",
		AppID:        "org.example.mail",
		Source:       string(api.SourceSystemIntelligence),
		Actor:        "user",
		Params:       json.RawMessage(fmt.Sprintf(`{"n":%d}`, i)),
		State:        jobQueued,
		RunAt:        at.Add(10 * time.Second),
		CreatedAt:    at,
		UpdatedAt:    at,
	}
}

func saveJobs(t *testing.T, s *Store, jobs ...stored.Job) {
	t.Helper()
	for _, j := range jobs {
		if err := s.SaveJob(context.Background(), j); err != nil {
			t.Fatalf("SaveJob(%s): %v", j.ID, err)
		}
	}
}

func wantJob(t *testing.T, s *Store, want stored.Job) {
	t.Helper()
	got, ok, err := s.Job(context.Background(), want.ID)
	if err != nil || !ok {
		t.Fatalf("Job(%s) = ok %v, err %v; want ok true, err nil", want.ID, ok, err)
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("Job(%s) (-want +got):\n%s", want.ID, d)
	}
}

func TestJobRoundTrip(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		full := stored.Job{
			ID:           "job-full",
			CapabilityID: "org.example.files.delete",
			AppID:        "org.example.files",
			Source:       "system-intelligence",
			Actor:        "alice",
			Params:       json.RawMessage(`{"path":"/tmp/x","recursive":true}`),
			State:        jobFailed,
			RunAt:        t0.Add(5 * time.Second),
			CreatedAt:    t0,
			UpdatedAt:    t0.Add(6 * time.Second),
			Result:       json.RawMessage(`{"content":[]}`),
			Error:        json.RawMessage(`{"code":-32001,"message":"gone","data":{"id":"x"}}`),
			Reason:       "app failed",
		}
		bare := stored.Job{ID: "job-bare", State: jobQueued, RunAt: t0, CreatedAt: t0, UpdatedAt: t0}
		saveJobs(t, s, full, bare)
		wantJob(t, s, full)
		wantJob(t, s, bare) // nil JSON fields stay nil

		// Upsert: every field but CreatedAt is replaced.
		done := full
		done.State = jobDone
		done.Params = nil
		done.Error = nil
		done.Result = json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`)
		done.Reason = ""
		done.RunAt = t0.Add(time.Minute)
		done.UpdatedAt = t0.Add(2 * time.Minute)
		moved := done
		moved.CreatedAt = t0.Add(time.Hour)
		saveJobs(t, s, moved)
		wantJob(t, s, done)

		if _, ok, err := s.Job(ctx, "job-missing"); ok || err != nil {
			t.Errorf("Job(job-missing) = ok %v, err %v; want ok false, err nil", ok, err)
		}

		// Zero times default to now.
		before := time.Now()
		saveJobs(t, s, stored.Job{ID: "job-now", State: jobQueued})
		got, _, err := s.Job(ctx, "job-now")
		if err != nil {
			t.Fatal(err)
		}
		if got.CreatedAt.Before(before) || got.UpdatedAt.Before(before) {
			t.Errorf("Job(job-now): CreatedAt %v, UpdatedAt %v; want both at or after %v", got.CreatedAt, got.UpdatedAt, before)
		}
	})
}

func TestSaveJobRejects(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ok := job(1)
		for _, tc := range []struct {
			name string
			edit func(*stored.Job)
		}{
			{"no id", func(j *stored.Job) { j.ID = "" }},
			{"no state", func(j *stored.Job) { j.State = "" }},
			{"unknown state", func(j *stored.Job) { j.State = "paused" }},
			{"bad params", func(j *stored.Job) { j.Params = json.RawMessage(`{`) }},
			{"bad result", func(j *stored.Job) { j.Result = json.RawMessage(`nope`) }},
			{"bad error", func(j *stored.Job) { j.Error = json.RawMessage(`{"code":`) }},
		} {
			j := ok
			tc.edit(&j)
			if err := s.SaveJob(context.Background(), j); err == nil {
				t.Errorf("%s: SaveJob succeeded, want an error", tc.name)
			}
		}
		jobs, err := s.Jobs(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) != 0 {
			t.Errorf("Jobs after rejected saves: got %d jobs, want 0", len(jobs))
		}
	})
}

func TestJobsOrder(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		// job-03 and job-04 share a creation time: the greater ID is newer.
		j4 := job(4)
		j4.CreatedAt = job(3).CreatedAt
		saveJobs(t, s, job(2), job(1), j4, job(3), job(5))
		for _, tc := range []struct {
			limit int
			want  []string
		}{
			{0, []string{"job-05", "job-04", "job-03", "job-02", "job-01"}},
			{-1, []string{"job-05", "job-04", "job-03", "job-02", "job-01"}},
			{2, []string{"job-05", "job-04"}},
			{10, []string{"job-05", "job-04", "job-03", "job-02", "job-01"}},
		} {
			jobs, err := s.Jobs(ctx, tc.limit)
			if err != nil {
				t.Fatalf("Jobs(%d): %v", tc.limit, err)
			}
			var got []string
			for _, j := range jobs {
				got = append(got, j.ID)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("Jobs(%d) IDs (-want +got):\n%s", tc.limit, d)
			}
		}
	})
}

func TestJobsDefaultLimit(t *testing.T) {
	s, err := OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for i := range DefaultJobsLimit + 5 {
		saveJobs(t, s, job(i))
	}
	jobs, err := s.Jobs(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != DefaultJobsLimit {
		t.Errorf("Jobs(0): got %d jobs, want %d", len(jobs), DefaultJobsLimit)
	}
}

func TestJobsSurviveRestart(t *testing.T) {
	s, path := openFile(t)
	saveJobs(t, s, job(1), job(2))
	s = reopen(t, s, path)
	got, err := s.Jobs(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]stored.Job{job(2), job(1)}, got); d != "" {
		t.Errorf("Jobs after reopen (-want +got):\n%s", d)
	}
}

func TestInterruptJobs(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		queued, running, done, undone, failed, cancelled := job(1), job(2), job(3), job(4), job(5), job(6)
		running.State = jobRunning
		running.Result = json.RawMessage(`{"partial":true}`)
		done.State = jobDone
		done.Result = json.RawMessage(`{"content":[]}`)
		undone.State = jobUndone
		undone.Reason = "undone by user"
		failed.State = jobFailed
		failed.Error = json.RawMessage(`{"code":-32000,"message":"boom"}`)
		cancelled.State = jobCancelled
		queued2 := job(7)
		// Saved out of creation order, so the result's order is not
		// insertion order.
		saveJobs(t, s, queued2, done, running, undone, queued, failed, cancelled)

		now := t0.Add(time.Hour)
		const reason = "daemon restarted"
		got, err := s.InterruptJobs(ctx, now, reason)
		if err != nil {
			t.Fatal(err)
		}
		settle := func(j stored.Job, state string) stored.Job {
			j.State, j.Reason, j.UpdatedAt = state, reason, now
			return j
		}
		want := []stored.Job{settle(queued, jobCancelled), settle(running, jobFailed), settle(queued2, jobCancelled)}
		if d := cmp.Diff(want, got); d != "" {
			t.Errorf("InterruptJobs (-want +got):\n%s", d)
		}
		for _, j := range append(want, done, undone, failed, cancelled) {
			wantJob(t, s, j)
		}

		again, err := s.InterruptJobs(ctx, now.Add(time.Hour), reason)
		if err != nil {
			t.Fatal(err)
		}
		if len(again) != 0 {
			t.Errorf("second InterruptJobs changed %d jobs, want 0", len(again))
		}
	})
}

func TestPruneJobs(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		cut := t0.Add(time.Hour)
		old := func(i int, state string) stored.Job {
			j := job(i)
			j.State = state
			return j // updated at t0+i s, before cut
		}
		recent := func(i int, state string) stored.Job {
			j := old(i, state)
			j.UpdatedAt = cut.Add(time.Second)
			return j
		}
		atCut := old(10, jobDone)
		atCut.UpdatedAt = cut
		keep := []stored.Job{
			old(1, jobQueued), old(2, jobRunning),
			recent(3, jobDone), recent(4, jobFailed), recent(5, jobUndone), recent(6, jobCancelled),
			atCut,
		}
		drop := []stored.Job{old(11, jobDone), old(12, jobFailed), old(13, jobUndone), old(14, jobCancelled)}
		saveJobs(t, s, keep...)
		saveJobs(t, s, drop...)

		n, err := s.PruneJobs(ctx, cut)
		if err != nil {
			t.Fatal(err)
		}
		if n != len(drop) {
			t.Errorf("PruneJobs = %d, want %d", n, len(drop))
		}
		for _, j := range keep {
			if _, ok, err := s.Job(ctx, j.ID); !ok || err != nil {
				t.Errorf("Job(%s) (%s) after prune: ok %v, err %v; want kept", j.ID, j.State, ok, err)
			}
		}
		for _, j := range drop {
			if _, ok, err := s.Job(ctx, j.ID); ok || err != nil {
				t.Errorf("Job(%s) (%s) after prune: ok %v, err %v; want deleted", j.ID, j.State, ok, err)
			}
		}
		if n, err := s.PruneJobs(ctx, cut); n != 0 || err != nil {
			t.Errorf("second PruneJobs = %d, %v; want 0, nil", n, err)
		}
	})
}

// TestMigrateJobs opens a file at the schema version before jobs existed
// and checks that Open adds the table and keeps what was there.
func TestMigrateJobs(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	app := stored.App{AppID: "org.example.mail", Manifest: json.RawMessage(`{}`), UpdatedAt: t0}
	if err := s.SaveApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	s.Close()

	db := rawDB(t, path)
	if _, err := db.Exec(`DROP TABLE jobs`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion-1)); err != nil {
		t.Fatal(err)
	}
	db.Close()

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatalf("Open at version %d: %v", schemaVersion-1, err)
	}
	defer s.Close()
	var v int
	if err := s.rdb.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != schemaVersion {
		t.Errorf("user_version after Open = %d, want %d", v, schemaVersion)
	}
	var idx int
	if err := s.rdb.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'jobs_state'`).Scan(&idx); err != nil {
		t.Fatal(err)
	}
	if idx != 1 {
		t.Errorf("index jobs_state: found %d, want 1", idx)
	}
	apps, err := s.LoadApps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]stored.App{app}, apps); d != "" {
		t.Errorf("LoadApps after migration (-want +got):\n%s", d)
	}
	saveJobs(t, s, job(1))
	wantJob(t, s, job(1))
}

// TestFreshSchemaHasJobs checks that a new file reaches this build's
// version with the jobs table in place.
func TestFreshSchemaHasJobs(t *testing.T) {
	s, _ := openFile(t)
	var v, n int
	if err := s.rdb.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != schemaVersion {
		t.Errorf("fresh file: user_version = %d, want %d", v, schemaVersion)
	}
	if err := s.rdb.QueryRow(`SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Errorf("fresh file: counting jobs: %v", err)
	}
}
