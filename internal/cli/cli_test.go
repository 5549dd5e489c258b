package cli_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/cli"
	"github.com/pcp-dev/pcp/internal/daemon"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// testDaemon is a real pcpd serving on sockets in a short temporary
// directory (Unix socket paths must stay under 108 bytes).
type testDaemon struct {
	socket, control string
	stateDir        string
	trustDir        string
	stop            func()
}

func startDaemon(t *testing.T, configure ...func(*daemon.Config)) *testDaemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "pcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d := &testDaemon{
		socket:   filepath.Join(dir, "a.sock"),
		control:  filepath.Join(dir, "c.sock"),
		stateDir: filepath.Join(dir, "state"),
		trustDir: filepath.Join(dir, "trust"),
	}
	if err := os.Mkdir(d.trustDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	errc := make(chan error, 1)
	cfg := daemon.Config{
		Socket: d.socket, ControlSocket: d.control, StateDir: d.stateDir, TrustDir: d.trustDir,
		Logger: slog.New(slog.DiscardHandler), Ready: func() { close(ready) },
	}
	for _, f := range configure {
		f(&cfg)
	}
	go func() { errc <- daemon.Run(ctx, cfg) }()
	select {
	case <-ready:
	case err := <-errc:
		cancel()
		t.Fatalf("daemon.Run: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("daemon not ready after 10s")
	}
	var once sync.Once
	d.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-errc; err != nil {
				t.Errorf("daemon.Run: %v", err)
			}
		})
	}
	t.Cleanup(d.stop)
	return d
}

// run runs pcpctl against d and returns what it printed.
func (d *testDaemon) run(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	return d.runContext(context.Background(), t, args...)
}

func (d *testDaemon) runContext(ctx context.Context, t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = cli.Run(ctx, d.args(args...), strings.NewReader(""), &out, &errb)
	return out.String(), errb.String(), err
}

func (d *testDaemon) args(args ...string) []string {
	return append([]string{"--socket", d.socket, "--control-socket", d.control}, args...)
}

