package pavo

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pcp-dev/pcp/api"
)

// A query is either a named query of this driver (queryTable: the data
// the views bind, shaped for them) or a raw read-only pcpd method
// (readOnlyMethods: params and result as the daemon's JSON-RPC face has
// them). Methods that change state are submit's, never query's.

type queryDef struct {
	name   string
	params []FormField
	run    func(d *Driver, ctx context.Context, p fieldValues) (any, error)
}

// Defaults and bounds of the named queries' limits.
const (
	defaultEvents     = 100
	defaultAudit      = 50
	defaultJobs       = 50
	defaultExecutions = 20
	// executionWindow is how many of the newest audit entries the
	// executions, jobs and notifications feeds look through.
	executionWindow = 1000
)

// Parameters shared by several queries.
var (
	pLimit = func(def, max int) FormField {
		return FormField{Key: "limit", Label: "Limit", Type: FieldInteger, Default: def,
			Help: fmt.Sprintf("How many of the newest, 1 to %d.", max)}
	}
	pAppFilter  = FormField{Key: "app_id", Label: "App", Type: FieldString, Help: "Only this app."}
	pAppID      = FormField{Key: "app_id", Label: "App", Type: FieldString, Required: true, Help: "The app's id, e.g. org.pcp.notes."}
	pCapID      = FormField{Key: "capability_id", Label: "Capability", Type: FieldString, Required: true, Help: "The capability's id, e.g. org.pcp.notes.create."}
	pSurfaceID  = FormField{Key: "surface_id", Label: "Surface", Type: FieldString, Required: true, Help: "The surface's id."}
	appStates   = []string{api.AppBuiltin, api.AppNotRunning, api.AppRevoked, api.AppRunning, api.AppUnresponsive}
	confStates  = []string{api.ConfirmApproved, api.ConfirmDenied, api.ConfirmExpired, api.ConfirmPending, api.ConfirmUsed}
	jobStates   = []string{api.JobCancelled, api.JobDone, api.JobFailed, api.JobQueued, api.JobRunning, api.JobUndone}
	trustLevels = []string{api.TrustAuto, api.TrustConfirm, api.TrustDeny}
)

// queryTable holds the named queries, sorted by name; a test keeps it
// sorted.
var queryTable = []queryDef{
	{"app", []FormField{pAppID}, (*Driver).qApp},
	{"apps", []FormField{{Key: "state", Label: "State", Type: FieldEnum, Options: appStates, Help: "Only apps in this state."}}, (*Driver).qApps},
	{"audit", []FormField{pLimit(defaultAudit, 10000), {Key: "kind", Label: "Kind", Type: FieldString, Help: "Only entries of this kind (invoke, confirmation, job, …)."}, pAppFilter}, (*Driver).qAudit},
	{"audit_chain", nil, (*Driver).qAuditChain},
	{"capabilities", []FormField{
		pAppFilter,
		{Key: "tier", Label: "Tier", Type: FieldInteger, Help: "Only capabilities of this tier."},
		{Key: "trust_level", Label: "Trust level", Type: FieldEnum, Options: trustLevels, Help: "Only capabilities at this trust level."},
		{Key: "available", Label: "Available", Type: FieldBoolean, Help: "Only capabilities whose app is (true) or is not (false) connected."},
	}, (*Driver).qCapabilities},
	{"capability", []FormField{pCapID}, (*Driver).qCapability},
	{"confirmations", []FormField{{Key: "state", Label: "State", Type: FieldEnum, Options: confStates, Help: "Only confirmations in this state."}}, (*Driver).qConfirmations},
	{"elements", []FormField{pSurfaceID, {Key: "focus_id", Label: "Focus", Type: FieldString, Help: "Only the subtree of this element."}}, (*Driver).qElements},
	{"events", []FormField{
		pLimit(defaultEvents, 10000),
		{Key: "type", Label: "Type", Type: FieldString, Help: "Only events of this type."},
		pAppFilter,
		{Key: "surface_id", Label: "Surface", Type: FieldString, Help: "Only events of this surface."},
	}, (*Driver).qEvents},
	{"executions", []FormField{pLimit(defaultExecutions, 200)}, (*Driver).qExecutions},
	{"health", nil, (*Driver).qHealth},
	{"jobs", []FormField{pLimit(defaultJobs, 1000), {Key: "state", Label: "State", Type: FieldEnum, Options: jobStates, Help: "Only jobs in this state."}}, (*Driver).qJobs},
	{"surface", []FormField{pSurfaceID}, (*Driver).qSurface},
}

