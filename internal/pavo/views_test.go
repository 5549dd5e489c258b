package pavo

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcp-dev/pcp/api"
)

// viewParams are caller params that make every binding of each view
// resolve against demoDaemon.
var viewParams = map[string]string{
	"app":      `{"app_id":"org.example.mail"}`,
	"invoke":   `{"capability_id":"org.example.mail.send"}`,
	"elements": `{"surface_id":"s-1"}`,
}

func validate(t *testing.T, def string, raw []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if err := schemaFor(t, def).Validate(inst); err != nil {
		t.Errorf("$defs/%s: %v\n%s", def, err, raw)
	}
}

func dataDefOf(query string) string {
	var b strings.Builder
	for _, p := range strings.Split(query, "_") {
		b.WriteString(strings.ToUpper(p[:1]) + p[1:])
	}
	return b.String() + "Data"
}

// TestEveryView resolves every view against a fake daemon: each binding
// resolves, and the reply and each binding's data match the schema.
func TestEveryView(t *testing.T) {
	t.Parallel()
	d := &Driver{Daemon: demoDaemon()}
	for _, v := range views {
		params := viewParams[v.id]
		if params == "" {
			params = "{}"
		}
		line := `{"op":"view","view":"` + v.id + `","params":` + params + `}`
		reply := d.Handle(t.Context(), []byte(line))
		validate(t, "ViewReply", reply)
		var r struct {
			Result ViewResult `json:"result"`
		}
		if err := json.Unmarshal(reply, &r); err != nil {
			t.Fatal(err)
		}
		raw := map[string]json.RawMessage{}
		for k, x := range r.Result.Data {
			raw[k], _ = json.Marshal(x)
		}
		for _, b := range v.queries {
			data, ok := raw[b.Name]
			if !ok {
				t.Errorf("view %s: no data for binding %s", v.id, b.Name)
				continue
			}
			if strings.Contains(string(data), `"error":`) && kindOf(data) == "object" {
				t.Errorf("view %s: binding %s failed: %s", v.id, b.Name, data)
				continue
			}
			validate(t, dataDefOf(b.Query), data)
		}
	}
}

// TestPartialDegradation: a failing binding is {"error": …} in data and
// the rest of the view is served.
func TestPartialDegradation(t *testing.T) {
	t.Parallel()
	f := demoDaemon().fail(api.MethodAuditVerify, api.Errorf(api.CodeInternalError, nil, "disk on fire"))
	d := &Driver{Daemon: f}
	ok, res, _ := replyOf(t, d, `{"op":"view","view":"audit"}`)
	if !ok {
		t.Fatal("the view failed as a whole")
	}
	var r struct {
		Data map[string]json.RawMessage `json:"data"`
	}
	json.Unmarshal(res, &r)
	if got, want := string(r.Data["audit_chain"]), `{"error":"query \"audit_chain\": audit.verify: INTERNAL_ERROR: disk on fire"}`; got != want {
		t.Errorf("audit_chain = %s, want %s", got, want)
	}
	if !strings.HasPrefix(string(r.Data["audit"]), `[{"seq":5,`) {
		t.Errorf("audit = %.100s, want the entries, newest first", r.Data["audit"])
	}
	// A param of the wrong type fails the bindings that read it.
	ok, res, _ = replyOf(t, d, `{"op":"view","view":"jobs","params":{"limit":"many"}}`)
	json.Unmarshal(res, &r)
	if !ok || !strings.Contains(string(r.Data["jobs"]), `parameter \"limit\": want an integer`) {
		t.Errorf("jobs with a bad limit: %s", res)
	}
}

// TestNoDaemonNeeded: manifest, views and render never call pcpd.
func TestNoDaemonNeeded(t *testing.T) {
	t.Parallel()
	f := &fakeDaemon{}
	d := &Driver{Daemon: f, Version: "v9"}
	for _, line := range []string{
		`{"op":"manifest"}`, `{"op":"views"}`,
		`{"op":"render","kind":"pcp.audit-chain","node":{},"data":{"audit_chain":{"ok":true,"entries":1}},"surface":"cli"}`,
	} {
		if ok, _, msg := replyOf(t, d, line); !ok {
			t.Errorf("%s: %s", line, msg)
		}
	}
	if len(f.calls) != 0 {
		t.Errorf("called pcpd: %v", f.calls)
	}
	m := d.Manifest()
	if m.Version != "v9" || !slices.Contains(m.Verbs, "serve") || !slices.Contains(m.Capabilities, "pavo") ||
		!m.Contributes.Jobs || !m.Contributes.Notifications || m.Protocol != "v1" {
		t.Errorf("manifest: %+v", m)
	}
	validate(t, "ManifestReply", okLine(m))
	validate(t, "ViewsReply", okLine(summaries()))
}

// TestViewSpecs: every node reads a binding of its view, every binding a
// known query, every form of a view is in its tree.
func TestViewSpecs(t *testing.T) {
	t.Parallel()
	d := &Driver{Daemon: demoDaemon()}
	for _, v := range views {
		if v.route() != "/pcp/"+v.id {
			t.Errorf("view %s: route %s", v.id, v.route())
		}
		names := map[string]bool{}
		for _, b := range v.queries {
			if findQuery(b.Query) == nil {
				t.Errorf("view %s: binding %s reads unknown query %s", v.id, b.Name, b.Query)
			}
			names[b.Name] = true
		}
		var params map[string]json.RawMessage
		json.Unmarshal([]byte(viewParams[v.id]), &params)
		res := d.resolveView(t.Context(), v, params)
		forms := map[string]bool{}
		var walk func(n ViewNode)
		walk = func(n ViewNode) {
			if n.Query != "" && !names[n.Query] {
				t.Errorf("view %s: node %s reads %q, not a binding of the view", v.id, n.ID, n.Query)
			}
			if n.Kind == "form" {
				forms[n.ID] = true
				if n.SubmitOp == "" || len(n.Fields) == 0 {
					t.Errorf("view %s: form %s has no submit_op or no fields", v.id, n.ID)
				}
			}
			for _, c := range n.Children {
				walk(c)
			}
		}
		walk(res.View.Root)
		for _, f := range v.forms {
			if !forms[f.id] {
				t.Errorf("view %s: form %s is not in its tree", v.id, f.id)
			}
		}
	}
}

// TestAppViewDefaults: the app view's forms default to its app.
func TestAppViewDefaults(t *testing.T) {
	t.Parallel()
	d := &Driver{Daemon: demoDaemon()}
	res := d.resolveView(t.Context(), findView("app"), map[string]json.RawMessage{"app_id": json.RawMessage(`"org.example.mail"`)})
	n := 0
	for _, c := range res.View.Root.Children {
		if c.Kind == "form" {
			n++
			if c.Fields[0].Key != "app_id" || c.Fields[0].Default != "org.example.mail" {
				t.Errorf("form %s: first field %+v, want app_id defaulting to the app", c.ID, c.Fields[0])
			}
		}
	}
	if n != 2 {
		t.Errorf("%d forms, want revoke and allow", n)
	}
	// The shared form definitions are not changed by it.
	if revokeForm.fields[0].Default != nil {
		t.Error("resolving the app view changed revokeForm")
	}
}
