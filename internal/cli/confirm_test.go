package cli_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/daemon"
	"github.com/pcp-dev/pcp/internal/policy"
)

// confirmManifest declares "ping" at trust level confirm; extra adds
// members to the capability.
func confirmManifest(extra string) string {
	return `{"version": "1.0", "signature": "", "capabilities": [{"name": "ping", "tier": 1, "trust_level": "confirm",
		"confirmation_type": "send", "description": "Send a ping"` + extra + `}]}`
}

// confirmationID returns the confirmation id a CONFIRMATION_REQUIRED
// error carries, failing the test for any other error.
func confirmationID(t *testing.T, err error) string {
	t.Helper()
	if got, want := apiCode(t, err), api.CodeConfirmationRequired; got != want {
		t.Fatalf("got %v, want %v", got, want)
	}
	var pe *api.Error
	errors.As(err, &pe)
	id, _ := pe.DataMap()["confirmation_id"].(string)
	if id == "" {
		t.Fatalf("CONFIRMATION_REQUIRED without a confirmation_id: %+v", pe.Data)
	}
	return id
}

// dialAgent connects to d's agent socket as an agent that keeps its
// connection, which a confirmation is bound to.
func dialAgent(ctx context.Context, t *testing.T, d *testDaemon) *client.Client {
	t.Helper()
	cl, err := client.Dial(ctx, d.socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// rowState returns the second column of the table row whose first is id.
func rowState(table, id string) string {
	for _, l := range strings.Split(table, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == id {
			return f[1]
		}
	}
	return ""
}

func TestConfirmations(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(c *daemon.Config) { c.AllowUnsigned = true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serveApp(ctx, t, d, "org.example.mail", confirmManifest(""))

	if got := strings.TrimSpace(d.mustRun(t, "confirm")); got != "no confirmations" {
		t.Errorf("confirm with none: got %q, want no confirmations", got)
	}

	// pcpctl as the agent is told to ask the user. Its confirmation ends
	// with its connection, so the user has nothing left to decide.
	watcher := dialAgent(ctx, t, d)
	if _, err := watcher.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventConfirmationExpired}}); err != nil {
		t.Fatal(err)
	}
	_, _, err := d.run(t, "invoke", "org.example.mail.ping")
	gone := confirmationID(t, err)
	select {
	case n := <-watcher.Notifications():
		if !strings.Contains(string(n.Params), gone) {
			t.Fatalf("got %s %s, want %s expired", n.Method, n.Params, gone)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("confirmation %s of a closed connection did not expire", gone)
	}
	if _, _, err := d.run(t, "confirm", "approve", gone); err == nil {
		t.Errorf("approving %s, whose connection closed, succeeded", gone)
	}

	// An agent that keeps its connection asks; the user says no.
	agent := dialAgent(ctx, t, d)
	invoke := &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.ping", AppID: "org.example.mail"}
	_, err = agent.InvokeCapability(ctx, invoke)
	denied := confirmationID(t, err)
	out := d.mustRun(t, "confirm", "deny", denied, "--reason", "not now")
	if want := "denied " + denied + ": org.example.mail.ping"; !strings.HasPrefix(out, want) || !strings.Contains(out, `"not now"`) {
		t.Errorf("confirm deny: got %q, want it to start with %q and give the reason", out, want)
	}

	// It asks again.
	_, err = agent.InvokeCapability(ctx, invoke)
	pending := confirmationID(t, err)

	out = d.mustRun(t, "confirm", "list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if diff := cmp.Diff([]string{"ID", "STATE", "CAPABILITY", "REQUESTER", "EXPIRES", "DESCRIPTION"}, strings.Fields(lines[0])); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	var got [][2]string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		got = append(got, [2]string{f[0], f[1]})
	}
	if diff := cmp.Diff([][2]string{{pending, api.ConfirmPending}, {denied, api.ConfirmDenied}}, got); diff != "" {
		t.Errorf("confirm list: pending first (-want +got):\n%s\n%s", diff, out)
	}
	if !strings.Contains(lines[1], "org.example.mail.ping") || !strings.Contains(lines[1], "agent:") {
		t.Errorf("confirm list: pending row lacks the capability or requester: %q", lines[1])
	}
	var list api.ConfirmListResult
	decode(t, d.mustRun(t, "--json", "confirm", "list"), &list)
	if len(list.Confirmations) != 2 {
		t.Errorf("confirm list --json: got %+v, want 2 confirmations", list.Confirmations)
	}

	// Only the user decides: the agent socket is refused.
	_, _, err = d.runWithControl(t, d.socket, "confirm", "approve", pending)
	if got, want := apiCode(t, err), api.CodePermissionDenied; got != want {
		t.Errorf("confirm approve over the agent socket: got %v, want %v", got, want)
	}
	// --last is the newest pending one: here the only one.
	out = d.mustRun(t, "confirm", "approve", "--last")
	if want := "approved " + pending + ": org.example.mail.ping"; !strings.HasPrefix(out, want) {
		t.Errorf("confirm approve --last: got %q, want it to start with %q", out, want)
	}
	if _, _, err := d.run(t, "confirm", "deny", "--last"); err == nil || !strings.Contains(err.Error(), "no confirmation is pending") {
		t.Errorf("confirm deny --last with none pending: %v", err)
	}
	if _, _, err := d.run(t, "confirm", "approve", pending, "--last"); err == nil {
		t.Error("confirm approve with an id and --last succeeded")
	}
	_, _, err = d.run(t, "confirm", "approve", pending)
	if got, want := apiCode(t, err), api.CodeInvalidParams; got != want {
		t.Errorf("approving twice: got %v, want %v", got, want)
	}
	_, _, err = d.run(t, "confirm", "deny", "conf-nope")
	if got, want := apiCode(t, err), api.CodeInvalidParams; got != want {
		t.Errorf("denying an unknown confirmation: got %v, want %v", got, want)
	}

	// The approved invocation goes through, once.
	invoke.ConfirmationID = pending
	res, err := agent.InvokeCapability(ctx, invoke)
	if err != nil {
		t.Fatalf("invoke with the approved confirmation: %v", err)
	}
	if res.Status != api.StatusSuccess || !strings.Contains(string(res.Data), "pong") {
		t.Errorf("invoke with the approved confirmation: got %s %s, want success with pong", res.Status, res.Data)
	}
	out = d.mustRun(t, "confirm")
	if got := rowState(out, pending); got != api.ConfirmUsed {
		t.Errorf("confirm after use: got %s %q, want %q:\n%s", pending, got, api.ConfirmUsed, out)
	}
}

func TestJobs(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(c *daemon.Config) { c.AllowUnsigned = true })
	for _, args := range [][]string{{"jobs"}, {"jobs", "list", "-n", "5"}} {
		if got := strings.TrimSpace(d.mustRun(t, args...)); got != "no jobs" {
			t.Errorf("%v with none: got %q, want no jobs", args, got)
		}
	}
	var list api.JobsListResult
	decode(t, d.mustRun(t, "--json", "jobs"), &list)
	if len(list.Jobs) != 0 {
		t.Errorf("jobs --json: got %+v, want none", list.Jobs)
	}
	_, _, err := d.run(t, "jobs", "undo", "job-nope")
	if got, want := apiCode(t, err), api.CodeInvalidParams; got != want {
		t.Errorf("jobs undo of an unknown job: got %v, want %v", got, want)
	}

	// An approved invocation with an undo window becomes a queued job.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serveApp(ctx, t, d, "org.example.later", confirmManifest(`, "undo_window_ms": 600000`))
	agent := dialAgent(ctx, t, d)
	invoke := &api.InvokeCapabilityParams{CapabilityID: "org.example.later.ping", AppID: "org.example.later"}
	_, err = agent.InvokeCapability(ctx, invoke)
	invoke.ConfirmationID = confirmationID(t, err)
	d.mustRun(t, "confirm", "approve", invoke.ConfirmationID)
	res, err := agent.InvokeCapability(ctx, invoke)
	if err != nil {
		t.Fatalf("invoke with the approved confirmation: %v", err)
	}
	var deferred struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(res.Data, &deferred); res.Status != api.StatusDeferred || err != nil || deferred.JobID == "" {
		t.Fatalf("invoke with an undo window: got %s %s, want deferred with a job_id", res.Status, res.Data)
	}

	out := d.mustRun(t, "jobs")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if diff := cmp.Diff([]string{"ID", "STATE", "CAPABILITY", "RUN", "AT", "UPDATED", "REASON"}, strings.Fields(lines[0])); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	if len(lines) != 2 || rowState(out, deferred.JobID) != api.JobQueued || !strings.Contains(lines[1], "org.example.later.ping") {
		t.Errorf("jobs: want %s queued:\n%s", deferred.JobID, out)
	}

	_, _, err = d.runWithControl(t, d.socket, "jobs", "undo", deferred.JobID)
	if got, want := apiCode(t, err), api.CodePermissionDenied; got != want {
		t.Errorf("jobs undo over the agent socket: got %v, want %v", got, want)
	}
	out = d.mustRun(t, "jobs", "undo", "--last")
	if want := "undone " + deferred.JobID + ": org.example.later.ping"; !strings.HasPrefix(out, want) {
		t.Errorf("jobs undo --last: got %q, want it to start with %q", out, want)
	}
	if _, _, err := d.run(t, "jobs", "undo", "--last"); err == nil || !strings.Contains(err.Error(), "no job is queued") {
		t.Errorf("jobs undo --last with none queued: %v", err)
	}
	decode(t, d.mustRun(t, "--json", "jobs", "list"), &list)
	if len(list.Jobs) != 1 || list.Jobs[0].State != api.JobUndone {
		t.Errorf("jobs after undo: got %+v, want the job undone", list.Jobs)
	}
	_, _, err = d.run(t, "jobs", "undo", deferred.JobID)
	if got, want := apiCode(t, err), api.CodeInvalidParams; got != want {
		t.Errorf("undoing twice: got %v, want %v", got, want)
	}
}