func findQuery(name string) *queryDef {
	i, ok := slices.BinarySearchFunc(queryTable, name, func(q queryDef, n string) int { return strings.Compare(q.name, n) })
	if !ok {
		return nil
	}
	return &queryTable[i]
}

func queryNames() []string {
	var out []string
	for _, q := range queryTable {
		out = append(out, q.name)
	}
	return out
}

func (d *Driver) queryOp(ctx context.Context, r *Request) (any, error) {
	data, err := d.runQuery(ctx, r.Query, r.Params)
	if err != nil {
		return nil, err
	}
	return &QueryResult{Query: r.Query, Data: data}, nil
}

// runQuery runs a named query or a raw read-only method with params.
func (d *Driver) runQuery(ctx context.Context, name string, params map[string]json.RawMessage) (any, error) {
	if q := findQuery(name); q != nil {
		vals, errs := checkValues(q.params, params, false)
		if errs != nil {
			return nil, fmt.Errorf("query %q: %s", name, describeErrors(errs))
		}
		v, err := q.run(d, ctx, vals)
		if err != nil {
			return nil, fmt.Errorf("query %q: %w", name, err)
		}
		return v, nil
	}
	if readOnly(name) {
		var p any
		if params != nil {
			p = params
		}
		var raw json.RawMessage
		if err := d.call(ctx, name, p, &raw); err != nil {
			return nil, fmt.Errorf("query %q: %w", name, err)
		}
		return raw, nil
	}
	if strings.Contains(name, ".") {
		return nil, fmt.Errorf("query %s: not a read-only pcpd method (those are %s); changes go through submit",
			quote(name), strings.Join(readOnlyMethods, ", "))
	}
	return nil, fmt.Errorf("query: unknown query %s (named queries: %s; or a read-only pcpd method)",
		quote(name), strings.Join(queryNames(), ", "))
}

// describeErrors renders per-key errors as `parameter "k": what; …`,
// sorted by key.
func describeErrors(errs map[string]string) string {
	keys := make([]string, 0, len(errs))
	for k := range errs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("parameter %s: %s", quote(k), errs[k]))
	}
	return strings.Join(parts, "; ")
}

func limitOf(p fieldValues, def, max int) (int, error) {
	n, ok := p["limit"].(int64)
	if !ok {
		return def, nil
	}
	if n < 1 || n > int64(max) {
		return 0, fmt.Errorf("parameter \"limit\": want 1 to %d, got %d", max, n)
	}
	return int(n), nil
}

func (d *Driver) apps(ctx context.Context) ([]api.App, error) {
	var res api.AppsListResult
	if err := d.call(ctx, api.MethodAppsList, nil, &res); err != nil {
		return nil, err
	}
	apps := slices.Clone(res.Apps)
	slices.SortFunc(apps, func(a, b api.App) int { return strings.Compare(a.AppID, b.AppID) })
	return nonNil(apps), nil
}

func (d *Driver) qApps(ctx context.Context, p fieldValues) (any, error) {
	apps, err := d.apps(ctx)
	if err != nil {
		return nil, err
	}
	if p.has("state") {
		apps = slices.DeleteFunc(apps, func(a api.App) bool { return a.State != p.str("state") })
	}
	return apps, nil
}

