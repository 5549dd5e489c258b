package client

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/pcp-dev/pcp/api"
)

func TestAppHandle(t *testing.T) {
	a := &App{AppID: "org.example.todo", Capabilities: map[string]CapabilityFunc{
		"add": func(ctx context.Context, params json.RawMessage) (any, error) {
			var p struct{ Text string }
			json.Unmarshal(params, &p)
			if p.Text == "" {
				return nil, api.InvalidParam("params.text", "empty")
			}
			return map[string]string{"added": p.Text}, nil
		},
		"raw": func(ctx context.Context, params json.RawMessage) (any, error) {
			return &api.CapabilityResult{Status: api.StatusPartial}, nil
		},
	}}
	ctx := context.Background()
	invoke := func(capID, params string) (any, error) {
		raw, _ := json.Marshal(api.InvokeCapabilityParams{CapabilityID: capID, AppID: "org.example.todo", Source: api.SourceSystemIntelligence, Params: json.RawMessage(params)})
		return a.handle(ctx, api.MethodInvokeCapability, raw)
	}
	res, err := invoke("org.example.todo.add", `{"text":"milk"}`)
	if r, ok := res.(*api.CapabilityResult); err != nil || !ok || r.Status != api.StatusSuccess || string(r.Data) != `{"added":"milk"}` {
		t.Errorf("add: %#v, %v", res, err)
	}
	if _, err := invoke("org.example.todo.add", `{}`); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("handler error: got %v, want INVALID_PARAMS", err)
	}
	if res, err := invoke("org.example.todo.raw", `{}`); err != nil || res.(*api.CapabilityResult).Status != api.StatusPartial {
		t.Errorf("a handler's own CapabilityResult passes through: %#v, %v", res, err)
	}
	for _, id := range []string{"org.example.todo.fly", "org.other.add", "org.example.todo."} {
		if _, err := invoke(id, `{}`); !errors.Is(err, api.ErrCapabilityNotFound) {
			t.Errorf("%s: got %v, want CAPABILITY_NOT_FOUND", id, err)
		}
	}
	if res, err := a.handle(ctx, api.MethodHealthCheck, nil); err != nil || res == nil {
		t.Errorf("liveness check: %v, %v", res, err)
	}
	if _, err := a.handle(ctx, "query.surface", nil); !errors.Is(err, api.ErrMethodNotFound) {
		t.Errorf("other methods: got %v, want METHOD_NOT_FOUND", err)
	}
}