func TestPolicy(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	var show api.PolicyView
	decode(t, d.mustRun(t, "--json", "policy", "show"), &show)
	if show.ConfirmationExpiry.Value == nil || show.Limits.PerApp.From == "" || len(show.Capabilities) == 0 {
		t.Errorf("policy show --json: got %+v, want the expiry, limits with provenance and capabilities", show)
	}
	if got, want := show.Scomp, (api.PolicyScomp{
		EvalTimeout:    api.Valued{Value: "30s", From: policy.FromBuiltin},
		MemoryLimitMiB: api.Valued{Value: float64(policy.DefaultScompMemoryLimitMiB), From: policy.FromBuiltin},
	}); got != want {
		t.Errorf("policy show --json: scomp %+v, want %+v", got, want)
	}
	out := d.mustRun(t, "policy", "show", "--source", string(api.SourceSystemIntelligence))
	for _, w := range []string{"policy file:", "SETTING", "per_app", "confirmation_expiry", "scomp.eval_timeout", "scomp.memory_limit_mib", "CAPABILITY", "DECLARED", "EFFECTIVE", "pcp.inspection.health"} {
		if !strings.Contains(out, w) {
			t.Errorf("policy show lacks %q:\n%s", w, out)
		}
	}

	_, _, err := d.runWithControl(t, d.socket, "policy", "reload")
	if got, want := apiCode(t, err), api.CodePermissionDenied; got != want {
		t.Errorf("policy reload over the agent socket: got %v, want %v", got, want)
	}
	out = d.mustRun(t, "policy", "reload")
	if !strings.Contains(out, "SETTING") {
		t.Errorf("policy reload: got\n%s", out)
	}
}

