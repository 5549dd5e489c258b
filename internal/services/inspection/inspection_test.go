package inspection

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/store"
)

func broker(t *testing.T) *core.Broker {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.AddService(New(b)); err != nil {
		t.Fatal(err)
	}
	return b
}

func invoke(t *testing.T, b *core.Broker, name, params string) (json.RawMessage, error) {
	t.Helper()
	p := &api.InvokeCapabilityParams{CapabilityID: AppID + "." + name, AppID: AppID, Source: api.SourceSystemIntelligence}
	if params != "" {
		p.Params = json.RawMessage(params)
	}
	res, err := b.InvokeCapability(context.Background(), p)
	if err != nil {
		return nil, err
	}
	if res.Status != api.StatusSuccess {
		t.Fatalf("%s: status %q", name, res.Status)
	}
	return res.Data, nil
}

func TestInspection(t *testing.T) {
	b := broker(t)

	data, err := invoke(t, b, "describe_registry", "")
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		Apps []struct {
			AppID          string           `json:"app_id"`
			State          string           `json:"state"`
			CapabilityList []api.Capability `json:"capability_list"`
		} `json:"apps"`
	}
	if err := json.Unmarshal(data, &reg); err != nil {
		t.Fatal(err)
	}
	if len(reg.Apps) != 1 || reg.Apps[0].AppID != AppID || reg.Apps[0].State != api.AppBuiltin || len(reg.Apps[0].CapabilityList) != len(New(b).Manifest().Capabilities) {
		t.Errorf("describe_registry = %s", data)
	}

	data, err = invoke(t, b, "describe_capability", `{"capability_id":"pcp.inspection.ping"}`)
	if err != nil {
		t.Fatal(err)
	}
	var c api.Capability
	json.Unmarshal(data, &c)
	if c.ID != "pcp.inspection.ping" || !c.Available || c.TrustLevel != api.TrustAuto {
		t.Errorf("describe_capability = %s", data)
	}
	if _, err := invoke(t, b, "describe_capability", `{"capability_id":"org.none.x"}`); !errors.Is(err, api.ErrCapabilityNotFound) {
		t.Errorf("unknown capability: got %v, want CAPABILITY_NOT_FOUND", err)
	}
	if _, err := invoke(t, b, "describe_registry", `{"app_id":"org.none"}`); !errors.Is(err, api.ErrAppNotFound) {
		t.Errorf("unknown app: got %v, want APP_NOT_FOUND", err)
	}

	data, err = invoke(t, b, "ping", `{"payload":{"n":[1,2]}}`)
	if err != nil || string(data) != `{"pong":true,"payload":{"n":[1,2]}}` {
		t.Errorf("ping = %s, %v", data, err)
	}

	data, err = invoke(t, b, "recent_events", `{"limit":5}`)
	if err != nil {
		t.Fatal(err)
	}
	var evs api.EventsHistoryResult
	json.Unmarshal(data, &evs)
	if len(evs.Events) == 0 || evs.Events[len(evs.Events)-1].Type != api.EventCapabilityInvoked {
		t.Errorf("recent_events = %s, want the invocations just made", data)
	}
	for _, bad := range []string{`{"limit":0.5}`, `{"limit":5000}`, `{"limit":-1}`} {
		if _, err := invoke(t, b, "recent_events", bad); !errors.Is(err, api.ErrInvalidParams) {
			t.Errorf("recent_events %s: got %v, want INVALID_PARAMS", bad, err)
		}
	}

	data, err = invoke(t, b, "health", "")
	if err != nil {
		t.Fatal(err)
	}
	var h api.HealthResult
	json.Unmarshal(data, &h)
	if h.Status != api.HealthOK || h.Capabilities != len(New(b).Manifest().Capabilities) {
		t.Errorf("health = %s", data)
	}
	if _, err := invoke(t, b, "list_apps", ""); err != nil {
		t.Error(err)
	}
}