// mustRun runs pcpctl and fails the test if it fails.
func (d *testDaemon) mustRun(t *testing.T, args ...string) string {
	t.Helper()
	out, errOut, err := d.run(t, args...)
	if err != nil {
		t.Fatalf("pcpctl %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// apiCode returns the PCP error code of err, failing if it has none.
func apiCode(t *testing.T, err error) api.Code {
	t.Helper()
	var pe *api.Error
	if !errors.As(err, &pe) {
		t.Fatalf("got error %v (%T), want an *api.Error", err, err)
	}
	return pe.Code
}

// inspectionCaps are capabilities of the daemon's built-in inspection
// service (it may have more).
var inspectionCaps = []string{
	"pcp.inspection.describe_capability",
	"pcp.inspection.describe_registry",
	"pcp.inspection.health",
	"pcp.inspection.list_apps",
	"pcp.inspection.recent_events",
}

func TestCaps(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	out := d.mustRun(t, "caps")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if diff := cmp.Diff([]string{"ID", "TRUST", "TIER", "AVAILABLE", "DESCRIPTION"}, strings.Fields(lines[0])); diff != "" {
		t.Errorf("header (-want +got):\n%s", diff)
	}
	for _, id := range inspectionCaps {
		if !strings.Contains(out, id+" ") {
			t.Errorf("caps table lacks %s:\n%s", id, out)
		}
	}
	if got, want := len(lines), 1+len(inspectionCaps); got < want {
		t.Errorf("got %d lines, want at least %d:\n%s", got, want, out)
	}

	out = d.mustRun(t, "caps", "--app", "org.example.none")
	if got, want := strings.TrimSpace(out), "no capabilities"; got != want {
		t.Errorf("caps --app org.example.none: got %q, want %q", got, want)
	}
}

func TestInvoke(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	tests := []struct {
		name     string
		args     []string
		wantOut  []string
		wantCode api.Code // 0: success
	}{
		{"health", []string{"invoke", "pcp.inspection.health"}, []string{"pcp.inspection.health: success", `"status": "ok"`}, 0},
		{"key=value", []string{"invoke", "pcp.inspection.describe_capability", "capability_id=pcp.inspection.health"}, []string{"success", `"trust_level": "auto"`}, 0},
		{"params flag", []string{"invoke", "pcp.inspection.recent_events", "--params", `{"limit":1}`}, []string{"success", `"events"`}, 0},
		{"explicit app", []string{"invoke", "pcp.inspection.list_apps", "--app", "pcp.inspection"}, []string{"success", `"builtin"`}, 0},
		{"unknown capability", []string{"invoke", "pcp.inspection.nope"}, nil, api.CodeCapabilityNotFound},
		{"unknown app", []string{"invoke", "org.example.none.compose"}, nil, api.CodeAppNotFound},
		{"bad parameter type", []string{"invoke", "pcp.inspection.recent_events", "limit=many"}, nil, api.CodeInvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, _, err := d.run(t, tt.args...)
			if tt.wantCode != 0 {
				if got := apiCode(t, err); got != tt.wantCode {
					t.Errorf("got code %v, want %v", got, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want success", err)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestJSONOutput(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	d.mustRun(t, "invoke", "pcp.inspection.health")

	var caps api.QueryCapabilitiesResult
	decode(t, d.mustRun(t, "--json", "caps", "--app", "pcp.inspection"), &caps)
	ids := map[string]bool{}
	for _, c := range caps.Capabilities {
		ids[c.ID] = true
	}
	for _, id := range inspectionCaps {
		if !ids[id] {
			t.Errorf("caps --json lacks %s", id)
		}
	}

	var res api.CapabilityResult
	decode(t, d.mustRun(t, "--json", "invoke", "pcp.inspection.health"), &res)
	var h api.HealthResult
	if err := json.Unmarshal(res.Data, &h); err != nil {
		t.Fatalf("invoke data: %v", err)
	}
	if res.Status != api.StatusSuccess || h.Status != api.HealthOK {
		t.Errorf("invoke: got status %q with health %q, want success with ok", res.Status, h.Status)
	}

	var health api.HealthResult
	decode(t, d.mustRun(t, "--json", "health"), &health)
	if health.Version == "" || health.Capabilities < len(inspectionCaps) {
		t.Errorf("health: got version %q and %d capabilities", health.Version, health.Capabilities)
	}

	var apps api.AppsListResult
	decode(t, d.mustRun(t, "--json", "apps"), &apps)
	if len(apps.Apps) != 1 || apps.Apps[0].AppID != "pcp.inspection" {
		t.Errorf("apps: got %+v, want just pcp.inspection", apps.Apps)
	}

	var tail api.AuditTailResult
	decode(t, d.mustRun(t, "--json", "audit", "tail", "-n", "5"), &tail)
	if len(tail.Entries) == 0 || tail.Entries[len(tail.Entries)-1].CapabilityID != "pcp.inspection.health" {
		t.Errorf("audit tail: got %+v, want the invocation last", tail.Entries)
	}
}

func decode(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %T: %v\n%s", v, err, out)
	}
}

func TestTables(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	d.mustRun(t, "invoke", "pcp.inspection.health")
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"health"}, []string{"status:", "ok", "version:", "adapters: none"}},
		{[]string{"apps"}, []string{"APP", "PUBLISHER", "pcp.inspection", "builtin", "pcpd"}},
		{[]string{"apps", "list"}, []string{"pcp.inspection"}},
		{[]string{"audit", "tail", "-n", "3"}, []string{"SEQ", "HASH", "invoke", "pcp.inspection.health", "success"}},
		{[]string{"context"}, []string{"session:", "focused surface:", "none"}},
		{[]string{"version"}, []string{"pcpctl ", "pcpd 0."}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, "_"), func(t *testing.T) {
			out := d.mustRun(t, tt.args...)
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
}

func TestQueryErrors(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	for _, args := range [][]string{{"surface", "s-none"}, {"elements", "s-none"}} {
		_, _, err := d.run(t, args...)
		if got, want := apiCode(t, err), api.CodeSurfaceNotFound; got != want {
			t.Errorf("%v: got %v, want %v", args, got, want)
		}
	}
}

func TestRevokeAndAllow(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, func(c *daemon.Config) { c.AllowUnsigned = true })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	appDone := serveApp(ctx, t, d, "org.example.mail",
		`{"version": "1.0", "signature": "", "capabilities": [{"name": "ping", "tier": 1, "trust_level": "auto"}]}`)

	_, _, err := d.run(t, "revoke", "pcp.inspection")
	if got, want := apiCode(t, err), api.CodePermissionDenied; got != want {
		t.Errorf("revoking the built-in service: got %v, want %v", got, want)
	}
	out := d.mustRun(t, "revoke", "org.example.mail", "--reason", "misbehaving")
	if !strings.Contains(out, "revoked org.example.mail") {
		t.Errorf("revoke: got %q", out)
	}
	if err := <-appDone; !errors.Is(err, client.ErrPermanent) {
		t.Errorf("revoked app: got %v, want a permanent refusal to register again", err)
	}
	out = d.mustRun(t, "apps")
	if !strings.Contains(out, "org.example.mail") || !strings.Contains(out, "misbehaving") {
		t.Errorf("apps after revoke lacks the revocation:\n%s", out)
	}

	// Over the agent socket apps.allow is refused: only the user may lift
	// a revocation.
	_, _, err = d.runWithControl(t, d.socket, "apps", "allow", "org.example.mail")
	if got, want := apiCode(t, err), api.CodePermissionDenied; got != want {
		t.Errorf("apps allow over the agent socket: got %v, want %v", got, want)
	}
	out = d.mustRun(t, "apps", "allow", "org.example.mail")
	if !strings.Contains(out, "allowed org.example.mail") {
		t.Errorf("apps allow: got %q", out)
	}
	out = d.mustRun(t, "apps", "allow", "org.example.mail")
	if !strings.Contains(out, "was not revoked") {
		t.Errorf("apps allow again: got %q", out)
	}
}

// serveApp registers manifest for appID with a "ping" capability and
// serves it until ctx is done; the channel reports how the app stopped.
func serveApp(ctx context.Context, t *testing.T, d *testDaemon, appID, manifest string) <-chan error {
	t.Helper()
	registered := make(chan struct{}, 1)
	app := &client.App{
		AppID: appID, Manifest: json.RawMessage(manifest), Socket: d.socket,
		Capabilities: map[string]client.CapabilityFunc{
			"ping": func(context.Context, json.RawMessage) (any, error) { return map[string]string{"reply": "pong"}, nil },
		},
		OnRegistered: func(*api.RegisterCapabilityResult) {
			select {
			case registered <- struct{}{}:
			default:
			}
		},
	}
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	select {
	case <-registered:
	case err := <-done:
		t.Fatalf("registering %s: %v", appID, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not register", appID)
	}
	return done
}

// runWithControl runs pcpctl with the control socket set to control.
func (d *testDaemon) runWithControl(t *testing.T, control string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = cli.Run(context.Background(), append([]string{"--socket", d.socket, "--control-socket", control}, args...), nil, &out, &errb)
	return out.String(), errb.String(), err
}

func TestAuditVerify(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	d.mustRun(t, "invoke", "pcp.inspection.health")
	d.mustRun(t, "invoke", "pcp.inspection.list_apps")
	db := filepath.Join(d.stateDir, "pcp.db")

	for _, args := range [][]string{{"audit", "verify"}, {"audit", "verify", "--db", db}} {
		out := d.mustRun(t, args...)
		if !strings.HasPrefix(out, "audit chain intact: 2 entries, head ") {
			t.Errorf("%v: got %q, want the chain intact with 2 entries", args, out)
		}
	}
	var res api.AuditVerifyResult
	decode(t, d.mustRun(t, "--json", "audit", "verify", "--db", db), &res)
	if !res.OK || res.Entries != 2 || len(res.Head) != 64 {
		t.Errorf("audit verify --json: got %+v", res)
	}

	// Flip a byte of the first entry's record behind the daemon's back.
	seg := filepath.Join(d.stateDir, "audit", "00000000000000000000.log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	b[16+8+72+5] ^= 0x20
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"audit", "verify"}, {"audit", "verify", "--db", db}} {
		_, _, err := d.run(t, args...)
		if err == nil || !strings.HasPrefix(err.Error(), "audit chain broken at entry 1: ") {
			t.Errorf("%v after tampering: got error %v, want the chain broken at entry 1", args, err)
		}
	}

	_, _, err = d.run(t, "audit", "verify", "--db", filepath.Join(d.stateDir, "missing.db"))
	if err == nil {
		t.Error("audit verify --db on a missing file: got success")
	}
}

// pcpctl audit checkpoint prints a signed checkpoint; audit verify
// --checkpoint proves the log extends it, online and offline, and names
// the entries removed after it; audit prove prints an inclusion proof
// that pcpctl has checked.
func TestAuditCheckpoint(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	for range 3 {
		d.mustRun(t, "invoke", "pcp.inspection.health")
	}
	cp := d.mustRun(t, "audit", "checkpoint")
	lines := strings.Split(cp, "\n")
	if len(lines) < 5 || !strings.HasPrefix(lines[0], "pcp.local/audit/") || lines[1] != "3" || lines[3] != "" || !strings.HasPrefix(lines[4], "— "+lines[0]+" ") {
		t.Fatalf("audit checkpoint printed:\n%s", cp)
	}
	file := filepath.Join(t.TempDir(), "checkpoint")
	if err := os.WriteFile(file, []byte(cp), 0o600); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		d.mustRun(t, "invoke", "pcp.inspection.health")
	}
	db := filepath.Join(d.stateDir, "pcp.db")
	for _, args := range [][]string{{"audit", "verify", "--checkpoint", file}, {"audit", "verify", "--db", db, "--checkpoint", file}} {
		out := d.mustRun(t, args...)
		if !strings.HasPrefix(out, "audit log extends the checkpoint: 3 entries then, 5 now; consistency proof of ") {
			t.Errorf("%v: %q", args, out)
		}
	}

	out := d.mustRun(t, "audit", "prove", "2")
	for _, want := range []string{"entry:      2\n", "leaf index: 1\n", "tree size:  5\n", "proof:      3 hashes\n", "checkpoint:\n" + lines[0] + "\n5\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit prove 2 does not print %q:\n%s", want, out)
		}
	}
	var p api.AuditProveResult
	decode(t, d.mustRun(t, "--json", "audit", "prove", "5"), &p)
	if p.LeafIndex != 4 || p.TreeSize != 5 || len(p.LeafHash) != 64 {
		t.Errorf("audit prove --json 5 = %+v", p)
	}
	if _, _, err := d.run(t, "audit", "prove", "6"); err == nil || !strings.Contains(err.Error(), "1 to 5") {
		t.Errorf("audit prove 6: %v, want the range of entries named", err)
	}

	// Cut the log back to two entries behind the daemon's back.
	seg := filepath.Join(d.stateDir, "audit", "00000000000000000000.log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	off := 16
	for range 2 {
		off += 8 + int(binary.BigEndian.Uint32(b[off:]))
	}
	if err := os.WriteFile(seg, b[:off], 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"audit", "verify", "--checkpoint", file}, {"audit", "verify", "--db", db, "--checkpoint", file}} {
		_, _, err := d.run(t, args...)
		if err == nil || !strings.Contains(err.Error(), "the log holds 2 entries but the checkpoint was signed over 3: entry 3 was removed") {
			t.Errorf("%v after truncating: %v", args, err)
		}
	}
}

func TestEventsHistory(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	d.mustRun(t, "invoke", "pcp.inspection.health")

	// The journal is written behind the reply; give it a moment.
	var out string
	for deadline := time.Now().Add(5 * time.Second); ; {
		out = d.mustRun(t, "events")
		if strings.Contains(out, "capability.invoked") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out, "capability.invoked") || !strings.Contains(out, "capability_id=pcp.inspection.health") {
		t.Fatalf("events: got %q, want the capability.invoked event", out)
	}

	var res api.EventsHistoryResult
	decode(t, d.mustRun(t, "--json", "events", "--type", "capability.invoked", "--app", "pcp.inspection"), &res)
	if len(res.Events) == 0 || res.Events[0].Type != api.EventCapabilityInvoked {
		t.Errorf("events --json --type capability.invoked: got %+v", res.Events)
	}
	if got := strings.TrimSpace(d.mustRun(t, "events", "--type", "app.revoked")); got != "no events" {
		t.Errorf("events --type app.revoked: got %q, want no events", got)
	}
}

// waitFor polls until s contains want.
func waitFor(t *testing.T, s *testkit.SyncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %q; got %q", want, s.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// follow starts `pcpctl events --follow` in the background.
func (d *testDaemon) follow(ctx context.Context, args ...string) (stdout, stderr *testkit.SyncBuffer, done <-chan error) {
	stdout, stderr = &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	errc := make(chan error, 1)
	go func() {
		errc <- cli.Run(ctx, d.args(append([]string{"events", "--follow"}, args...)...), nil, stdout, stderr)
	}()
	return stdout, stderr, errc
}

func TestEventsFollow(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stdout, stderr, done := d.follow(ctx, "--type", "capability.invoked")
	waitFor(t, stderr, "following events")

	d.mustRun(t, "invoke", "pcp.inspection.health")
	waitFor(t, stdout, "capability.invoked")
	if !strings.Contains(stdout.String(), "capability_id=pcp.inspection.health") {
		t.Errorf("follow: got %q, want the invoked capability named", stdout.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("follow after cancel: got %v, want success", err)
	}
}

func TestEventsFollowJSONLimit(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	stdout, _, done := d.follow(context.Background(), "--json", "--limit", "1")
	// With --json nothing is said on stderr; wait for the subscription
	// through the daemon's count instead.
	for deadline := time.Now().Add(10 * time.Second); ; {
		var h api.HealthResult
		decode(t, d.mustRun(t, "--json", "health"), &h)
		if h.Subscriptions > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no subscription after 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.mustRun(t, "invoke", "pcp.inspection.list_apps")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("follow --limit 1: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow --limit 1 did not stop after one event")
	}
	var n struct {
		Method string         `json:"method"`
		Params map[string]any `json:"params"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &n); err != nil {
		t.Fatalf("follow --json: %v\n%s", err, stdout.String())
	}
	if n.Method != api.EventCapabilityInvoked || n.Params["capability_id"] != "pcp.inspection.list_apps" {
		t.Errorf("follow --json: got %+v", n)
	}
}

func TestEventsFollowDaemonExit(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	_, stderr, done := d.follow(context.Background())
	waitFor(t, stderr, "following events")
	d.stop()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "closed the connection") {
			t.Errorf("follow when pcpd exits: got %v, want a closed-connection error", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("follow did not stop when pcpd exited")
	}
}

func TestManifestRoundTrip(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	trust := filepath.Join(dir, "trust")
	if err := os.Mkdir(trust, 0o700); err != nil {
		t.Fatal(err)
	}
	prefix := filepath.Join(trust, "acme")
	run := func(args ...string) (string, error) {
		var out, errb bytes.Buffer
		err := cli.Run(context.Background(), args, nil, &out, &errb)
		return out.String(), err
	}
	mustRun := func(args ...string) string {
		t.Helper()
		out, err := run(args...)
		if err != nil {
			t.Fatalf("pcpctl %s: %v", strings.Join(args, " "), err)
		}
		return out
	}

	out := mustRun("manifest", "keygen", "--out", prefix)
	if !strings.Contains(out, prefix+".pub.pem") {
		t.Errorf("keygen output lacks the public key path:\n%s", out)
	}
	fi, err := os.Stat(prefix + ".key")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fi.Mode().Perm(), os.FileMode(0o600); got != want {
		t.Errorf("private key mode: got %v, want %v", got, want)
	}
	if _, err := run("manifest", "keygen", "--out", prefix); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("keygen over an existing key: got %v, want a refusal", err)
	}
	// The private key stays out of the trust dir in real use; here the
	// trust dir loader ignores *.key files anyway.

	unsigned := filepath.Join(dir, "manifest.json")
	writeFile(t, unsigned, `{
  "version": "1.0",
  "publisher": "acme",
  "capabilities": [
    {"name": "compose", "tier": 1, "trust_level": "auto", "description": "Compose a message",
     "parameters": [{"name": "subject", "type": "string"}]}
  ]
}`)
	if _, err := run("manifest", "sign", "--key", prefix+".key", unsigned); !cli.IsUsage(err) {
		t.Errorf("sign without --app or app_id: got %v, want a usage error", err)
	}
	signed := filepath.Join(dir, "signed.json")
	mustRun("manifest", "sign", "--key", prefix+".key", "--app", "org.example.mail", "-o", signed, unsigned)

	out = mustRun("manifest", "verify", "--trust-dir", trust, signed)
	if got, want := strings.TrimSpace(out), "valid: signed by acme"; got != want {
		t.Errorf("verify: got %q, want %q", got, want)
	}
	out = mustRun("manifest", "check", signed)
	if !strings.Contains(out, "org.example.mail.compose") || !strings.Contains(out, "subject:string") {
		t.Errorf("check: got\n%s", out)
	}

	// Bound to org.example.mail, the manifest is not valid for another app.
	if _, err := run("manifest", "verify", "--trust-dir", trust, "--app", "org.example.evil", signed); err == nil {
		t.Error("verify for another app id: got success")
	}

	// Any edit breaks the signature.
	b, err := os.ReadFile(signed)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), `"tier": 1`, `"tier": 2`, 1)
	if edited == string(b) {
		t.Fatalf("signed manifest has no tier to edit:\n%s", b)
	}
	writeFile(t, signed, edited)
	_, err = run("manifest", "verify", "--trust-dir", trust, signed)
	if got, want := apiCode(t, err), api.CodeManifestSignatureInvalid; got != want {
		t.Errorf("verify after edit: got %v, want %v", got, want)
	}
}

// TestSignedManifestRegisters checks that pcpd accepts what `manifest
// sign` writes, from the app it is bound to and no other.
func TestSignedManifestRegisters(t *testing.T) {
	t.Parallel()
	d := startDaemon(t)
	dir := t.TempDir()
	d.mustRun(t, "manifest", "keygen", "--out", filepath.Join(d.trustDir, "acme"))
	unsigned := filepath.Join(dir, "manifest.json")
	writeFile(t, unsigned, `{"version": "1.0", "capabilities": [{"name": "ping", "tier": 1, "trust_level": "auto"}]}`)
	signed := filepath.Join(dir, "signed.json")
	d.mustRun(t, "manifest", "sign", "--key", filepath.Join(d.trustDir, "acme.key"), "--app", "org.example.ping", "-o", signed, unsigned)
	raw, err := os.ReadFile(signed)
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	appDone := serveApp(ctx, t, d, "org.example.ping", string(raw))
	out := d.mustRun(t, "invoke", "org.example.ping.ping")
	if !strings.Contains(out, `"reply": "pong"`) {
		t.Errorf("invoke ping: got %q", out)
	}
	out = d.mustRun(t, "apps")
	if !strings.Contains(out, "org.example.ping") || !strings.Contains(out, "acme") {
		t.Errorf("apps: got\n%s", out)
	}
	cancel()
	<-appDone

	// The same signed manifest from another app id is refused.
	other := &client.App{AppID: "org.example.other", Manifest: raw, Socket: d.socket}
	if err := other.Run(context.Background()); !errors.Is(err, client.ErrPermanent) {
		t.Errorf("registering the manifest as another app: got %v, want a permanent refusal", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	// None of these reach a daemon.
	tests := [][]string{
		{"--bogus"},
		{"nosuchcommand"},
		{"caps", "extra"},
		{"caps", "--tier", "one"},
		{"invoke"},
		{"invoke", "nodot"},
		{"invoke", "a.b.c", "novalue"},
		{"invoke", "a.b.c", "=1"},
		{"invoke", "a.b.c", "n:=notjson"},
		{"invoke", "a.b.c", "x=1", "x=2"},
		{"invoke", "a.b.c", "--params", "[1]"},
		{"apps", "bogus"},
		{"events", "--limit", "-1"},
		{"confirm", "approve"},
		{"confirm", "deny", "a", "b"},
		{"confirm", "bogus"},
		{"jobs", "-n", "-1"},
		{"jobs", "list", "-n", "x"},
		{"jobs", "undo"},
		{"policy", "show", "extra"},
		{"policy", "reload", "--source", "x"},
		{"manifest", "sign", "m.json"},
		{"manifest", "verify", "m.json"},
	}
	for _, args := range tests {
		var out, errb bytes.Buffer
		err := cli.Run(context.Background(), append([]string{"--socket", "/nonexistent/pcp.sock"}, args...), nil, &out, &errb)
		if !cli.IsUsage(err) {
			t.Errorf("%q: got %v, want a usage error", args, err)
		}
		if got, want := cli.ExitCode(err), cli.ExitUsage; got != want {
			t.Errorf("%q: got exit code %d, want %d", args, got, want)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := cli.Run(context.Background(), []string{"--help"}, nil, &out, &out); err != nil {
		t.Fatalf("--help: %v", err)
	}
	for _, c := range []string{"caps", "invoke", "elements", "action", "surface", "context", "events", "revoke", "apps", "confirm", "jobs", "policy", "health", "audit", "manifest", "serve", "version"} {
		if !strings.Contains(out.String(), "\n  "+c+" ") {
			t.Errorf("help lacks command %s:\n%s", c, out.String())
		}
	}
}

func TestNoDaemon(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	err := cli.Run(context.Background(), []string{"--socket", "/nonexistent/pcp.sock", "caps"}, nil, &out, &errb)
	if err == nil || cli.IsUsage(err) || !strings.Contains(err.Error(), "/nonexistent/pcp.sock") {
		t.Errorf("caps without a daemon: got %v, want a connection error naming the socket", err)
	}
}

// TestBinary runs the real pcpctl binary: errors reach stderr in the
// documented form and set the exit code.
func TestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal("the go tool is not in PATH; this test builds pcpctl with it")
	}
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "pcpctl")
	build := exec.Command(goTool, "build", "-o", bin, "github.com/pcp-dev/pcp/cmd/pcpctl")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	d := startDaemon(t)

	tests := []struct {
		args       []string
		wantCode   int
		wantStderr string
	}{
		{[]string{"invoke", "pcp.inspection.health"}, 0, ""},
		{[]string{"invoke", "pcp.inspection.nope"}, 1, "pcpctl: CAPABILITY_NOT_FOUND: "},
		{[]string{"caps", "extra"}, 2, "pcpctl: unknown command"},
	}
	for _, tt := range tests {
		cmd := exec.Command(bin, d.args(tt.args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if code != tt.wantCode {
			t.Errorf("%v: got exit code %d, want %d (stderr %q)", tt.args, code, tt.wantCode, stderr.String())
		}
		if !strings.HasPrefix(stderr.String(), tt.wantStderr) {
			t.Errorf("%v: got stderr %q, want it to start with %q", tt.args, stderr.String(), tt.wantStderr)
		}
	}

	// The error's data follows on a line of its own.
	cmd := exec.Command(bin, d.args("invoke", "pcp.inspection.nope")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Run()
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	var data map[string]any
	if len(lines) != 2 || json.Unmarshal([]byte(lines[1]), &data) != nil || data["capability_id"] != "pcp.inspection.nope" {
		t.Errorf("got stderr %q, want the error then its data as JSON", stderr.String())
	}
}

// A connection the daemon refuses (its cap is full) prints the daemon's
// coded reason, not a bare "connection closed", and fails.
func TestRefusedConnectionPrintsTheReason(t *testing.T) {
	testkit.CheckGoroutines(t)
	d := startDaemon(t, func(c *daemon.Config) { c.Limits.Connections = 1 })
	ctx := context.Background()
	held, err := client.Dial(ctx, d.socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := held.Health(ctx); err != nil { // admitted: the cap is full
		t.Fatal(err)
	}
	_, _, err = d.run(t, "health")
	msg := cli.FormatError(err)
	if !strings.HasPrefix(msg, "pcpctl: RATE_LIMITED: connection refused: the daemon serves at most 1 connections at once") || !strings.Contains(msg, `"scope":"connections"`) {
		t.Errorf("pcpctl health against a full daemon printed %q, want the coded refusal", msg)
	}
	if code := cli.ExitCode(err); code == 0 {
		t.Errorf("exit code %d, want non-zero", code)
	}
}
