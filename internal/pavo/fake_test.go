package pavo

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcp-dev/pcp/api"
)

// fakeDaemon answers calls from canned handlers, as the client would:
// params and results cross as JSON. Unknown methods answer
// METHOD_NOT_FOUND.
type fakeDaemon struct {
	mu       sync.Mutex
	handlers map[string]func(params json.RawMessage) (any, error)
	calls    []fakeCall
}

type fakeCall struct {
	method string
	params string
}

func (f *fakeDaemon) Call(_ context.Context, method string, params, result any) error {
	var raw json.RawMessage
	if params != nil {
		b, err := json.Marshal(params)
		if err != nil {
			return err
		}
		raw = b
	}
	f.mu.Lock()
	f.calls = append(f.calls, fakeCall{method, string(raw)})
	h := f.handlers[method]
	f.mu.Unlock()
	if h == nil {
		return api.Errorf(api.CodeMethodNotFound, map[string]any{"method": method}, "method not found: %s", method)
	}
	res, err := h(raw)
	if err != nil {
		return err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if r, ok := result.(*json.RawMessage); ok {
		*r = b
		return nil
	}
	return json.Unmarshal(b, result)
}

func (f *fakeDaemon) on(method string, h func(params json.RawMessage) (any, error)) *fakeDaemon {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.handlers == nil {
		f.handlers = map[string]func(json.RawMessage) (any, error){}
	}
	f.handlers[method] = h
	return f
}

func (f *fakeDaemon) answer(method string, res any) *fakeDaemon {
	return f.on(method, func(json.RawMessage) (any, error) { return res, nil })
}

func (f *fakeDaemon) fail(method string, err error) *fakeDaemon {
	return f.on(method, func(json.RawMessage) (any, error) { return nil, err })
}

func (f *fakeDaemon) callsTo(method string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if c.method == method {
			out = append(out, c.params)
		}
	}
	return out
}

const (
	t0 = "2026-01-02T15:04:05Z"
	t1 = "2026-01-02T15:04:06.5Z"
)

var (
	hashA = "1111111111111111111111111111111111111111111111111111111111111111"
	hashB = "2222222222222222222222222222222222222222222222222222222222222222"
)

