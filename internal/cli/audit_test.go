package cli_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/daemon"
)

// The daemon answers audit.tail a page at a time (at most 1000 entries);
// pcpctl audit tail -n N follows the pages and shows N entries, in order.
func TestAuditTailFollowsPages(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(c *daemon.Config) { c.RateLimits = &core.RateLimits{} })
	ctx := context.Background()
	cl, err := client.Dial(ctx, d.socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const n = 1300
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 8 {
		wg.Go(func() {
			for range n / 8 {
				_, err := cl.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "pcp.inspection.ping", AppID: "pcp.inspection"})
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	const want = 1200
	out := d.mustRun(t, "--json", "audit", "tail", "-n", "1200")
	var res api.AuditTailResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %.200s", err, out)
	}
	if len(res.Entries) != want {
		t.Fatalf("audit tail -n %d: got %d entries", want, len(res.Entries))
	}
	for i := 1; i < len(res.Entries); i++ {
		if res.Entries[i].Seq != res.Entries[i-1].Seq+1 {
			t.Fatalf("entries %d and %d: seq %d then %d, want consecutive", i-1, i, res.Entries[i-1].Seq, res.Entries[i].Seq)
		}
	}
}

// The audit table, some 140 columns wide, fits a narrower terminal
// ($COLUMNS) by cutting its actor, app and capability columns (the
// capability at its start, keeping its name); through a pipe with no
// $COLUMNS its rows are whole.
func TestAuditTableFitsColumns(t *testing.T) {
	d := startDaemon(t)
	d.mustRun(t, "invoke", "pcp.inspection.describe_capability", "capability_id=pcp.inspection.recent_events")
	t.Setenv("COLUMNS", "")
	full := d.mustRun(t, "audit", "tail", "-n", "1")
	t.Setenv("COLUMNS", "120")
	narrow := d.mustRun(t, "audit", "tail", "-n", "1")
	widest := func(s string) int {
		n := 0
		for _, l := range strings.Split(s, "\n") {
			n = max(n, utf8.RuneCountInString(strings.TrimRight(l, " ")))
		}
		return n
	}
	if !strings.Contains(full, "pcp.inspection.describe_capability") || widest(full) <= 120 {
		t.Fatalf("the whole table is %d wide:\n%s", widest(full), full)
	}
	if w := widest(narrow); w > 120 || !strings.Contains(narrow, "_capability ") || !strings.Contains(narrow, "SEQ") || !strings.Contains(narrow, "HASH") || !strings.Contains(narrow, "…") {
		t.Errorf("COLUMNS=120: %d wide:\n%s", w, narrow)
	}
}
