package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/cli"
	"github.com/pcp-dev/pcp/internal/daemon"
)

// completeWith runs `pcpctl __complete ARGS` (what the shell scripts of
// `pcpctl completion` run on Tab) against the sockets given, and returns
// the candidates' values, their descriptions, and the directive line.
func completeWith(t *testing.T, socket, control string, args ...string) (values []string, descs map[string]string, directive string) {
	t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"__complete", "--socket", socket, "--control-socket", control}, args...)
	if err := cli.Run(context.Background(), full, strings.NewReader(""), &out, &errb); err != nil {
		t.Fatalf("pcpctl %s: %v\n%s", strings.Join(full, " "), err, errb.String())
	}
	descs = map[string]string{}
	values = []string{}
	for _, l := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		if strings.HasPrefix(l, ":") {
			directive = l
			continue
		}
		v, d, _ := strings.Cut(l, "\t")
		values = append(values, v)
		descs[v] = d
	}
	return values, descs, directive
}

// Tab completes capability ids, then the capability's parameter names,
// app ids, pending confirmation ids and queued job ids, each asked of the
// running pcpd; never file names.
func TestCompletion(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(c *daemon.Config) { c.AllowUnsigned = true })
	complete := func(args ...string) ([]string, map[string]string, string) {
		t.Helper()
		return completeWith(t, d.socket, d.control, args...)
	}
	const noFiles, noSpace = ":4", ":6"

	got, descs, dir := complete("invoke", "pcp.inspection.describe_")
	if diff := cmp.Diff([]string{"pcp.inspection.describe_capability", "pcp.inspection.describe_registry"}, got); diff != "" || dir != noFiles {
		t.Errorf("invoke pcp.inspection.describe_<Tab> %s (-want +got):\n%s", dir, diff)
	}
	if !strings.HasPrefix(descs["pcp.inspection.describe_registry"], "List every app") {
		t.Errorf("description of describe_registry: %q", descs["pcp.inspection.describe_registry"])
	}
	got, _, dir = complete("invoke", "pcp.inspection.recent_events", "")
	if diff := cmp.Diff([]string{"limit="}, got); diff != "" || dir != noSpace {
		t.Errorf("invoke recent_events <Tab> %s (-want +got):\n%s", dir, diff)
	}
	got, _, _ = complete("invoke", "pcp.inspection.recent_events", "limit=5", "")
	if len(got) != 0 {
		t.Errorf("a parameter given is offered again: %v", got)
	}
	got, _, dir = complete("caps", "--app", "pcp.")
	if diff := cmp.Diff([]string{"pcp.inspection"}, got); diff != "" || dir != noFiles {
		t.Errorf("caps --app pcp.<Tab> %s (-want +got):\n%s", dir, diff)
	}
	got, _, _ = complete("events", "--type", "confirmation.re")
	if diff := cmp.Diff([]string{api.EventConfirmationRequested}, got); diff != "" {
		t.Errorf("events --type confirmation.re<Tab> (-want +got):\n%s", diff)
	}

	// A pending confirmation, and a queued job.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serveApp(ctx, t, d, "org.example.mail", confirmManifest(""))
	serveApp(ctx, t, d, "org.example.later", confirmManifest(`, "undo_window_ms": 600000`))
	agent := dialAgent(ctx, t, d)
	_, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.ping", AppID: "org.example.mail", Params: json.RawMessage(`{}`)})
	pending := confirmationID(t, err)
	later := &api.InvokeCapabilityParams{CapabilityID: "org.example.later.ping", AppID: "org.example.later"}
	_, err = agent.InvokeCapability(ctx, later)
	later.ConfirmationID = confirmationID(t, err)
	d.mustRun(t, "confirm", "approve", later.ConfirmationID)
	res, err := agent.InvokeCapability(ctx, later)
	if err != nil {
		t.Fatal(err)
	}
	var job struct {
		JobID string `json:"job_id"`
	}
	json.Unmarshal(res.Data, &job)

	for _, verb := range []string{"approve", "deny"} {
		got, descs, dir = complete("confirm", verb, "")
		if diff := cmp.Diff([]string{pending}, got); diff != "" || dir != noFiles {
			t.Errorf("confirm %s <Tab> %s (-want +got):\n%s", verb, dir, diff)
		}
		if descs[pending] != "Send a ping" {
			t.Errorf("confirm %s: description %q", verb, descs[pending])
		}
	}
	if got, _, _ = complete("confirm", "approve", pending, ""); len(got) != 0 {
		t.Errorf("a second id offered: %v", got)
	}
	got, descs, _ = complete("jobs", "undo", "")
	if diff := cmp.Diff([]string{job.JobID}, got); diff != "" || descs[job.JobID] != "org.example.later.ping" {
		t.Errorf("jobs undo <Tab> (-want +got):\n%s%v", diff, descs)
	}
	got, _, _ = complete("revoke", "org.")
	if diff := cmp.Diff([]string{"org.example.later", "org.example.mail"}, got); diff != "" {
		t.Errorf("revoke org.<Tab> (-want +got):\n%s", diff)
	}
}

// With no daemon, completion offers nothing, quickly, and no file names.
func TestCompletionDaemonDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := time.Now()
	got, _, directive := completeWith(t, filepath.Join(dir, "none.sock"), filepath.Join(dir, "none-control.sock"), "invoke", "")
	if len(got) != 0 || directive != ":4" {
		t.Errorf("got %v %s, want nothing and :4", got, directive)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s", took)
	}
}