// invoke --wait keeps its connection while the user decides in another
// pcpctl, then runs the approved invocation.
func TestInvokeWait(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(c *daemon.Config) { c.AllowUnsigned = true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	serveApp(ctx, t, d, "org.example.mail", confirmManifest(""))

	type outcome struct {
		stdout, stderr string
		err            error
	}
	user, err := client.Dial(ctx, d.control, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	if _, err := user.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventConfirmationRequested}}); err != nil {
		t.Fatal(err)
	}
	done := make(chan outcome, 1)
	go func() {
		o, e, err := d.run(t, "invoke", "--wait", "org.example.mail.ping")
		done <- outcome{o, e, err}
	}()
	var id string
	select {
	case n := <-user.Notifications():
		var asked struct {
			ConfirmationID string `json:"confirmation_id"`
		}
		if err := json.Unmarshal(n.Params, &asked); err != nil || asked.ConfirmationID == "" {
			t.Fatalf("%s: %s (%v)", n.Method, n.Params, err)
		}
		id = asked.ConfirmationID
	case o := <-done:
		t.Fatalf("invoke --wait ended before the user decided: %v\n%s", o.err, o.stderr)
	case <-time.After(10 * time.Second):
		t.Fatal("no confirmation was asked")
	}
	d.mustRun(t, "confirm", "approve", id)
	select {
	case o := <-done:
		if o.err != nil {
			t.Fatalf("invoke --wait: %v\n%s", o.err, o.stderr)
		}
		if !strings.Contains(o.stderr, "pcpctl confirm approve "+id) || !strings.Contains(o.stdout, "org.example.mail.ping: success") {
			t.Errorf("invoke --wait printed\nstdout: %s\nstderr: %s", o.stdout, o.stderr)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("invoke --wait did not finish after the approval")
	}
}

// pcpctl --framed speaks spec 001's framed stream to the same daemon.
func TestFramed(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	out := d.mustRun(t, "--framed", "caps")
	if !strings.Contains(out, "pcp.inspection.ping") {
		t.Errorf("--framed caps:\n%s", out)
	}
	out = d.mustRun(t, "--framed", "invoke", "pcp.inspection.ping", "payload=7")
	if !strings.Contains(out, "pcp.inspection.ping: success") || !strings.Contains(out, `"payload": 7`) {
		t.Errorf("--framed invoke:\n%s", out)
	}
	out = d.mustRun(t, "--framed", "health")
	if !strings.Contains(out, "capabilities:") {
		t.Errorf("--framed health:\n%s", out)
	}
	out = d.mustRun(t, "--framed", "apps")
	if !strings.Contains(out, "pcp.inspection") {
		t.Errorf("--framed apps:\n%s", out)
	}
	_, _, err := d.run(t, "--framed", "invoke", "pcp.inspection.nope")
	if !errors.Is(err, api.ErrCapabilityNotFound) {
		t.Errorf("--framed invoke of an unknown capability: got %v, want CAPABILITY_NOT_FOUND", err)
	}
	if _, _, err := d.run(t, "--framed", "audit", "tail"); err == nil {
		t.Error("--framed audit tail should be a usage error")
	}
}
