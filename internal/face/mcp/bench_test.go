package mcp

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/services/inspection"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// The benchmarks here are one round trip of the same call, in one run,
// each over a Unix socket pair in this process, one call at a time:
//
//   - BenchmarkMCPFaceInvoke: tools/call of pcp_invoke on
//     pcp.inspection.ping through this face (the go-sdk client), the
//     whole invocation pipeline and an audit entry committed to SQLite on
//     disk before each answer;
//   - BenchmarkRPCFaceInvoke: invoke.capability of the same capability on
//     PCP's JSON-RPC face (client.Client), same pipeline and audit;
//   - BenchmarkBareSDKCallTool: tools/call of an equivalent ping tool on
//     a bare go-sdk server (typed input and output, as the SDK documents
//     tools), the floor the face is measured against.
//
// go test -run '^$' -bench . -benchmem ./internal/face/mcp
const benchPayload = `{"payload":"the quick brown fox jumps over"}`

// benchBroker is a broker on a SQLite file, serving pcp.inspection, with
// no rate limit.
func benchBroker(b *testing.B) *core.Broker {
	st, err := store.Open(context.Background(), filepath.Join(b.TempDir(), "pcp.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	br, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: b.TempDir(),
		RateLimits: &core.RateLimits{}, LivenessInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(br.Close)
	if err := br.AddService(inspection.New(br)); err != nil {
		b.Fatal(err)
	}
	return br
}

func benchCallTool(b *testing.B, cs *sdk.ClientSession, params *sdk.CallToolParams) {
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		res, err := cs.CallTool(ctx, params)
		if err != nil || res.IsError {
			b.Fatalf("tools/call: %+v, %v", res, err)
		}
	}
}

func connectClient(b *testing.B, t sdk.Transport) *sdk.ClientSession {
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(), t, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	return cs
}

func BenchmarkMCPFaceInvoke(b *testing.B) {
	face := New(benchBroker(b), Options{})
	c, srv := testkit.SocketPair(b)
	done := make(chan struct{})
	go func() { defer close(done); face.ServeConn(srv, agentInfo) }()
	b.Cleanup(func() { c.Close(); <-done })
	cs := connectClient(b, &sdk.IOTransport{Reader: c, Writer: c})
	benchCallTool(b, cs, &sdk.CallToolParams{Name: "pcp_invoke",
		Arguments: json.RawMessage(`{"capability_id":"pcp.inspection.ping","params":` + benchPayload + `}`)})
}

func BenchmarkRPCFaceInvoke(b *testing.B) {
	face := rpc.NewServer(benchBroker(b), rpc.Options{})
	c, srv := testkit.SocketPair(b)
	done := make(chan struct{})
	go func() { defer close(done); face.ServeConn(srv, agentInfo) }()
	cl := client.New(c, client.Options{})
	b.Cleanup(func() { cl.Close(); <-done })
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		p := api.InvokeCapabilityParams{CapabilityID: "pcp.inspection.ping", AppID: "pcp.inspection", Source: api.SourceSystemIntelligence, Params: json.RawMessage(benchPayload)}
		if res, err := cl.InvokeCapability(ctx, &p); err != nil || res.Status != api.StatusSuccess {
			b.Fatalf("invoke: %+v, %v", res, err)
		}
	}
}

type pingIn struct {
	Payload any `json:"payload,omitempty" jsonschema:"any JSON value, returned as is"`
}

type pingOut struct {
	Pong    bool `json:"pong"`
	Payload any  `json:"payload,omitempty"`
}

func BenchmarkBareSDKCallTool(b *testing.B) {
	srv := sdk.NewServer(&sdk.Implementation{Name: "bench", Version: "1"}, nil)
	sdk.AddTool(srv, &sdk.Tool{Name: "ping", Description: "Echoes payload."},
		func(_ context.Context, _ *sdk.CallToolRequest, in pingIn) (*sdk.CallToolResult, pingOut, error) {
			return nil, pingOut{Pong: true, Payload: in.Payload}, nil
		})
	c, sc := testkit.SocketPair(b)
	ss, err := srv.Connect(context.Background(), &sdk.IOTransport{Reader: sc, Writer: sc}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ss.Close(); ss.Wait() })
	cs := connectClient(b, &sdk.IOTransport{Reader: c, Writer: c})
	benchCallTool(b, cs, &sdk.CallToolParams{Name: "ping", Arguments: json.RawMessage(benchPayload)})
}
