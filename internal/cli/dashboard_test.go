package cli_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/daemon"
)

// pcpctl dashboard prints a one-time login URL of the running
// dashboard, which logs a browser in once; without --dashboard it says
// how to start one.
func TestDashboardCommand(t *testing.T) {
	t.Parallel()
	off := startDaemon(t)
	_, _, err := off.run(t, "dashboard", "--no-open")
	if got := apiCode(t, err); got != api.CodeActionNotSupported || !strings.Contains(err.Error(), "--dashboard 127.0.0.1:PORT") {
		t.Errorf("dashboard without one: %v, want ACTION_NOT_SUPPORTED saying to start pcpd with --dashboard", err)
	}

	d := startDaemon(t, func(c *daemon.Config) { c.Dashboard = "127.0.0.1:0" })
	out := strings.TrimSpace(d.mustRun(t, "dashboard", "--no-open"))
	if !strings.HasPrefix(out, "http://127.0.0.1:") || !strings.Contains(out, "/login?token=") || strings.Contains(out, "\n") {
		t.Fatalf("dashboard --no-open printed %q, want the login URL alone", out)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for i, want := range []int{http.StatusSeeOther, http.StatusForbidden} {
		resp, err := c.Get(out)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("use %d of the login URL: %s, want %d", i+1, resp.Status, want)
		}
	}
	var res api.DashboardLoginResult
	if err := json.Unmarshal([]byte(d.mustRun(t, "--json", "dashboard", "--no-open")), &res); err != nil {
		t.Fatal(err)
	}
	exp, err := time.Parse(time.RFC3339, res.ExpiresAt)
	if res.URL == out || err != nil || time.Until(exp) > time.Minute+time.Second || time.Until(exp) < 30*time.Second {
		t.Errorf("dashboard --json: %+v, want a new URL valid for a minute", res)
	}
}
