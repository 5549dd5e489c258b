package core

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/policy"
	"github.com/pcp-dev/pcp/internal/store"
)

type pingService struct{}

func (pingService) AppID() string { return "pcp.bench" }
func (pingService) Manifest() *api.Manifest {
	f := false
	return &api.Manifest{Version: "1.0", Capabilities: []api.CapabilityDecl{{Name: "ping", Tier: 1, TrustLevel: api.TrustAuto,
		Parameters: []api.ParamDecl{{Name: "payload", Type: api.TypeAny, Required: &f}}}}}
}
func (pingService) Invoke(ctx context.Context, c *api.Capability, _ api.InvocationSource, params json.RawMessage) (*api.CapabilityResult, error) {
	return &api.CapabilityResult{Status: api.StatusSuccess, Data: params}, nil
}

// BenchmarkInvokeInProcess is the core's own cost of an invocation,
// audit commit included, without any wire: the spec's in-process
// transport. BenchmarkAuditAppend beside it is the commit alone.
func BenchmarkInvokeInProcess(b *testing.B) {
	st, err := store.Open(context.Background(), filepath.Join(b.TempDir(), "pcp.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	br, err := New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := br.AddService(pingService{}); err != nil {
		b.Fatal(err)
	}
	p := &api.InvokeCapabilityParams{CapabilityID: "pcp.bench.ping", AppID: "pcp.bench", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"payload":{"n":1}}`)}
	ctx := context.Background()
	b.ReportAllocs()
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := br.InvokeCapability(ctx, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.SetParallelism(64)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := br.InvokeCapability(ctx, p); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkSafetyChecks measures what the safety checks (rate limits on
// both scopes, a policy with app, capability and source rules) add to an
// auto invocation, against the same broker with limits off and no policy
// file, in the same run.
func BenchmarkSafetyChecks(b *testing.B) {
	pol, err := policy.Parse("policy.toml", []byte(`
[defaults]
rate_per_app = 1e9
rate_per_connection = 1e9
[apps."pcp.bench"]
timeout = "20s"
[apps."pcp.bench".capabilities.ping]
trust_level = "auto"
[sources.SystemIntelligence]
trust_level = "auto"
`))
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		limits *RateLimits
		pol    *policy.Policy
	}{
		{"bare", &RateLimits{}, nil},
		{"checks", &RateLimits{PerApp: 1e9, PerAppBurst: 1e9, PerConnection: 1e9, PerConnectionBurst: 1e9}, pol},
	} {
		b.Run(tc.name, func(b *testing.B) {
			st, err := store.Open(context.Background(), filepath.Join(b.TempDir(), "pcp.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			br, err := New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st, RateLimits: tc.limits, Policy: tc.pol})
			if err != nil {
				b.Fatal(err)
			}
			defer br.Close()
			br.AddService(pingService{})
			ctx := WithSession(context.Background(), br.OpenSession(SessionInfo{Transport: "unix"}, Endpoint{}))
			p := &api.InvokeCapabilityParams{CapabilityID: "pcp.bench.ping", AppID: "pcp.bench", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"payload":1}`)}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := br.InvokeCapability(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkQueryCapabilities measures what listing the apps an
// accessibility adapter reaches (20 apps, 5 generic capabilities each,
// the adapter answering from memory) adds to query.capabilities, against
// the registry's capabilities alone on the same broker in the same run.
func BenchmarkQueryCapabilities(b *testing.B) {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	br, err := New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st, LivenessInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer br.Close()
	if err := br.AddService(pingService{}); err != nil {
		b.Fatal(err)
	}
	decls := make([]api.CapabilityDecl, 0, 5)
	for _, a := range []string{"activate", "read_text", "scroll", "select", "set_value"} {
		decls = append(decls, api.CapabilityDecl{Name: a, Tier: 2, TrustLevel: api.TrustConfirm, Description: a,
			Parameters: []api.ParamDecl{{Name: "element_id", Type: api.TypeString}}})
	}
	var reach []ReachableApp
	for i := range 20 {
		reach = append(reach, ReachableApp{AppID: "atspi.app-" + string(rune('a'+i)), Capabilities: decls})
	}
	if err := br.AddAccessibilityAdapter(&listingAccess{fakeAccess: &fakeAccess{id: "atspi", calls: &calls{}}, apps: reach}, 1); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for _, bc := range []struct {
		name string
		p    *api.QueryCapabilitiesParams
		want int
	}{
		{"registry", &api.QueryCapabilitiesParams{Registered: true}, 1},
		{"with-reached", &api.QueryCapabilitiesParams{}, 1 + 20*5},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := br.QueryCapabilities(ctx, bc.p)
				if err != nil || len(res.Capabilities) != bc.want {
					b.Fatalf("%d capabilities, %v; want %d", len(res.Capabilities), err, bc.want)
				}
			}
		})
	}
}
