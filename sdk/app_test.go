package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
)

type note struct {
	Title string `json:"title"`
}

func newTestApp() *App {
	return &App{
		AppID:          testApp,
		SignedManifest: testManifest,
		Capabilities: map[string]CapabilityFunc{
			"add": func(ctx context.Context, params json.RawMessage) (any, error) {
				var p struct{ Text string }
				json.Unmarshal(params, &p)
				if p.Text == "" {
					return nil, api.MissingParam("params.text")
				}
				return map[string]string{"added": p.Text}, nil
			},
			"nil":       func(context.Context, json.RawMessage) (any, error) { return nil, nil },
			"typed-nil": func(context.Context, json.RawMessage) (any, error) { return (*note)(nil), nil },
			"nil-result": func(context.Context, json.RawMessage) (any, error) {
				return (*api.CapabilityResult)(nil), nil
			},
			"deferred": func(context.Context, json.RawMessage) (any, error) {
				return &api.CapabilityResult{Status: api.StatusDeferred, Data: json.RawMessage(`{"job":"j1"}`)}, nil
			},
			"value-result": func(context.Context, json.RawMessage) (any, error) {
				return api.CapabilityResult{Status: api.StatusPartial}, nil
			},
			"raw": func(context.Context, json.RawMessage) (any, error) { return json.RawMessage(`[1, 2]`), nil },
		},
	}
}

func TestAppInvoke(t *testing.T) {
	a := newTestApp()
	tests := []struct {
		name, capID, params string
		want                *api.CapabilityResult
		wantErr             error
	}{
		{"add", capPrefix + "add", `{"text":"milk"}`, &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"added":"milk"}`)}, nil},
		{"", capPrefix + "add", `{"text":"eggs"}`, &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"added":"eggs"}`)}, nil},
		{"add", capPrefix + "add", `{}`, nil, api.ErrInvalidParams},
		{"nil", capPrefix + "nil", ``, &api.CapabilityResult{Status: api.StatusSuccess}, nil},
		{"typed-nil", capPrefix + "typed-nil", ``, &api.CapabilityResult{Status: api.StatusSuccess}, nil},
		{"nil-result", capPrefix + "nil-result", ``, &api.CapabilityResult{Status: api.StatusSuccess}, nil},
		{"deferred", capPrefix + "deferred", ``, &api.CapabilityResult{Status: api.StatusDeferred, Data: json.RawMessage(`{"job":"j1"}`)}, nil},
		{"value-result", capPrefix + "value-result", ``, &api.CapabilityResult{Status: api.StatusPartial}, nil},
		{"raw", capPrefix + "raw", ``, &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`[1,2]`)}, nil},
		{"fly", capPrefix + "fly", `{}`, nil, api.ErrCapabilityNotFound},
		{"", "org.other.add", `{}`, nil, api.ErrCapabilityNotFound},
		{"", capPrefix, `{}`, nil, api.ErrCapabilityNotFound},
	}
	for _, tt := range tests {
		got, err := a.Invoke(t.Context(), &Invocation{CapabilityID: tt.capID, Name: tt.name, Source: api.SourceSystemIntelligence, Params: json.RawMessage(tt.params)})
		if !errors.Is(err, tt.wantErr) || (tt.wantErr != nil) != (err != nil) {
			t.Errorf("Invoke(%s): error %v, want %v", tt.capID, err, tt.wantErr)
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("Invoke(%s) (-want +got):\n%s", tt.capID, diff)
		}
	}
}

func TestAppValidateParams(t *testing.T) {
	a := newTestApp()
	ctx := t.Context()
	if err := a.ValidateParams(ctx, capPrefix+"add", nil); err != nil {
		t.Errorf("no Validate: %v, want valid", err)
	}
	var gotName string
	a.Validate = func(ctx context.Context, name string, params json.RawMessage) error {
		gotName = name
		if string(params) != `{"text":"x"}` {
			return api.InvalidParam("params.text", "wrong")
		}
		return nil
	}
	if err := a.ValidateParams(ctx, capPrefix+"add", json.RawMessage(`{"text":"x"}`)); err != nil || gotName != "add" {
		t.Errorf("valid params: %v, name %q; want nil, add", err, gotName)
	}
	if err := a.ValidateParams(ctx, capPrefix+"add", json.RawMessage(`{}`)); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("invalid params: %v, want INVALID_PARAMS", err)
	}
	for _, id := range []string{capPrefix + "fly", "org.other.add", capPrefix} {
		if err := a.ValidateParams(ctx, id, nil); !errors.Is(err, api.ErrCapabilityNotFound) {
			t.Errorf("ValidateParams(%s): %v, want CAPABILITY_NOT_FOUND", id, err)
		}
	}
}

func TestAppQueryState(t *testing.T) {
	a := newTestApp()
	ctx := t.Context()
	if got, err := a.QueryState(ctx, nil); err != nil || string(got) != `{}` {
		t.Errorf("no State: %s, %v; want {}", got, err)
	}
	a.State = func(context.Context) (map[string]any, error) {
		return map[string]any{"notes": 3, "db": "/x.db", "tags": []string{"a"}}, nil
	}
	tests := []struct {
		keys []string
		want string
	}{
		{nil, `{"db":"/x.db","notes":3,"tags":["a"]}`},
		{[]string{"notes"}, `{"notes":3}`},
		{[]string{"notes", "db", "nope"}, `{"db":"/x.db","notes":3}`},
		{[]string{"nope"}, `{}`},
	}
	for _, tt := range tests {
		got, err := a.QueryState(ctx, tt.keys)
		if err != nil || string(got) != tt.want {
			t.Errorf("QueryState(%q) = %s, %v; want %s", tt.keys, got, err, tt.want)
		}
	}
	a.State = func(context.Context) (map[string]any, error) { return nil, nil }
	if got, err := a.QueryState(ctx, nil); err != nil || string(got) != `{}` {
		t.Errorf("nil state: %s, %v; want {}", got, err)
	}
	a.State = func(context.Context) (map[string]any, error) { return nil, errors.New("db locked") }
	if _, err := a.QueryState(ctx, nil); err == nil || err.Error() != "db locked" {
		t.Errorf("failing State: %v, want db locked", err)
	}
	a.State = func(context.Context) (map[string]any, error) { return map[string]any{"c": make(chan int)}, nil }
	if _, err := a.QueryState(ctx, nil); err == nil {
		t.Error("unencodable state: no error")
	}
}

func TestAppManifestAndShutdown(t *testing.T) {
	a := newTestApp()
	if got, err := a.Manifest(t.Context()); err != nil || string(got) != string(testManifest) {
		t.Errorf("Manifest() = %s, %v; want the signed manifest verbatim", got, err)
	}
	if err := a.Shutdown(t.Context(), "bye"); err != nil {
		t.Errorf("Shutdown without OnShutdown: %v", err)
	}
	var reason string
	a.OnShutdown = func(r string) { reason = r }
	if err := a.Shutdown(t.Context(), "bye"); err != nil || reason != "bye" {
		t.Errorf("Shutdown: %v, OnShutdown(%q); want nil, bye", err, reason)
	}
	if _, err := (&App{AppID: testApp}).Manifest(t.Context()); err == nil {
		t.Error("Manifest of an App without one: no error")
	}
}
