package notify

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/pcp-dev/pcp/internal/testkit"
)

// TestNoBus: without a session bus the Notifier shows nothing, keeps no
// goroutine after Close, and Connect says why.
func TestNoBus(t *testing.T) {
	testkit.CheckGoroutines(t)
	n := New(Config{BusAddress: "unix:path=" + filepath.Join(t.TempDir(), "nobus"),
		Decide: func(context.Context, string, bool) error { t.Error("decided without a bus"); return nil }})
	if err := n.Connect(context.Background()); err == nil {
		t.Error("Connect to a missing bus succeeded")
	}
	n.Prompt(context.Background(), confirmation("conf-1"))
	n.Withdraw("conf-1")
	n.Withdraw("conf-never")
	n.Prompt(context.Background(), confirmation("conf-2"))
	if n.Server() != "" || n.BusName() != "" {
		t.Errorf("server %q, bus name %q without a bus", n.Server(), n.BusName())
	}
	n.Close()
	n.Close()
	n.Prompt(context.Background(), confirmation("conf-3")) // after Close: ignored
}