// demoDaemon is a fake pcpd with an app, capabilities, a pending
// confirmation, a queued job, audit entries and events.
func demoDaemon() *fakeDaemon {
	f := &fakeDaemon{}
	no := false
	f.answer(api.MethodAppsList, api.AppsListResult{Apps: []api.App{
		{AppID: "pcp.inspection", State: api.AppBuiltin, Capabilities: 6, Publisher: "pcpd", Signed: true},
		{AppID: "org.example.mail", State: api.AppRunning, Capabilities: 2, Signed: true},
		{AppID: "org.example.bad", State: api.AppRevoked, RevokedAt: t0, Reason: "spam"},
	}})
	f.answer(api.MethodQueryCapabilities, api.QueryCapabilitiesResult{Capabilities: []api.Capability{
		{ID: "org.example.mail.send", Name: "send", Tier: 1, TrustLevel: api.TrustAuto, AppID: "org.example.mail", Available: true,
			Parameters: []api.ParamDecl{{Name: "to", Type: api.TypeString}, {Name: "count", Type: api.TypeInteger, Required: &no},
				{Name: "cc", Type: api.TypeArray, Required: &no}, {Name: "urgent", Type: api.TypeBoolean, Required: &no}}},
		{ID: "org.example.mail.purge", Name: "purge", Tier: 1, TrustLevel: api.TrustConfirm, AppID: "org.example.mail",
			ConfirmationType: "purge", UndoWindowMS: 5000, Available: true},
	}})
	f.answer(api.MethodConfirmList, api.ConfirmListResult{Confirmations: []api.Confirmation{
		{ConfirmationID: "conf-1", CapabilityID: "org.example.mail.purge", AppID: "org.example.mail", ConfirmationType: "purge",
			Description: "Purge the mailbox", State: api.ConfirmUsed, Requester: "agent:uid=1,pid=2", CreatedAt: t0, ExpiresAt: t1},
		{ConfirmationID: "conf-2", CapabilityID: "org.example.mail.purge", AppID: "org.example.mail", ConfirmationType: "purge",
			Description: "Purge the mailbox again", State: api.ConfirmPending, Requester: "agent:uid=1,pid=2", CreatedAt: t0, ExpiresAt: t1},
	}})
	f.answer(api.MethodJobsList, api.JobsListResult{Jobs: []api.Job{
		{JobID: "job-1", CapabilityID: "org.example.mail.purge", AppID: "org.example.mail", State: api.JobQueued,
			RunAt: t1, CreatedAt: t0, UpdatedAt: t0, Requester: "agent:uid=1,pid=2"},
	}})
	f.answer(api.MethodAuditTail, api.AuditTailResult{Entries: []api.AuditEntry{
		{Seq: 1, Time: t0, Kind: "register", AppID: "org.example.mail", Outcome: "success", PrevHash: hashA, Hash: hashB},
		{Seq: 2, Time: t0, Kind: "invoke", AppID: "org.example.mail", CapabilityID: "org.example.mail.send", Actor: "agent:uid=1,pid=2",
			Outcome: "success", DurationUS: 40, Detail: json.RawMessage(`{"route":"native"}`), PrevHash: hashB, Hash: hashA},
		{Seq: 3, Time: t1, Kind: "invoke", AppID: "org.example.mail", CapabilityID: "org.example.mail.send", Actor: "agent:uid=1,pid=2",
			Outcome: "APP_UNRESPONSIVE", Detail: json.RawMessage(`{"route":"native","error":"not answering"}`), PrevHash: hashA, Hash: hashB},
		{Seq: 4, Time: t1, Kind: "invoke_admin", AppID: "org.example.mail", CapabilityID: "org.example.mail.send", Actor: "user:uid=1,pid=3",
			Outcome: "INVALID_PARAMS", Detail: json.RawMessage(`{"error":"params.to: bad"}`), PrevHash: hashB, Hash: hashA},
		{Seq: 5, Time: t1, Kind: "job", AppID: "org.example.mail", CapabilityID: "org.example.mail.purge",
			Outcome: "failed", Detail: json.RawMessage(`{"job_id":"job-0","reason":"app went away"}`), PrevHash: hashA, Hash: hashB},
	}})
	f.answer(api.MethodAuditVerify, api.AuditVerifyResult{OK: true, Entries: 5, Head: hashB})
	f.answer(api.MethodEventsHistory, api.EventsHistoryResult{Events: []api.Event{
		{Sequence: 1, Type: "app.connected", Timestamp: 1767366245, AppID: "org.example.mail", Data: json.RawMessage(`{"app_id":"org.example.mail"}`)},
		{Sequence: 2, Type: "capability.invoked", Timestamp: 1767366246, AppID: "org.example.mail",
			Data: json.RawMessage(`{"app_id":"org.example.mail","capability_id":"org.example.mail.send","duration_ms":3,"outcome":"success","note":"two words"}`)},
	}})
	f.answer(api.MethodHealthCheck, api.HealthResult{Status: api.HealthOK, UptimeMS: 10, Version: "0.1.0"})
	f.answer(api.MethodQuerySurface, api.Surface{SurfaceID: "s-1", AppID: "org.example.mail", Title: "Inbox", Tier: 2})
	f.answer(api.MethodQueryElements, api.QueryElementsResult{Root: api.Element{ID: "root", Role: "frame", Label: "Inbox",
		Bounds: &api.Bounds{W: 100, H: 50}, Children: []api.Element{{ID: "b", Role: "push button", Label: "Send", Bounds: &api.Bounds{X: 5, Y: 5, W: 40, H: 20}}}}})
	return f
}

// schemaFor compiles $defs/name of the driver's schema.
func schemaFor(t testing.TB, name string) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(Schema))
	if err != nil {
		t.Fatalf("the schema is not JSON: %v", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("wire.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("wire.schema.json#/$defs/" + name)
	if err != nil {
		t.Fatalf("compiling $defs/%s: %v", name, err)
	}
	return s
}

// replyOf runs one request line through d and decodes the reply.
func replyOf(t testing.TB, d *Driver, line string) (ok bool, result json.RawMessage, errText string) {
	t.Helper()
	b := d.Handle(context.Background(), []byte(line))
	var r struct {
		OK     *bool           `json:"ok"`
		Result json.RawMessage `json:"result"`
		Error  *string         `json:"error"`
	}
	if err := json.Unmarshal(b, &r); err != nil || r.OK == nil {
		t.Fatalf("%s: reply %s is not an envelope: %v", line, b, err)
	}
	if *r.OK != (r.Result != nil) || *r.OK == (r.Error != nil) {
		t.Fatalf("%s: reply %s carries the wrong arm", line, b)
	}
	if r.Error != nil {
		return false, nil, *r.Error
	}
	return true, r.Result, ""
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
