package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
)

// TestEventsWait: pcp_events with wait_ms returns the next matching
// event, through a subscription that ends with the call, or times out.
func TestEventsWait(t *testing.T) {
	b := newBroker(t, nil)
	face := New(b, Options{})
	defer face.Close()
	c := serveFace(t, face)
	armed := make(chan struct{}, 1)
	opts := &sdk.ClientOptions{ProgressNotificationHandler: func(context.Context, *sdk.ProgressNotificationClientRequest) {
		select {
		case armed <- struct{}{}:
		default:
		}
	}}
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "t", Version: "1"}, opts).Connect(context.Background(), &sdk.IOTransport{Reader: c, Writer: c}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx := context.Background()
	type answer struct {
		res *sdk.CallToolResult
		err error
	}
	got := make(chan answer, 1)
	go func() {
		params := &sdk.CallToolParams{Name: "pcp_events", Arguments: map[string]any{"types": []string{api.EventSurfaceFocusChanged}, "wait_ms": 20000}}
		params.SetProgressToken("wait-1")
		res, err := cs.CallTool(ctx, params)
		got <- answer{res, err}
	}()
	// The events are published once the call says its wait is armed.
	select {
	case <-armed:
	case a := <-got:
		t.Fatalf("pcp_events answered before waiting: %+v, %v", a.res, a.err)
	case <-time.After(10 * time.Second):
		t.Fatal("pcp_events did not arm its wait within 10s")
	}
	b.Publish(api.EventCapabilityInvoked, "org.example.other", "", map[string]any{"x": 1})
	b.Publish(api.EventSurfaceFocusChanged, "atspi.gnome-calculator", "atspi.gnome-calculator/1", map[string]any{"focused": true})
	a := <-got
	if a.err != nil || a.res.IsError {
		t.Fatalf("pcp_events: %+v, %v", a.res, a.err)
	}
	out, _ := json.Marshal(a.res.StructuredContent)
	if !strings.Contains(string(out), `"type":"surface.focus_changed"`) || strings.Contains(string(out), "capability.invoked") {
		t.Errorf("pcp_events: got %s, want the focus change alone", out)
	}
	if h, _ := b.Health(ctx); h.Subscriptions != 0 {
		t.Errorf("%d subscriptions left after the call", h.Subscriptions)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "pcp_events", Arguments: map[string]any{"types": []string{api.EventSurfaceFocusChanged}, "wait_ms": 1}})
	if err != nil || res.IsError {
		t.Fatalf("pcp_events timing out: %+v, %v", res, err)
	}
	if out, _ := json.Marshal(res.StructuredContent); string(out) != `{"events":[],"timed_out":true}` {
		t.Errorf("pcp_events timing out: got %s", out)
	}
}
