package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/manifest"
	"github.com/pcp-dev/pcp/sdk"
)

// invoke calls capability name with params and returns its data as
// decoded JSON, or its error as an *api.Error.
func invoke(t *testing.T, caps map[string]sdk.CapabilityFunc, name, params string) (map[string]any, *api.Error) {
	t.Helper()
	f := caps[name]
	if f == nil {
		t.Fatalf("no handler for %q", name)
	}
	res, err := f(t.Context(), json.RawMessage(params))
	if err != nil {
		var pe *api.Error
		if !errors.As(err, &pe) {
			t.Fatalf("%s(%s): error %v is not an *api.Error", name, params, err)
		}
		return nil, pe
	}
	raw, err := json.Marshal(res)
	if err != nil {
		t.Fatalf("%s(%s): encoding result: %v", name, params, err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s(%s): result %s is not an object: %v", name, params, raw, err)
	}
	return m, nil
}

func mustInvoke(t *testing.T, caps map[string]sdk.CapabilityFunc, name, params string) map[string]any {
	t.Helper()
	m, perr := invoke(t, caps, name, params)
	if perr != nil {
		t.Fatalf("%s(%s): %v", name, params, perr)
	}
	return m
}

func TestHandlersRoundTrip(t *testing.T) {
	st, _ := openTestStore(t)
	caps := capabilities(st)

	created := mustInvoke(t, caps, "create", `{"title":"Trip","body":"Pack the tent","tags":["travel"]}`)
	if created["id"] != 1.0 || created["created_at"] != "2025-03-01T09:00:01Z" {
		t.Errorf("create = %v, want id 1 and created_at 2025-03-01T09:00:01Z", created)
	}
	if _, extra := created["title"]; extra || len(created) != 2 {
		t.Errorf("create returned %v, want only id and created_at", created)
	}

	read := mustInvoke(t, caps, "read", `{"id":1}`)
	want := map[string]any{
		"id": 1.0, "title": "Trip", "body": "Pack the tent", "tags": []any{"travel"},
		"created_at": "2025-03-01T09:00:01Z", "updated_at": "2025-03-01T09:00:01Z",
	}
	if diff := cmp.Diff(want, read); diff != "" {
		t.Errorf("read (-want +got):\n%s", diff)
	}
	// 1.0 is a whole number and names note 1, as the daemon's check allows.
	if again := mustInvoke(t, caps, "read", `{"id":1.0}`); again["title"] != "Trip" {
		t.Errorf("read id 1.0 = %v", again)
	}

	list := mustInvoke(t, caps, "list", `{}`)
	wantList := map[string]any{"notes": []any{map[string]any{
		"id": 1.0, "title": "Trip", "tags": []any{"travel"}, "updated_at": "2025-03-01T09:00:01Z",
	}}}
	if diff := cmp.Diff(wantList, list); diff != "" {
		t.Errorf("list (-want +got):\n%s", diff)
	}
	if empty := mustInvoke(t, caps, "list", `{"tag":"none"}`); !cmp.Equal(empty, map[string]any{"notes": []any{}}) {
		t.Errorf("list with no match = %v, want notes: []", empty)
	}
	if none := mustInvoke(t, caps, "list", ``); len(none["notes"].([]any)) != 1 {
		t.Errorf("list with absent params = %v", none)
	}

	found := mustInvoke(t, caps, "search", `{"query":"TENT"}`)
	notes := found["notes"].([]any)
	if len(notes) != 1 || notes[0].(map[string]any)["snippet"] != "Pack the tent" {
		t.Errorf("search TENT = %v, want note 1 with snippet", found)
	}

	updated := mustInvoke(t, caps, "update", `{"id":1,"body":"Pack the tent and stove","tags":[]}`)
	if updated["body"] != "Pack the tent and stove" || updated["title"] != "Trip" || len(updated["tags"].([]any)) != 0 {
		t.Errorf("update = %v", updated)
	}
	if updated["updated_at"] == updated["created_at"] {
		t.Errorf("update did not move updated_at: %v", updated)
	}

	deleted := mustInvoke(t, caps, "delete", `{"id":1}`)
	if diff := cmp.Diff(map[string]any{"deleted": true, "id": 1.0}, deleted); diff != "" {
		t.Errorf("delete (-want +got):\n%s", diff)
	}
	if _, perr := invoke(t, caps, "read", `{"id":1}`); perr == nil || perr.Code != api.CodeInvalidParams {
		t.Errorf("read after delete: %v, want INVALID_PARAMS", perr)
	}
}

// handlerErrorCase is an invocation its handler refuses with
// INVALID_PARAMS naming field. needsDB marks those only the database can
// refuse (an unknown id), which ValidateParams lets through.
type handlerErrorCase struct {
	name, capability, params string
	field                    string
	needsDB                  bool
}

func handlerErrorCases() []handlerErrorCase {
	bigBody, _ := json.Marshal(strings.Repeat("b", MaxBody+1))
	return []handlerErrorCase{
		{"params not an object", "create", `["x"]`, "params", false},
		{"unknown parameter", "create", `{"title":"t","body":"b","colour":"red"}`, "params.colour", false},
		{"missing title", "create", `{"body":"b"}`, "params.title", false},
		{"missing body", "create", `{"title":"t"}`, "params.body", false},
		{"empty title", "create", `{"title":"","body":"b"}`, "params.title", false},
		{"title not a string", "create", `{"title":5,"body":"b"}`, "params.title", false},
		{"null title", "create", `{"title":null,"body":"b"}`, "params.title", false},
		{"body too long", "create", `{"title":"t","body":` + string(bigBody) + `}`, "params.body", false},
		{"tags not an array", "create", `{"title":"t","body":"b","tags":"a,b"}`, "params.tags", false},
		{"tag not a string", "create", `{"title":"t","body":"b","tags":["a",1]}`, "params.tags", false},
		{"empty tag", "create", `{"title":"t","body":"b","tags":[""]}`, "params.tags", false},
		{"limit zero", "list", `{"limit":0}`, "params.limit", false},
		{"limit too big", "list", `{"limit":501}`, "params.limit", false},
		{"limit fractional", "list", `{"limit":2.5}`, "params.limit", false},
		{"limit as string", "list", `{"limit":"10"}`, "params.limit", false},
		{"empty query", "search", `{"query":""}`, "params.query", false},
		{"missing query", "search", `{}`, "params.query", false},
		{"missing id", "read", `{}`, "params.id", false},
		{"id as string", "read", `{"id":"1"}`, "params.id", false},
		{"id fractional", "read", `{"id":1.5}`, "params.id", false},
		{"id overflows", "read", `{"id":1e300}`, "params.id", false},
		{"id zero", "read", `{"id":0}`, "params.id", false},
		{"unknown id", "read", `{"id":999}`, "params.id", true},
		{"nothing to update", "update", `{"id":1}`, "params", false},
		{"update empty title", "update", `{"id":1,"title":"  "}`, "params.title", false},
		{"update unknown id", "update", `{"id":999,"body":"b"}`, "params.id", true},
		{"delete unknown id", "delete", `{"id":999}`, "params.id", true},
	}
}

func TestHandlerErrors(t *testing.T) {
	st, _ := openTestStore(t)
	caps := capabilities(st)
	mustInvoke(t, caps, "create", `{"title":"exists","body":""}`)

	for _, tt := range handlerErrorCases() {
		t.Run(tt.name, func(t *testing.T) {
			res, perr := invoke(t, caps, tt.capability, tt.params)
			if perr == nil {
				t.Fatalf("%s(%.60s) = %v, want INVALID_PARAMS on %s", tt.capability, tt.params, res, tt.field)
			}
			if perr.Code != api.CodeInvalidParams {
				t.Errorf("code = %v, want INVALID_PARAMS", perr.Code)
			}
			if got := perr.DataMap()["field"]; got != tt.field {
				t.Errorf("data.field = %v (%v), want %q", got, perr, tt.field)
			}
		})
	}
}

// validate refuses what the handlers refuse, with the same error, except
// what only the database knows; it accepts what they accept.
func TestValidate(t *testing.T) {
	st, _ := openTestStore(t)
	caps := capabilities(st)
	mustInvoke(t, caps, "create", `{"title":"exists","body":""}`)
	for _, tt := range handlerErrorCases() {
		t.Run(tt.name, func(t *testing.T) {
			err := validate(t.Context(), tt.capability, json.RawMessage(tt.params))
			if tt.needsDB {
				if err != nil {
					t.Errorf("validate(%s, %s) = %v, want nil: only the database knows", tt.capability, tt.params, err)
				}
				return
			}
			_, want := invoke(t, caps, tt.capability, tt.params)
			if diff := cmp.Diff(want, api.AsError(err)); diff != "" {
				t.Errorf("validate(%s, %.60s) vs the handler's error (-handler +validate):\n%s", tt.capability, tt.params, diff)
			}
		})
	}
	for name, params := range map[string]string{
		"create": `{"title":"t","body":"","tags":["a"]}`,
		"delete": `{"id":1}`,
		"list":   ``,
		"read":   `{"id":2.0}`,
		"search": `{"query":"x","limit":3}`,
		"update": `{"id":1,"tags":[]}`,
	} {
		if err := validate(t.Context(), name, json.RawMessage(params)); err != nil {
			t.Errorf("validate(%s, %s) = %v, want nil", name, params, err)
		}
	}
	if _, ok := validators["nope"]; ok || len(validators) != len(accepts) {
		t.Errorf("validators cover %d capabilities, want the %d of accepts", len(validators), len(accepts))
	}
	for name := range accepts {
		if validators[name] == nil {
			t.Errorf("no validator for %s", name)
		}
	}
}

func TestState(t *testing.T) {
	st, _ := openTestStore(t)
	caps := capabilities(st)
	report := state(st, "/home/u/notes.db")
	got, err := report(t.Context())
	if diff := cmp.Diff(map[string]any{"notes": int64(0), "db": "/home/u/notes.db"}, got); err != nil || diff != "" {
		t.Errorf("state of an empty store: %v, (-want +got):\n%s", err, diff)
	}
	mustInvoke(t, caps, "create", `{"title":"a","body":""}`)
	mustInvoke(t, caps, "create", `{"title":"b","body":""}`)
	mustInvoke(t, caps, "delete", `{"id":1}`)
	if got, err := report(t.Context()); err != nil || got["notes"] != int64(1) {
		t.Errorf("state after two creates and a delete: %v, %v; want 1 note", got, err)
	}
	st.Close()
	if _, err := report(t.Context()); !errors.Is(err, api.ErrInternal) {
		t.Errorf("state of a closed store: %v, want INTERNAL_ERROR", err)
	}
}

func TestUnknownNoteError(t *testing.T) {
	st, _ := openTestStore(t)
	caps := capabilities(st)
	_, perr := invoke(t, caps, "read", `{"id":7}`)
	if perr == nil {
		t.Fatal("read of a missing note succeeded")
	}
	if perr.Code != api.CodeInvalidParams || perr.Message != "no note 7" {
		t.Errorf("error = %d %q, want INVALID_PARAMS %q", perr.Code, perr.Message, "no note 7")
	}
	if diff := cmp.Diff(map[string]any{"field": "params.id", "id": int64(7)}, perr.DataMap()); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
	// The data survives the trip to the agent as plain JSON.
	raw, err := json.Marshal(perr)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(raw), `{"code":-32602,"message":"no note 7","data":{"field":"params.id","id":7}}`; got != want {
		t.Errorf("wire form = %s, want %s", got, want)
	}
}

func TestCanceledContext(t *testing.T) {
	st, _ := openTestStore(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := capabilities(st)["list"](ctx, json.RawMessage(`{}`))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("list with a cancelled context: %v, want context.Canceled", err)
	}
}

// TestManifest keeps manifest.json, the handlers and the parameters they
// accept in step, and checks the manifest is one the daemon accepts.
func TestManifest(t *testing.T) {
	raw, err := os.ReadFile("manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	m, err := manifest.Parse(AppID, raw)
	if err != nil {
		t.Fatalf("manifest.json does not parse: %v", err)
	}
	if err := checkManifest(raw, capabilities(nil)); err != nil {
		t.Errorf("checkManifest(manifest.json): %v", err)
	}
	if m.Signature != "" {
		t.Errorf("manifest.json is a template and must stay unsigned, has signature %q", m.Signature)
	}
	var withID struct {
		AppID string `json:"app_id"`
	}
	if err := json.Unmarshal(raw, &withID); err != nil || withID.AppID != AppID {
		t.Errorf("manifest.json app_id = %q (%v), want %q", withID.AppID, err, AppID)
	}
	for _, c := range m.Capabilities {
		var declared []string
		for _, p := range c.Parameters {
			declared = append(declared, p.Name)
			if p.Description == "" {
				t.Errorf("%s: parameter %s has no description", c.Name, p.Name)
			}
		}
		if diff := cmp.Diff(accepts[c.Name], declared); diff != "" {
			t.Errorf("%s: parameters accepted by the handler vs declared (-handler +manifest):\n%s", c.Name, diff)
		}
		if c.Tier != 1 || c.Description == "" {
			t.Errorf("%s: tier %d, description %q; want tier 1 and a description", c.Name, c.Tier, c.Description)
		}
		wantTrust := api.TrustAuto
		if c.Name == "delete" {
			wantTrust = api.TrustConfirm
			if c.ConfirmationType != "delete" || c.UndoWindowMS != 10000 {
				t.Errorf("delete: confirmation_type %q, undo_window_ms %d; want delete, 10000", c.ConfirmationType, c.UndoWindowMS)
			}
		}
		if c.TrustLevel != wantTrust {
			t.Errorf("%s: trust_level %q, want %q", c.Name, c.TrustLevel, wantTrust)
		}
	}
	names := make([]string, 0, len(accepts))
	for name := range accepts {
		names = append(names, name)
	}
	slices.Sort(names)
	handlers := make([]string, 0, len(accepts))
	for name := range capabilities(nil) {
		handlers = append(handlers, name)
	}
	slices.Sort(handlers)
	if diff := cmp.Diff(names, handlers); diff != "" {
		t.Errorf("accepts vs handlers (-accepts +handlers):\n%s", diff)
	}
}

func TestCheckManifest(t *testing.T) {
	caps := capabilities(nil)
	tests := []struct {
		name, manifest, wantErr string
	}{
		{"no app_id is fine", `{"capabilities":[{"name":"create"},{"name":"delete"},{"name":"list"},{"name":"read"},{"name":"search"},{"name":"update"}]}`, ""},
		{"other app", `{"app_id":"org.example.mail","capabilities":[]}`, `app_id is "org.example.mail"`},
		{"extra capability", `{"capabilities":[{"name":"create"},{"name":"delete"},{"name":"list"},{"name":"read"},{"name":"search"},{"name":"update"},{"name":"share"}]}`, `declares capability "share"`},
		{"missing capability", `{"capabilities":[{"name":"create"},{"name":"delete"},{"name":"list"},{"name":"read"},{"name":"search"}]}`, `does not declare capability "update"`},
		{"not JSON", `nope`, "not a manifest object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkManifest([]byte(tt.manifest), caps)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
