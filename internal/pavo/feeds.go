package pavo

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/pcp-dev/pcp/api"
)

// Routes the feeds' items point at.
const (
	routeJobs          = "/pcp/jobs"
	routeAudit         = "/pcp/audit"
	routeConfirmations = "/pcp/confirmations"
	routeApps          = "/pcp/apps"
)

// maxFailures bounds the failures the notifications feed reports.
const maxFailures = 20

// jobsOp is the jobs feed: deferred jobs (jobs.list, newest first), then
// recent executions (the audit log's invocations and actions, newest
// first). Any failing call to pcpd fails the op: a partial feed would
// read as "nothing else is going on".
func (d *Driver) jobsOp(ctx context.Context, _ *Request) (any, error) {
	jobs, err := d.jobList(ctx, defaultJobs)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	entries, err := d.auditTail(ctx, executionWindow)
	if err != nil {
		return nil, fmt.Errorf("jobs: %w", err)
	}
	items := []JobItem{}
	for _, j := range jobs {
		items = append(items, jobItem(j))
	}
	for _, x := range executions(entries, defaultExecutions) {
		items = append(items, executionItem(x))
	}
	return items, nil
}

func jobItem(j api.Job) JobItem {
	detail := j.Reason
	if detail == "" {
		switch j.State {
		case api.JobQueued:
			detail = "waiting out its undo window; runs at " + j.RunAt + " unless undone"
		case api.JobRunning:
			detail = "running"
		case api.JobDone:
			var res api.CapabilityResult
			if json.Unmarshal(j.Result, &res) == nil && res.Status != "" {
				detail = "ran: " + res.Status
			} else {
				detail = "ran"
			}
		default:
			detail = j.State
		}
	}
	return JobItem{
		ID: j.JobID, Title: j.CapabilityID, Status: j.State, Detail: detail, Route: routeJobs, UpdatedAt: j.UpdatedAt,
		Extra: extras(map[string]any{
			"kind": "job", "app_id": j.AppID, "capability_id": j.CapabilityID, "run_at": j.RunAt,
			"created_at": j.CreatedAt, "requester": j.Requester,
		}),
	}
}

func executionItem(x Execution) JobItem {
	detail := x.Kind + " by " + x.Actor
	if x.Route != "" {
		detail += " via " + x.Route
	}
	if x.Error != "" {
		detail += ": " + x.Error
	}
	return JobItem{
		ID: "audit-" + itoa(x.Seq), Title: x.CapabilityID, Status: x.Outcome, Detail: detail, Route: routeAudit, UpdatedAt: x.Time,
		Extra: extras(map[string]any{
			"kind": "execution", "seq": x.Seq, "app_id": x.AppID, "capability_id": x.CapabilityID, "duration_us": x.DurationUS,
		}),
	}
}

// succeeded are the outcomes of an execution that are not failures;
// CONFIRMATION_REQUIRED is the user's to decide, reported as the pending
// confirmation itself.
var succeeded = []string{api.StatusSuccess, api.StatusPartial, api.StatusDeferred, api.CodeConfirmationRequired.Name()}

// notificationsOp is the notifications feed: pending confirmations
// (warning), then failed executions and jobs (error), newest first, then
// revoked apps (info). The user's own invocations (invoke_admin, as the
// invoke form makes them) are left out: their answer went to whoever
// made them. As with jobs, a failing call fails the op.
func (d *Driver) notificationsOp(ctx context.Context, _ *Request) (any, error) {
	confs, err := d.confirmations(ctx)
	if err != nil {
		return nil, fmt.Errorf("notifications: %w", err)
	}
	entries, err := d.auditTail(ctx, executionWindow)
	if err != nil {
		return nil, fmt.Errorf("notifications: %w", err)
	}
	apps, err := d.apps(ctx)
	if err != nil {
		return nil, fmt.Errorf("notifications: %w", err)
	}
	items := []NotificationItem{}
	for _, c := range confs {
		if c.State != api.ConfirmPending {
			continue
		}
		what := c.ConfirmationType
		if what == "" {
			what = "run"
		}
		items = append(items, NotificationItem{
			ID: c.ConfirmationID, Title: fmt.Sprintf("Confirm %s: %s", what, c.CapabilityID), Body: c.Description,
			Severity: "warning", Route: routeConfirmations, CreatedAt: c.CreatedAt,
			Extra: extras(map[string]any{"kind": "confirmation", "app_id": c.AppID, "capability_id": c.CapabilityID,
				"expires_at": c.ExpiresAt, "requester": c.Requester}),
		})
	}
	failures := 0
	for _, e := range entries {
		if failures == maxFailures {
			break
		}
		var body, title string
		switch {
		case slices.Contains(executionKinds, e.Kind) && e.Kind != api.AuditInvokeAdmin && !slices.Contains(succeeded, e.Outcome):
			var d api.AuditInvokeDetail // an action's detail has no error
			json.Unmarshal(e.Detail, &d)
			body, title = d.Error, fmt.Sprintf("%s failed: %s", e.CapabilityID, e.Outcome)
		case e.Kind == api.AuditJob && e.Outcome == api.JobFailed:
			var d api.AuditJobDetail
			json.Unmarshal(e.Detail, &d)
			body, title = d.Reason, fmt.Sprintf("Job %s of %s failed", d.JobID, e.CapabilityID)
		default:
			continue
		}
		failures++
		items = append(items, NotificationItem{
			ID: "audit-" + itoa(e.Seq), Title: title, Body: body, Severity: "error", Route: routeAudit, CreatedAt: e.Time,
			Extra: extras(map[string]any{"kind": "failure", "seq": e.Seq, "app_id": e.AppID, "capability_id": e.CapabilityID,
				"outcome": e.Outcome, "actor": e.Actor}),
		})
	}
	for _, a := range apps {
		if a.State != api.AppRevoked {
			continue
		}
		body := a.Reason
		if body == "" {
			body = "revoked without a reason given"
		}
		items = append(items, NotificationItem{
			ID: "revoked:" + a.AppID, Title: a.AppID + " is revoked", Body: body, Severity: "info", Route: routeApps,
			CreatedAt: a.RevokedAt, Extra: extras(map[string]any{"kind": "revocation", "app_id": a.AppID}),
		})
	}
	return items, nil
}