func (d *Driver) qApp(ctx context.Context, p fieldValues) (any, error) {
	apps, err := d.apps(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range apps {
		if a.AppID == p.str("app_id") {
			return a, nil
		}
	}
	return nil, fmt.Errorf("no app %s", quote(p.str("app_id")))
}

func (d *Driver) capabilities(ctx context.Context, q *api.QueryCapabilitiesParams) ([]api.Capability, error) {
	var res api.QueryCapabilitiesResult
	if err := d.call(ctx, api.MethodQueryCapabilities, q, &res); err != nil {
		return nil, err
	}
	caps := slices.Clone(res.Capabilities)
	slices.SortFunc(caps, func(a, b api.Capability) int { return strings.Compare(a.ID, b.ID) })
	return nonNil(caps), nil
}

func (d *Driver) qCapabilities(ctx context.Context, p fieldValues) (any, error) {
	q := &api.QueryCapabilitiesParams{AppID: p.str("app_id")}
	if t, ok := p["tier"].(int64); ok {
		tier := int(t)
		q.Tier = &tier
	}
	caps, err := d.capabilities(ctx, q)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(caps, func(c api.Capability) bool {
		if p.has("trust_level") && c.TrustLevel != p.str("trust_level") {
			return true
		}
		if a, ok := p["available"].(bool); ok && c.Available != a {
			return true
		}
		return false
	}), nil
}

// capability finds one capability by id.
func (d *Driver) capability(ctx context.Context, id string) (*api.Capability, error) {
	caps, err := d.capabilities(ctx, &api.QueryCapabilitiesParams{})
	if err != nil {
		return nil, err
	}
	for i := range caps {
		if caps[i].ID == id {
			return &caps[i], nil
		}
	}
	return nil, fmt.Errorf("no capability %s", quote(id))
}

func (d *Driver) qCapability(ctx context.Context, p fieldValues) (any, error) {
	return d.capability(ctx, p.str("capability_id"))
}

// EventRow is one event of the journal as the events query has it: the
// time in RFC 3339 and its members summarised on one line.
type EventRow struct {
	Sequence  int64           `json:"sequence"`
	Type      string          `json:"type"`
	Time      string          `json:"time"`
	AppID     string          `json:"app_id,omitempty"`
	SurfaceID string          `json:"surface_id,omitempty"`
	Summary   string          `json:"summary"`
	Data      json.RawMessage `json:"data,omitempty"`
}

func (d *Driver) qEvents(ctx context.Context, p fieldValues) (any, error) {
	limit, err := limitOf(p, defaultEvents, 10000)
	if err != nil {
		return nil, err
	}
	var res api.EventsHistoryResult
	if err := d.call(ctx, api.MethodEventsHistory, &api.EventsHistoryParams{Limit: limit}, &res); err != nil {
		return nil, err
	}
	rows := []EventRow{}
	for i := len(res.Events) - 1; i >= 0; i-- { // newest first
		ev := res.Events[i]
		if (p.has("type") && ev.Type != p.str("type")) || (p.has("app_id") && ev.AppID != p.str("app_id")) ||
			(p.has("surface_id") && ev.SurfaceID != p.str("surface_id")) {
			continue
		}
		rows = append(rows, EventRow{
			Sequence: ev.Sequence, Type: ev.Type, Time: unixTime(ev.Timestamp), AppID: ev.AppID,
			SurfaceID: ev.SurfaceID, Summary: summarize(ev.Data), Data: ev.Data,
		})
	}
	return rows, nil
}

func unixTime(sec int64) string { return time.Unix(sec, 0).UTC().Format(time.RFC3339) }

// maxSummary bounds an event's summary, in runes.
const maxSummary = 200

// summarize renders an event's members as "k=v k=v", sorted by key,
// without app_id and surface_id (columns of their own).
func summarize(data json.RawMessage) string {
	var m map[string]json.RawMessage
	if json.Unmarshal(data, &m) != nil {
		return cut(string(compact(data)), maxSummary)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "app_id" && k != "surface_id" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(k + "=")
		var s string
		if json.Unmarshal(m[k], &s) == nil && s != "" && !strings.ContainsAny(s, " \t\n\"=") {
			b.WriteString(s)
		} else {
			b.Write(compact(m[k]))
		}
	}
	return cut(b.String(), maxSummary)
}

// cut shortens s to n runes, marking the cut.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func (d *Driver) auditTail(ctx context.Context, limit int) ([]api.AuditEntry, error) {
	var res api.AuditTailResult
	if err := d.call(ctx, api.MethodAuditTail, &api.AuditTailParams{Limit: limit}, &res); err != nil {
		return nil, err
	}
	entries := slices.Clone(res.Entries)
	slices.Reverse(entries) // newest first
	return nonNil(entries), nil
}

func (d *Driver) qAudit(ctx context.Context, p fieldValues) (any, error) {
	limit, err := limitOf(p, defaultAudit, 10000)
	if err != nil {
		return nil, err
	}
	entries, err := d.auditTail(ctx, limit)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(entries, func(e api.AuditEntry) bool {
		return (p.has("kind") && e.Kind != p.str("kind")) || (p.has("app_id") && e.AppID != p.str("app_id"))
	}), nil
}

