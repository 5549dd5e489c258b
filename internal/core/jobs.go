package core

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/stored"
)

// A job is an approved invocation with an undo window: it is queued,
// persisted, and runs when the window closes unless the user undoes it
// first. A daemon that stops with jobs queued does not run them later:
// at the next start they are cancelled, audited and listed, so nothing
// is lost silently and nothing runs behind the user's back.
//
// jobs and their fields are guarded by Broker.jobMu; the store copy is
// written before each state is announced.
type job struct {
	rec  stored.Job
	stop func() bool // cancels the timer of a queued job
}

// interruptedReason is the reason given to jobs a restart cancelled.
const interruptedReason = "pcpd stopped before the job ran; it was not run after the restart"

// recoverJobs cancels the jobs a previous run left queued or running.
func (b *Broker) recoverJobs(ctx context.Context) error {
	changed, err := b.store.InterruptJobs(ctx, b.now(), interruptedReason)
	if err != nil {
		return err
	}
	for _, j := range changed {
		b.jobChanged(ctx, j, "pcpd")
	}
	return nil
}

// deferJob queues an approved invocation until its undo window closes.
func (b *Broker) deferJob(ctx context.Context, p *api.InvokeCapabilityParams, c *api.Capability) (*api.CapabilityResult, error) {
	now := b.now()
	window := time.Duration(c.UndoWindowMS) * time.Millisecond
	j := &job{rec: stored.Job{
		ID: b.newID("job"), CapabilityID: c.ID, AppID: c.AppID, Source: string(p.Source),
		Actor: SessionFrom(ctx).Actor(), Params: p.Params, State: api.JobQueued,
		RunAt: now.Add(window), CreatedAt: now, UpdatedAt: now,
	}}
	if err := b.store.SaveJob(ctx, j.rec); err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "saving job: " + err.Error()}
	}
	b.jobMu.Lock()
	b.jobs[j.rec.ID] = j
	j.stop = b.afterFunc(window, func() { b.runJob(j.rec.ID) })
	b.jobMu.Unlock()
	b.publish(api.EventJobQueued, c.AppID, "", jobView(j.rec))
	data, _ := json.Marshal(map[string]any{"job_id": j.rec.ID, "run_at": j.rec.RunAt.UTC().Format(timeFormat), "undo_window_ms": c.UndoWindowMS})
	return &api.CapabilityResult{Status: api.StatusDeferred, Data: data}, nil
}

// runJob executes a queued job whose undo window has closed.
func (b *Broker) runJob(id string) {
	ctx := context.Background()
	b.jobMu.Lock()
	j := b.jobs[id]
	if j == nil || j.rec.State != api.JobQueued {
		b.jobMu.Unlock()
		return
	}
	j.rec.State, j.rec.UpdatedAt = api.JobRunning, b.now()
	rec := j.rec
	b.jobMu.Unlock()
	b.saveJob(ctx, rec)
	b.jobChanged(ctx, rec, "")

	b.mu.RLock()
	ce := b.caps[rec.CapabilityID]
	var (
		c        api.Capability
		provider Provider
	)
	if ce != nil {
		c, provider = ce.Capability, ce.app.provider
	}
	_, revoked := b.revoked[rec.AppID]
	b.mu.RUnlock()
	if ce != nil {
		c = b.effective(c, api.InvocationSource(rec.Source), "") // approved already: only the timeout matters
	}
	var (
		res *api.CapabilityResult
		err error
	)
	switch {
	case b.auditAvailable() != nil:
		// Fail closed: the job's outcome could not be audited.
		err = b.auditAvailable()
	case revoked:
		err = api.Errorf(api.CodePermissionDenied, map[string]any{"app_id": rec.AppID, "revoked": true}, "app %s was revoked before the job ran", rec.AppID)
	case ce == nil:
		err = api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": rec.CapabilityID}, "capability %s went away before the job ran", rec.CapabilityID)
	default:
		res, err = b.execute(ctx, &c, provider, api.InvocationSource(rec.Source), rec.Params)
	}

	b.jobMu.Lock()
	j.rec.UpdatedAt = b.now()
	if err != nil {
		j.rec.State = api.JobFailed
		j.rec.Error = jsonOf(api.AsError(err))
		j.rec.Reason = api.AsError(err).Message
	} else {
		j.rec.State = api.JobDone
		j.rec.Result = jsonOf(res)
	}
	rec = j.rec
	delete(b.jobs, id)
	b.jobMu.Unlock()
	b.saveJob(ctx, rec)
	b.jobChanged(ctx, rec, "")
}

