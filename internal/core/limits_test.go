package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

func limitedBroker(t *testing.T, rl RateLimits) (*Broker, *testkit.Clock) {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := testkit.NewClock(time.Unix(1700000000, 0))
	b, err := New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st, AllowUnsigned: true, RateLimits: &rl, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	for _, app := range []string{"org.example.a", "org.example.b"} {
		peer := &recPeer{call: func(ctx context.Context, method string, params any) (json.RawMessage, error) {
			return json.RawMessage(`{"status":"success"}`), nil
		}}
		ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, peer.endpoint()))
		m := `{"version":"1.0","capabilities":[{"name":"go","tier":1,"trust_level":"auto"}],"signature":""}`
		if _, err := b.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: app, Manifest: json.RawMessage(m)}); err != nil {
			t.Fatal(err)
		}
	}
	return b, clk
}

func invokeGo(ctx context.Context, b *Broker, app string) error {
	_, err := b.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: app + ".go", AppID: app, Source: api.SourceSystemIntelligence})
	return err
}

func TestPerAppLimitLeavesOthersAlone(t *testing.T) {
	b, clk := limitedBroker(t, RateLimits{PerApp: 10, PerAppBurst: 5})
	agent := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	for i := range 5 {
		if err := invokeGo(agent, b, "org.example.a"); err != nil {
			t.Fatalf("invocation %d within the burst: %v", i, err)
		}
	}
	err := invokeGo(agent, b, "org.example.a")
	if !errors.Is(err, api.ErrRateLimited) {
		t.Fatalf("sixth invocation: got %v, want RATE_LIMITED", err)
	}
	d := err.(*api.Error).DataMap()
	if d["scope"] != "app" || d["app_id"] != "org.example.a" || fmt.Sprint(d["retry_after_ms"]) != "100" {
		t.Errorf("data = %v, want scope app, app_id org.example.a, retry_after_ms 100", d)
	}
	// Another app is unaffected.
	if err := invokeGo(agent, b, "org.example.b"); err != nil {
		t.Errorf("other app: %v", err)
	}
	// After the hinted wait the app accepts again.
	clk.Advance(100 * time.Millisecond)
	if err := invokeGo(agent, b, "org.example.a"); err != nil {
		t.Errorf("after retry_after_ms: %v", err)
	}
}

func TestPerConnectionLimitLeavesOtherConnectionsAlone(t *testing.T) {
	b, _ := limitedBroker(t, RateLimits{PerConnection: 1, PerConnectionBurst: 3})
	flood := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	calm := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	var limited int
	for range 50 {
		if err := invokeGo(flood, b, "org.example.a"); errors.Is(err, api.ErrRateLimited) {
			limited++
			if s := err.(*api.Error).DataMap()["scope"]; s != "connection" {
				t.Fatalf("scope = %v, want connection", s)
			}
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if limited != 47 {
		t.Errorf("%d of 50 limited, want 47 (burst 3)", limited)
	}
	if err := invokeGo(calm, b, "org.example.a"); err != nil {
		t.Errorf("another connection was limited: %v", err)
	}
}

// A flood of rejections writes one audit entry a second, which counts
// the rejections it stands for.
func TestRejectionsDoNotFloodTheAudit(t *testing.T) {
	b, clk := limitedBroker(t, RateLimits{PerConnection: 1, PerConnectionBurst: 1})
	ctx := WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix"}, (&recPeer{}).endpoint()))
	before, _ := b.AuditVerify(context.Background())
	for range 1000 {
		invokeGo(ctx, b, "org.example.a")
	}
	clk.Advance(time.Second)
	invokeGo(ctx, b, "org.example.a") // allowed: a token came back
	invokeGo(ctx, b, "org.example.a") // limited, audited with the count
	after, _ := b.AuditVerify(context.Background())
	if n := after.Entries - before.Entries; n != 4 {
		t.Errorf("%d audit entries for 1002 invocations, want 4 (1 success, 1 rejection, 1 success, 1 rejection summary)", n)
	}
	tail, _ := b.AuditTail(context.Background(), &api.AuditTailParams{Limit: 1})
	var detail map[string]any
	json.Unmarshal(tail.Entries[0].Detail, &detail)
	if tail.Entries[0].Outcome != "RATE_LIMITED" || detail["suppressed_since_last_entry"] != float64(998) {
		t.Errorf("last entry = %s %s, want RATE_LIMITED with 998 suppressed", tail.Entries[0].Outcome, tail.Entries[0].Detail)
	}
}
