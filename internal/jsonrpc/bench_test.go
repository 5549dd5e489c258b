package jsonrpc

import (
	"bufio"
	"context"
	"encoding/json"
	"testing"
)

// BenchmarkConnCall is one JSON-RPC round trip between two Conns over a
// Unix socket pair in this process; BenchmarkRawLineEcho is the same
// bytes echoed by a bare bufio loop, the baseline measured in the same run.
// handoffs serves the request on a worker and reads the answer on the
// client's read loop (as every Conn did before InlineBudget and
// ReadOnDemand); direct serves it on the server's reading goroutine and
// reads the answer on the calling one.
func BenchmarkConnCall(b *testing.B) {
	for _, mode := range []struct {
		name   string
		server Options
		client Options
	}{
		{"handoffs", Options{InlineBudget: -1}, Options{}},
		{"direct", Options{}, Options{ReadOnDemand: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			a, c := pair(&testing.T{})
			so := mode.server
			so.Handler = HandlerFunc(func(ctx context.Context, m *Message) (any, error) {
				return m.Params, nil
			})
			srv := NewConn(c, so)
			cli := NewConn(a, mode.client)
			go srv.Run()
			go cli.Run()
			defer srv.Close()
			defer cli.Close()
			params := json.RawMessage(`{"capability_id":"pcp.inspection.ping","app_id":"pcp.inspection","source":"SystemIntelligence","params":{"payload":1}}`)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				var out json.RawMessage
				if err := cli.Call(ctx, "invoke.capability", params, &out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRawLineEcho(b *testing.B) {
	a, c := pair(&testing.T{})
	defer a.Close()
	go func() {
		rd := bufio.NewReader(c)
		for {
			line, err := rd.ReadBytes('\n')
			if err != nil {
				return
			}
			c.Write(line)
		}
	}()
	line := []byte(`{"jsonrpc":"2.0","id":1,"method":"invoke.capability","params":{"capability_id":"pcp.inspection.ping","app_id":"pcp.inspection","source":"SystemIntelligence","params":{"payload":1}}}` + "\n")
	rd := bufio.NewReader(a)
	b.ReportAllocs()
	for b.Loop() {
		a.Write(line)
		if _, err := rd.ReadBytes('\n'); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecode is the cost of reading one typical invoke request.
func BenchmarkDecode(b *testing.B) {
	line := []byte(`{"jsonrpc":"2.0","id":12345,"method":"invoke.capability","params":{"capability_id":"pcp.inspection.ping","app_id":"pcp.inspection","source":"SystemIntelligence","params":{"payload":{"n":1}}}}`)
	b.ReportAllocs()
	for b.Loop() {
		d := Decode(line)
		if len(d.Messages) != 1 {
			b.Fatal("not decoded")
		}
	}
}