func (d *Driver) qAuditChain(ctx context.Context, _ fieldValues) (any, error) {
	var res api.AuditVerifyResult
	if err := d.call(ctx, api.MethodAuditVerify, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (d *Driver) confirmations(ctx context.Context) ([]api.Confirmation, error) {
	var res api.ConfirmListResult
	if err := d.call(ctx, api.MethodConfirmList, nil, &res); err != nil {
		return nil, err
	}
	confs := slices.Clone(res.Confirmations)
	// Pending first, then newest first; the id breaks ties so the order
	// never depends on the daemon's.
	slices.SortStableFunc(confs, func(a, b api.Confirmation) int {
		ap, bp := a.State == api.ConfirmPending, b.State == api.ConfirmPending
		if ap != bp {
			if ap {
				return -1
			}
			return 1
		}
		return cmp.Or(compareStamps(b.CreatedAt, a.CreatedAt), strings.Compare(a.ConfirmationID, b.ConfirmationID))
	})
	return nonNil(confs), nil
}

func (d *Driver) qConfirmations(ctx context.Context, p fieldValues) (any, error) {
	confs, err := d.confirmations(ctx)
	if err != nil {
		return nil, err
	}
	if p.has("state") {
		confs = slices.DeleteFunc(confs, func(c api.Confirmation) bool { return c.State != p.str("state") })
	}
	return confs, nil
}

// compareStamps compares two RFC 3339 timestamps as times, or as strings
// when either does not parse.
func compareStamps(a, b string) int {
	ta, errA := time.Parse(time.RFC3339Nano, a)
	tb, errB := time.Parse(time.RFC3339Nano, b)
	if errA != nil || errB != nil {
		return strings.Compare(a, b)
	}
	return ta.Compare(tb)
}

func (d *Driver) jobList(ctx context.Context, limit int) ([]api.Job, error) {
	var res api.JobsListResult
	if err := d.call(ctx, api.MethodJobsList, &api.JobsListParams{Limit: limit}, &res); err != nil {
		return nil, err
	}
	return nonNil(res.Jobs), nil
}

func (d *Driver) qJobs(ctx context.Context, p fieldValues) (any, error) {
	limit, err := limitOf(p, defaultJobs, 1000)
	if err != nil {
		return nil, err
	}
	jobs, err := d.jobList(ctx, limit)
	if err != nil {
		return nil, err
	}
	if p.has("state") {
		jobs = slices.DeleteFunc(jobs, func(j api.Job) bool { return j.State != p.str("state") })
	}
	return jobs, nil
}

// Execution is one recent execution: an audit entry of an invocation or
// an action.
type Execution struct {
	Seq          int64  `json:"seq"`
	Time         string `json:"time"`
	Kind         string `json:"kind"`
	CapabilityID string `json:"capability_id,omitempty"`
	AppID        string `json:"app_id,omitempty"`
	Actor        string `json:"actor,omitempty"`
	Outcome      string `json:"outcome"`
	DurationUS   int64  `json:"duration_us"`
	Route        string `json:"route,omitempty"`
	Error        string `json:"error,omitempty"`
}

// executionKinds are the audit kinds that record an execution.
var executionKinds = []string{api.AuditAction, api.AuditInvoke, api.AuditInvokeAdmin}

// executions picks the newest limit executions from entries (newest
// first).
func executions(entries []api.AuditEntry, limit int) []Execution {
	out := []Execution{}
	for _, e := range entries {
		if len(out) == limit {
			break
		}
		if !slices.Contains(executionKinds, e.Kind) {
			continue
		}
		var detail struct {
			Route string `json:"route"`
			Error string `json:"error"`
		}
		json.Unmarshal(e.Detail, &detail)
		out = append(out, Execution{
			Seq: e.Seq, Time: e.Time, Kind: e.Kind, CapabilityID: e.CapabilityID, AppID: e.AppID, Actor: e.Actor,
			Outcome: e.Outcome, DurationUS: e.DurationUS, Route: detail.Route, Error: detail.Error,
		})
	}
	return out
}

func (d *Driver) qExecutions(ctx context.Context, p fieldValues) (any, error) {
	limit, err := limitOf(p, defaultExecutions, 200)
	if err != nil {
		return nil, err
	}
	entries, err := d.auditTail(ctx, executionWindow)
	if err != nil {
		return nil, err
	}
	return executions(entries, limit), nil
}

func (d *Driver) qHealth(ctx context.Context, _ fieldValues) (any, error) {
	var res api.HealthResult
	if err := d.call(ctx, api.MethodHealthCheck, nil, &res); err != nil {
		return nil, err
	}
	res.Adapters = nonNil(res.Adapters)
	return &res, nil
}

func (d *Driver) qSurface(ctx context.Context, p fieldValues) (any, error) {
	var res api.Surface
	if err := d.call(ctx, api.MethodQuerySurface, &api.QuerySurfaceParams{SurfaceID: p.str("surface_id")}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

func (d *Driver) qElements(ctx context.Context, p fieldValues) (any, error) {
	var res api.QueryElementsResult
	q := &api.QueryElementsParams{SurfaceID: p.str("surface_id"), FocusID: p.str("focus_id")}
	if err := d.call(ctx, api.MethodQueryElements, q, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// itoa is strconv.FormatInt for the common case.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }
