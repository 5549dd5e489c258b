package pavo

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
)

// TestSubmit posts each form to a fake daemon and checks the call it
// makes and the result.
func TestSubmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		line      string
		method    string // the call the submit makes
		params    string
		message   string
		freshView string
	}{
		{"approve", `{"op":"submit","view":"confirmations","form":"approve","values":{"confirmation_id":"conf-2"}}`,
			api.MethodConfirmApprove, `{"confirmation_id":"conf-2"}`, "approved conf-2 (org.example.mail.purge)", "confirmations"},
		{"approve is the default form", `{"op":"submit","view":"confirmations","values":{"confirmation_id":"conf-2","reason":"ok"}}`,
			api.MethodConfirmApprove, `{"confirmation_id":"conf-2","reason":"ok"}`, "approved conf-2 (org.example.mail.purge)", "confirmations"},
		{"deny", `{"op":"submit","view":"confirmations","form":"deny","values":{"confirmation_id":"conf-2","reason":"no"}}`,
			api.MethodConfirmDeny, `{"confirmation_id":"conf-2","reason":"no"}`, "denied conf-2 (org.example.mail.purge)", "confirmations"},
		{"undo", `{"op":"submit","view":"jobs","form":"undo","values":{"job_id":"job-1"}}`,
			api.MethodJobsUndo, `{"job_id":"job-1"}`, "undid job-1 (org.example.mail.purge); it will not run", "jobs"},
		{"revoke", `{"op":"submit","view":"apps","form":"revoke","values":{"app_id":"org.example.mail","reason":"enough"}}`,
			api.MethodRevokeApp, `{"app_id":"org.example.mail","reason":"enough"}`, "revoked org.example.mail; 2 subscriptions ended", "apps"},
		{"allow from the app view", `{"op":"submit","view":"app","form":"allow","values":{"app_id":"org.example.bad"}}`,
			api.MethodAppsAllow, `{"app_id":"org.example.bad"}`, "allowed org.example.bad again", "app"},
		{"invoke with typed fields", `{"op":"submit","view":"invoke","form":"org.example.mail.send","values":{"to":"ann","count":"2","cc":"[\"bob\"]","urgent":"true"}}`,
			api.MethodInvokeCapability, `{"capability_id":"org.example.mail.send","app_id":"org.example.mail","source":"SystemIntelligence","params":{"cc":["bob"],"count":2,"to":"ann","urgent":true},"admin":true}`,
			"org.example.mail.send: success", ""},
		{"invoke a confirm capability, ticked", `{"op":"submit","view":"invoke","form":"org.example.mail.purge","values":{"pcp.confirm":true}}`,
			api.MethodInvokeCapability, `{"capability_id":"org.example.mail.purge","app_id":"org.example.mail","source":"SystemIntelligence","params":{},"admin":true}`,
			"org.example.mail.purge: success", ""},
	}
	for _, tt := range tests {
		f := demoDaemon()
		f.on(api.MethodConfirmApprove, func(p json.RawMessage) (any, error) {
			var q api.ConfirmDecisionParams
			json.Unmarshal(p, &q)
			return api.ConfirmDecisionResult{Confirmation: api.Confirmation{ConfirmationID: q.ConfirmationID, CapabilityID: "org.example.mail.purge",
				AppID: "org.example.mail", State: api.ConfirmApproved, CreatedAt: t0, ExpiresAt: t1}}, nil
		})
		f.on(api.MethodConfirmDeny, func(p json.RawMessage) (any, error) {
			var q api.ConfirmDecisionParams
			json.Unmarshal(p, &q)
			return api.ConfirmDecisionResult{Confirmation: api.Confirmation{ConfirmationID: q.ConfirmationID, CapabilityID: "org.example.mail.purge",
				AppID: "org.example.mail", State: api.ConfirmDenied, CreatedAt: t0, ExpiresAt: t1, Reason: q.Reason}}, nil
		})
		f.answer(api.MethodJobsUndo, api.JobsUndoResult{Job: api.Job{JobID: "job-1", CapabilityID: "org.example.mail.purge", AppID: "org.example.mail",
			State: api.JobUndone, RunAt: t1, CreatedAt: t0, UpdatedAt: t1}})
		f.answer(api.MethodRevokeApp, api.RevokeAppResult{Revoked: true, TerminatedSubscriptions: 2})
		f.answer(api.MethodAppsAllow, api.AppsAllowResult{Allowed: true, WasRevoked: true})
		f.answer(api.MethodInvokeCapability, api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"sent":true}`)})
		d := &Driver{Daemon: f}

		reply := d.Handle(t.Context(), []byte(tt.line))
		validate(t, "SubmitReply", reply)
		var r struct {
			OK     bool         `json:"ok"`
			Error  string       `json:"error"`
			Result SubmitResult `json:"result"`
		}
		if err := json.Unmarshal(reply, &r); err != nil || !r.OK {
			t.Errorf("%s: %s", tt.name, reply)
			continue
		}
		if calls := f.callsTo(tt.method); len(calls) != 1 || calls[0] != tt.params {
			t.Errorf("%s: %s calls %q, want one with %s", tt.name, tt.method, calls, tt.params)
		}
		if r.Result.Message != tt.message || len(r.Result.Errors) != 0 || r.Result.Data == nil {
			t.Errorf("%s: got %+v, want message %q and data", tt.name, r.Result, tt.message)
		}
		got := ""
		if r.Result.View != nil {
			got = r.Result.View.View.ID
		}
		if got != tt.freshView {
			t.Errorf("%s: fresh view %q, want %q", tt.name, got, tt.freshView)
		}
	}
}

// TestSubmitRejected: values that do not pass, and fields the daemon
// refuses, come back as errors keyed by field, with ok:true; other
// failures are ok:false.
func TestSubmitRejected(t *testing.T) {
	t.Parallel()
	f := demoDaemon()
	f.fail(api.MethodJobsUndo, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "job_id"}, "job_id: job job-9 is done; only a queued job can be undone"))
	f.fail(api.MethodInvokeCapability, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "params.to"}, "no such mailbox"))
	f.fail(api.MethodConfirmApprove, api.Errorf(api.CodePermissionDenied, map[string]any{"required_role": "user"}, "only the user decides"))
	f.fail(api.MethodRevokeApp, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "something_else"}, "odd"))
	d := &Driver{Daemon: f}
	tests := []struct {
		line   string
		ok     bool
		errs   map[string]string
		errMsg string
	}{
		{`{"op":"submit","view":"jobs","values":{}}`, true, map[string]string{"job_id": "required"}, ""},
		{`{"op":"submit","view":"jobs","values":{"job_id":"job-9"}}`, true,
			map[string]string{"job_id": "job job-9 is done; only a queued job can be undone"}, ""},
		{`{"op":"submit","view":"invoke","form":"org.example.mail.send","values":{"to":"nobody"}}`, true,
			map[string]string{"to": "no such mailbox"}, ""},
		{`{"op":"submit","view":"invoke","form":"org.example.mail.send","values":{"to":["x"],"count":"two","extra":1}}`, true,
			map[string]string{"to": "want a string, got an array", "count": `want an integer, got "two"`, "extra": "not a field of this form"}, ""},
		{`{"op":"submit","view":"invoke","form":"org.example.mail.purge","values":{"pcp.confirm":"false"}}`, true,
			map[string]string{"pcp.confirm": "must be true: org.example.mail.purge asks for confirmation"}, ""},
		{`{"op":"submit","view":"confirmations","values":{"confirmation_id":"conf-2"}}`, false, nil,
			"submit confirmations/approve: confirm.approve: PERMISSION_DENIED: only the user decides"},
		{`{"op":"submit","view":"apps","values":{"app_id":"x"}}`, false, nil,
			"submit apps/revoke: revoke.app: INVALID_PARAMS: odd"},
		{`{"op":"submit","view":"health","values":{}}`, false, nil, "submit health: the view has no forms"},
		{`{"op":"submit","view":"invoke","form":"","values":{}}`, false, nil,
			`submit invoke: the invoke view's form is the capability: name it as "form" (e.g. "org.pcp.notes.create")`},
	}
	for _, tt := range tests {
		reply := d.Handle(t.Context(), []byte(tt.line))
		validate(t, "SubmitReply", reply)
		var r struct {
			OK     bool         `json:"ok"`
			Error  string       `json:"error"`
			Result SubmitResult `json:"result"`
		}
		json.Unmarshal(reply, &r)
		if r.OK != tt.ok || r.Error != tt.errMsg {
			t.Errorf("%s: got %s", tt.line, reply)
			continue
		}
		if diff := cmp.Diff(tt.errs, r.Result.Errors); diff != "" {
			t.Errorf("%s: errors (-want +got):\n%s", tt.line, diff)
		}
		if tt.ok && (r.Result.View != nil || !strings.Contains(r.Result.Message, "need")) {
			t.Errorf("%s: a rejected submit carries %+v", tt.line, r.Result)
		}
	}
	if calls := f.callsTo(api.MethodInvokeCapability); len(calls) != 1 {
		t.Errorf("invoke.capability was called %d times, want once (only the values that passed)", len(calls))
	}
}

// TestCapabilityForm: the invoke form's fields follow the manifest.
func TestCapabilityForm(t *testing.T) {
	t.Parallel()
	no := false
	c := &api.Capability{ID: "a.b.c", AppID: "a.b", TrustLevel: api.TrustConfirm, ConfirmationType: "send", Parameters: []api.ParamDecl{
		{Name: "s", Type: api.TypeString, Description: "text"},
		{Name: "o", Type: api.TypeObject, Required: &no},
		{Name: "x", Type: api.TypeAny, Required: &no},
	}}
	got := capabilityForm(c).node("")
	want := `{"kind":"form","id":"a.b.c","title":"Invoke a.b.c","fields":[` +
		`{"key":"s","label":"s","type":"string","required":true,"help":"text"},` +
		`{"key":"o","label":"o","type":"json","help":"JSON (object)."},` +
		`{"key":"x","label":"x","type":"json","help":"JSON (any)."},` +
		`{"key":"pcp.confirm","label":"Confirm","type":"boolean","required":true,"help":"a.b.c asks for confirmation (send); set to true to go ahead."}],` +
		`"submit_op":"invoke.capability","submit_label":"Invoke"}`
	if g := mustJSON(t, got); g != want {
		t.Errorf("got  %s\nwant %s", g, want)
	}
}
