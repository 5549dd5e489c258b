package scomp

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// The benchmarks here measure, in one run, on one broker without rate
// limits serving pcp.inspection (an in-process capability, its audit in
// memory):
//
//   - BenchmarkScompEval1000: one eval whose code calls
//     pcp_inspection_ping 1,000 times, over WebSocket on a Unix socket;
//   - BenchmarkRPC1000Invokes: 1,000 invoke.capability calls of the same
//     capability from one client of the JSON-RPC face (the goal: the eval
//     at least 3x faster in total);
//   - BenchmarkScompColdSession: connect, handshake and a first eval;
//   - BenchmarkScompBindingCall and BenchmarkCoreInvoke: one binding call
//     inside an eval against the core's in-process invoke (the goal: at
//     most 1.5x).
//
// go test -run '^$' -bench . -benchmem ./internal/face/scomp
const benchCalls = 1000

func benchSession(b *testing.B) (*websocket.Conn, func(code string) json.RawMessage) {
	br, _ := newBrokerStore(b, &core.RateLimits{})
	path, stop := unixServer(b, New(br, Options{EvalTimeout: time.Minute}))
	b.Cleanup(stop)
	ctx := context.Background()
	ws, _, err := dialUnix(ctx, path, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ws.CloseNow() })
	id := 0
	call := func(method, params string) json.RawMessage {
		id++
		if err := ws.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, params)); err != nil {
			b.Fatal(err)
		}
		_, data, err := ws.Read(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var m struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		json.Unmarshal(data, &m)
		if m.Error != nil {
			b.Fatalf("%s: %s", method, m.Error)
		}
		return m.Result
	}
	call("handshake", `{"protocol":"0.1","bindings":[]}`)
	return ws, func(code string) json.RawMessage {
		raw, _ := json.Marshal(map[string]string{"code": code})
		return call("eval", string(raw))
	}
}

// loopCode is a block, so that its let is new at each eval of a session.
var loopCode = fmt.Sprintf(`{ let n = 0; for (let i = 0; i < %d; i++) { if ((await pcp_inspection_ping({payload: i})).status === "success") n++; } n }`, benchCalls)

func BenchmarkScompEval1000(b *testing.B) {
	_, eval := benchSession(b)
	want := fmt.Sprintf(`{"value":%d}`, benchCalls)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if got := string(eval(loopCode)); got != want {
			b.Fatalf("eval: %s", got)
		}
	}
}

func BenchmarkRPC1000Invokes(b *testing.B) {
	br, _ := newBrokerStore(b, &core.RateLimits{})
	face := rpc.NewServer(br, rpc.Options{})
	c, srv := testkit.SocketPair(b)
	done := make(chan struct{})
	go func() {
		defer close(done)
		face.ServeConn(srv, core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 4242})
	}()
	cl := client.New(c, client.Options{})
	b.Cleanup(func() { cl.Close(); <-done })
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i := range benchCalls {
			p := api.InvokeCapabilityParams{CapabilityID: "pcp.inspection.ping", AppID: "pcp.inspection", Source: api.SourceSystemIntelligence,
				Params: fmt.Appendf(nil, `{"payload":%d}`, i)}
			if res, err := cl.InvokeCapability(ctx, &p); err != nil || res.Status != api.StatusSuccess {
				b.Fatalf("invoke: %+v, %v", res, err)
			}
		}
	}
}

func BenchmarkScompColdSession(b *testing.B) {
	br, _ := newBrokerStore(b, &core.RateLimits{})
	path, stop := unixServer(b, New(br, Options{}))
	b.Cleanup(stop)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		ws, _, err := dialUnix(ctx, path, nil)
		if err != nil {
			b.Fatal(err)
		}
		for _, m := range []string{`{"jsonrpc":"2.0","id":1,"method":"handshake","params":{"protocol":"0.1","bindings":[]}}`,
			`{"jsonrpc":"2.0","id":2,"method":"eval","params":{"code":"1 + 1"}}`} {
			if err := ws.Write(ctx, websocket.MessageText, []byte(m)); err != nil {
				b.Fatal(err)
			}
			if _, _, err := ws.Read(ctx); err != nil {
				b.Fatal(err)
			}
		}
		ws.Close(websocket.StatusNormalClosure, "")
	}
}

// BenchmarkScompBindingCall is one binding call inside an eval: an eval
// of 1,000 calls, reported per call.
func BenchmarkScompBindingCall(b *testing.B) {
	_, eval := benchSession(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		eval(loopCode)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchCalls), "ns/call")
}

// BenchmarkCoreInvoke is the core's in-process invoke of the same
// capability with an agent's session, reported per call.
func BenchmarkCoreInvoke(b *testing.B) {
	br, _ := newBrokerStore(b, &core.RateLimits{})
	sess := br.OpenSession(core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 4242}, core.Endpoint{})
	b.Cleanup(sess.Close)
	ctx := core.WithSession(context.Background(), sess)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for i := range benchCalls {
			p := api.InvokeCapabilityParams{CapabilityID: "pcp.inspection.ping", AppID: "pcp.inspection", Source: api.SourceSystemIntelligence,
				Params: fmt.Appendf(nil, `{"payload":%d}`, i)}
			if res, err := br.InvokeCapability(ctx, &p); err != nil || res.Status != api.StatusSuccess {
				b.Fatalf("invoke: %+v, %v", res, err)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchCalls), "ns/call")
}