func jsonOf(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func (b *Broker) saveJob(ctx context.Context, j stored.Job) {
	if err := b.store.SaveJob(context.WithoutCancel(ctx), j); err != nil {
		b.log.Error("saving job", "job_id", j.ID, "state", j.State, "err", err)
	}
}

// jobChanged audits and publishes a job's new state.
func (b *Broker) jobChanged(ctx context.Context, j stored.Job, actor string) {
	if actor == "" {
		actor = j.Actor
	}
	detail := detailOf(&api.AuditJobDetail{JobID: j.ID, Reason: j.Reason})
	b.audit(ctx, audit.Record{Kind: api.AuditJob, Actor: actor, Source: j.Source, AppID: j.AppID, CapabilityID: j.CapabilityID,
		ParamsDigest: audit.ParamsDigest(j.Params), Outcome: j.State, Detail: detail})
	ev := map[string]string{
		api.JobQueued: api.EventJobQueued, api.JobRunning: api.EventJobRunning, api.JobDone: api.EventJobDone,
		api.JobFailed: api.EventJobFailed, api.JobUndone: api.EventJobUndone, api.JobCancelled: api.EventJobCancelled,
	}[j.State]
	b.publish(ev, j.AppID, "", jobView(j))
}

func jobView(j stored.Job) api.Job {
	return api.Job{
		JobID: j.ID, CapabilityID: j.CapabilityID, AppID: j.AppID, State: j.State,
		RunAt: j.RunAt.UTC().Format(timeFormat), CreatedAt: j.CreatedAt.UTC().Format(timeFormat), UpdatedAt: j.UpdatedAt.UTC().Format(timeFormat),
		Requester: j.Actor, Result: j.Result, Error: j.Error, Reason: j.Reason,
	}
}

// Jobs lists jobs, newest first, a page at a time (see
// api.JobsListParams).
func (b *Broker) Jobs(ctx context.Context, p *api.JobsListParams) (*api.JobsListResult, error) {
	limit, clamped, err := pageLimit(p.Limit, 50)
	if err != nil {
		return nil, err
	}
	if err := b.limits.connection(SessionFrom(ctx), b.now()); err != nil {
		return nil, err
	}
	if p.Before != "" {
		if _, ok, err := b.store.Job(ctx, p.Before); err != nil {
			return nil, &api.Error{Code: api.CodeInternalError, Message: "reading jobs: " + err.Error()}
		} else if !ok {
			return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "before", "job_id": p.Before}, "before: no job %s", p.Before)
		}
	}
	recs, err := b.store.JobsBefore(ctx, p.Before, limit+1)
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "reading jobs: " + err.Error()}
	}
	out := make([]api.Job, 0, len(recs))
	for _, r := range recs {
		out = append(out, jobView(r))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt > out[j].CreatedAt })
	// olderPage takes the oldest first; a job carries its parameters and
	// result, so a page may be cut to fit a frame.
	slices.Reverse(out)
	out, next := olderPage(out, limit, clamped)
	slices.Reverse(out)
	res := &api.JobsListResult{Jobs: out}
	if next {
		res.Next = out[len(out)-1].JobID
	}
	return res, nil
}

// UndoJob cancels a queued job before it runs. Only the user may.
func (b *Broker) UndoJob(ctx context.Context, p *api.JobsUndoParams) (*api.JobsUndoResult, error) {
	if roleOf(ctx) != RoleUser {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"required_role": "user"}, "only the user undoes a job; use the control socket")
	}
	if p.JobID == "" {
		return nil, api.MissingParam("job_id")
	}
	if err := b.auditAvailable(); err != nil {
		return nil, err
	}
	b.jobMu.Lock()
	j := b.jobs[p.JobID]
	if j == nil || j.rec.State != api.JobQueued {
		b.jobMu.Unlock()
		rec, ok, err := b.store.Job(ctx, p.JobID)
		switch {
		case err != nil:
			return nil, &api.Error{Code: api.CodeInternalError, Message: "reading job: " + err.Error()}
		case !ok:
			return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "job_id", "job_id": p.JobID}, "job_id: no job %s", p.JobID)
		}
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "job_id", "job_id": p.JobID, "state": rec.State},
			"job_id: job %s is %s; only a queued job can be undone", p.JobID, rec.State)
	}
	j.stop()
	j.rec.State, j.rec.UpdatedAt, j.rec.Reason = api.JobUndone, b.now(), "undone by the user"
	rec := j.rec
	delete(b.jobs, p.JobID)
	b.jobMu.Unlock()
	if err := b.store.SaveJob(ctx, rec); err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "saving job: " + err.Error()}
	}
	b.jobChanged(ctx, rec, SessionFrom(ctx).Actor())
	return &api.JobsUndoResult{Job: jobView(rec)}, nil
}
