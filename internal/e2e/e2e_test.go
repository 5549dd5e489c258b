// Package e2e tests PCP the way a user runs it: pcpd, pcpctl and the notes
// example app are built once and run as separate processes over real Unix
// sockets, with their state in throwaway XDG directories. It also runs
// scripts/demo --smoke.
package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/testkit"
	"github.com/pcp-dev/pcp/internal/tier1"
)

const notesApp = "org.pcp.notes"

// notesCaps are the capabilities the notes app registers.
var notesCaps = []string{"create", "delete", "list", "read", "search", "update"}

// Binaries built by TestMain. A test that needs them fails, loudly, when
// the build did.
var (
	binDir   string
	buildErr error
	repoRoot string
)

func TestMain(m *testing.M) {
	code := func() int {
		var err error
		if repoRoot, err = filepath.Abs(filepath.Join("..", "..")); err != nil {
			buildErr = err
			return m.Run()
		}
		binDir, err = os.MkdirTemp("", "pcpe2e-bin")
		if err != nil {
			buildErr = err
			return m.Run()
		}
		defer os.RemoveAll(binDir)
		buildErr = build(repoRoot, binDir)
		return m.Run()
	}()
	os.Exit(code)
}

// build compiles pcpd, pcpctl and the notes app into dir.
func build(root, dir string) error {
	cmd := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/pcpd", "./cmd/pcpctl", "./examples/notes")
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build ./cmd/pcpd ./cmd/pcpctl ./examples/notes: %v\n%s", err, out)
	}
	for _, name := range []string{"pcpd", "pcpctl", "notes"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("go build did not produce %s: %w", name, err)
		}
	}
	return nil
}

func bin(t testing.TB, name string) string {
	t.Helper()
	if buildErr != nil {
		t.Fatalf("cannot build the binaries under test: %v", buildErr)
	}
	return filepath.Join(binDir, name)
}

// world is one user's session: XDG directories, a publisher key trusted
// by pcpd, the notes manifest signed with it, and the processes running.
type world struct {
	t                         testing.TB
	dir                       string
	runtime, state, config    string
	socket, control           string
	stateDir, trustDir        string
	keyPrefix, signedManifest string
	notesDB                   string
	env                       []string

	pcpd, notes *proc
	// pcpdArgs are added to pcpd's command line.
	pcpdArgs []string
}

func newWorld(t testing.TB) *world {
	t.Helper()
	bin(t, "pcpd") // fail early if the build failed
	// t.TempDir paths can exceed the 108-byte limit of a socket path.
	dir, err := os.MkdirTemp("", "pcpe2e")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	w := &world{
		t:       t,
		dir:     dir,
		runtime: filepath.Join(dir, "run"),
		state:   filepath.Join(dir, "state"),
		config:  filepath.Join(dir, "config"),
	}
	w.socket = filepath.Join(w.runtime, "pcp", "pcp.sock")
	w.control = filepath.Join(w.runtime, "pcp", "control.sock")
	if len(w.control) >= 108 {
		t.Fatalf("socket path %s is %d bytes, too long for a Unix socket; set TMPDIR to a shorter directory", w.control, len(w.control))
	}
	w.stateDir = filepath.Join(w.state, "pcp")
	w.trustDir = filepath.Join(w.config, "pcp", "trusted-keys")
	w.keyPrefix = filepath.Join(w.config, "pcp", "publisher", "e2e")
	w.signedManifest = filepath.Join(w.state, "pcp-notes", "manifest.signed.json")
	w.notesDB = filepath.Join(w.state, "pcp-notes", "notes.db")
	for _, d := range []string{w.runtime, w.stateDir, w.trustDir, filepath.Dir(w.keyPrefix), filepath.Dir(w.notesDB)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	w.env = append(slices.DeleteFunc(cleanEnv(), func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }),
		"HOME="+dir,
		"XDG_RUNTIME_DIR="+w.runtime,
		"XDG_STATE_HOME="+w.state,
		"XDG_CONFIG_HOME="+w.config,
		"PCP_SOCKET="+w.socket,
		"PCP_CONTROL_SOCKET="+w.control,
	)

	// The publisher's steps, with pcpctl: make a key, trust it, sign.
	w.mustPCPCTL("manifest", "keygen", "--out", w.keyPrefix)
	pub, err := os.ReadFile(w.keyPrefix + ".pub.pem")
	if err != nil {
		t.Fatalf("keygen wrote no public key: %v", err)
	}
	if err := os.WriteFile(filepath.Join(w.trustDir, "e2e.pem"), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	w.mustPCPCTL("manifest", "sign", "--key", w.keyPrefix+".key", "--app", notesApp,
		"-o", w.signedManifest, filepath.Join(repoRoot, "examples", "notes", "manifest.json"))
	return w
}

// cleanEnv is the test's environment without anything that would point
// the processes at the user's own daemon or PCP directories. HOME and the
// cache directories stay, so that the go command keeps its caches.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "PCP_"),
			name == "XDG_RUNTIME_DIR", name == "XDG_STATE_HOME", name == "XDG_CONFIG_HOME", name == "XDG_DATA_HOME":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// proc is a running child process; its output is kept for failure
// reports.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *testkit.SyncBuffer
	done chan struct{}
	err  error // valid after done is closed
}

func (w *world) start(name string, args ...string) *proc {
	w.t.Helper()
	p := &proc{name: name, out: &testkit.SyncBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin(w.t, name), args...)
	p.cmd.Env = w.env
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		w.t.Fatalf("starting %s: %v", name, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	w.t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		if w.t.Failed() {
			w.t.Logf("output of %s (pid %d):\n%s", name, p.cmd.Process.Pid, p.out.String())
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits for the process to exit.
func (w *world) stop(p *proc, sig syscall.Signal) error {
	w.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil && !p.exited() {
		w.t.Fatalf("signalling %s: %v", p.name, err)
	}
	select {
	case <-p.done:
		return p.err
	case <-time.After(15 * time.Second):
		w.t.Fatalf("%s did not exit within 15s of %v", p.name, sig)
		return nil
	}
}

// startPCPD starts the daemon on the world's directories and waits until
// it answers.
func (w *world) startPCPD() {
	w.t.Helper()
	w.pcpd = w.start("pcpd", append([]string{"--socket", w.socket, "--control-socket", w.control,
		"--state-dir", w.stateDir, "--trust-dir", w.trustDir}, w.pcpdArgs...)...)
	w.poll("pcpd to answer health.check", 15*time.Second, func() (bool, string) {
		if w.pcpd.exited() {
			w.t.Fatalf("pcpd exited during start-up: %v\n%s", w.pcpd.err, w.pcpd.out)
		}
		r := w.pcpctl("health")
		return r.err == nil, r.String()
	})
}

// startNotes starts the notes app and waits until pcpd lists all its
// capabilities as available.
func (w *world) startNotes() {
	w.t.Helper()
	w.notes = w.start("notes", "--socket", w.socket, "--manifest", w.signedManifest, "--db", w.notesDB)
	w.waitNotesAvailable(15 * time.Second)
}

// waitNotesAvailable polls until the notes capabilities are served, which
// after a daemon restart means the app has reconnected.
func (w *world) waitNotesAvailable(timeout time.Duration) {
	w.t.Helper()
	w.poll("the notes capabilities to be available", timeout, func() (bool, string) {
		if w.notes.exited() {
			w.t.Fatalf("the notes app exited: %v\n%s", w.notes.err, w.notes.out)
		}
		caps, r := w.caps(notesApp)
		if r.err != nil {
			return false, r.String()
		}
		n := 0
		for _, c := range caps {
			if c.Available {
				n++
			}
		}
		return n == len(notesCaps), r.String()
	})
}

// poll calls f every 100ms until it reports done, or fails the test after
// timeout with f's last word.
func (w *world) poll(what string, timeout time.Duration, f func() (done bool, last string)) {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		done, last := f()
		if done {
			return
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("timed out after %v waiting for %s; last:\n%s", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// result is one pcpctl run.
type result struct {
	args           []string
	stdout, stderr string
	code           int
	err            error
}

func (r result) String() string {
	return fmt.Sprintf("pcpctl %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// pcpctl runs pcpctl with args; a non-zero exit is reported in the result,
// not as a test failure.
func (w *world) pcpctl(args ...string) result {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(w.t, "pcpctl"), args...)
	cmd.Env = w.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: args, stdout: stdout.String(), stderr: stderr.String(), err: err}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		// Not started, or killed by the timeout. No t.Fatal: this may run
		// on a goroutine of the test's own.
		r.code = -1
		r.stderr += fmt.Sprintf("\n(running pcpctl: %v)", err)
	}
	return r
}

func (w *world) mustPCPCTL(args ...string) result {
	w.t.Helper()
	r := w.pcpctl(args...)
	if r.err != nil {
		w.t.Fatalf("%v", r)
	}
	return r
}

// pcpctlJSON runs pcpctl --json args and decodes its output into v.
func (w *world) pcpctlJSON(v any, args ...string) {
	w.t.Helper()
	r := w.mustPCPCTL(append([]string{"--json"}, args...)...)
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		w.t.Fatalf("decoding the output of %v: %v", r, err)
	}
}

func (w *world) caps(appID string) ([]api.Capability, result) {
	args := []string{"--json", "caps"}
	if appID != "" {
		args = append(args, "--app", appID)
	}
	r := w.pcpctl(args...)
	if r.err != nil {
		return nil, r
	}
	var res api.QueryCapabilitiesResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		w.t.Fatalf("decoding the output of %v: %v", r, err)
	}
	return res.Capabilities, r
}

// invoke runs pcpctl --json invoke and decodes the result's data into
// data.
func (w *world) invoke(data any, capability string, params ...string) {
	w.t.Helper()
	var res api.CapabilityResult
	w.pcpctlJSON(&res, append([]string{"invoke", notesApp + "." + capability}, params...)...)
	if res.Status != api.StatusSuccess {
		w.t.Fatalf("invoke %s: status %q, want success", capability, res.Status)
	}
	if err := json.Unmarshal(res.Data, data); err != nil {
		w.t.Fatalf("invoke %s: decoding data %s: %v", capability, res.Data, err)
	}
}

func (w *world) auditVerify() api.AuditVerifyResult {
	w.t.Helper()
	var v api.AuditVerifyResult
	w.pcpctlJSON(&v, "audit", "verify")
	if !v.OK {
		w.t.Fatalf("audit verify: %+v", v)
	}
	return v
}

// Data shapes of the notes capabilities.
type (
	created struct {
		ID        int64  `json:"id"`
		CreatedAt string `json:"created_at"`
	}
	noteSummary struct {
		ID      int64    `json:"id"`
		Title   string   `json:"title"`
		Tags    []string `json:"tags"`
		Snippet string   `json:"snippet"`
	}
	notesList struct {
		Notes []noteSummary `json:"notes"`
	}
	note struct {
		ID    int64    `json:"id"`
		Title string   `json:"title"`
		Body  string   `json:"body"`
		Tags  []string `json:"tags"`
	}
)

func titles(l notesList) []string {
	var out []string
	for _, n := range l.Notes {
		out = append(out, n.Title)
	}
	return out
}

// TestNotesLifecycle drives the notes app through pcpd with pcpctl, then
// restarts pcpd and checks what survives.
func TestNotesLifecycle(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startPCPD()
	w.startNotes()

	all, r := w.caps("")
	if r.err != nil {
		t.Fatalf("%v", r)
	}
	var ids []string
	inspection := 0
	for _, c := range all {
		ids = append(ids, c.ID)
		if strings.HasPrefix(c.ID, "pcp.inspection.") {
			inspection++
		}
	}
	for _, name := range notesCaps {
		if !slices.Contains(ids, notesApp+"."+name) {
			t.Errorf("caps does not list %s.%s; it lists %v", notesApp, name, ids)
		}
	}
	if inspection == 0 {
		t.Errorf("caps lists no pcp.inspection.* capability; it lists %v", ids)
	}
	// The table form, as a user reads it.
	table := w.mustPCPCTL("caps", "--app", notesApp).stdout
	if !regexp.MustCompile(`(?m)^org\.pcp\.notes\.delete\s+confirm\b`).MatchString(table) {
		t.Errorf("caps table does not show delete as confirm:\n%s", table)
	}

	var c1 created
	w.invoke(&c1, "create", "title=Before the restart", "body=Water the plants on Friday", `tags:=["home","e2e"]`)
	if c1.ID < 1 || c1.CreatedAt == "" {
		t.Fatalf("create returned %+v", c1)
	}
	var list notesList
	w.invoke(&list, "list")
	if len(list.Notes) != 1 || list.Notes[0].ID != c1.ID || list.Notes[0].Title != "Before the restart" {
		t.Fatalf("list = %+v, want the note just created", list)
	}
	w.invoke(&list, "list", "tag=nope")
	if len(list.Notes) != 0 {
		t.Errorf("list tag=nope = %+v, want none", list)
	}
	var found notesList
	w.invoke(&found, "search", "query=PLANTS")
	if len(found.Notes) != 1 || found.Notes[0].ID != c1.ID || !strings.Contains(found.Notes[0].Snippet, "plants") {
		t.Errorf("search PLANTS = %+v, want note %d with a snippet", found, c1.ID)
	}
	var n note
	w.invoke(&n, "read", "id="+strconv.FormatInt(c1.ID, 10))
	if n.Body != "Water the plants on Friday" || !slices.Equal(n.Tags, []string{"home", "e2e"}) {
		t.Errorf("read = %+v", n)
	}

	// A handler's error reaches the user with its code and field.
	r = w.pcpctl("invoke", notesApp+".read", "id=999")
	if r.code == 0 || !strings.Contains(r.stderr, "INVALID_PARAMS") || !strings.Contains(r.stderr, "no note 999") || !strings.Contains(r.stderr, `"params.id"`) {
		t.Errorf("read of a missing note: want a non-zero exit naming INVALID_PARAMS, no note 999 and params.id; got %v", r)
	}

	// delete is confirm-level: pcpd refuses it without a confirmation.
	r = w.pcpctl("invoke", notesApp+".delete", "id="+strconv.FormatInt(c1.ID, 10))
	if r.code == 0 || !strings.Contains(r.stderr, "CONFIRMATION_REQUIRED") || !strings.Contains(r.stderr, notesApp+".delete") {
		t.Errorf("delete: want a non-zero exit naming CONFIRMATION_REQUIRED and the capability; got %v", r)
	}
	if !strings.Contains(r.stderr, `"confirmation_type":"delete"`) || !strings.Contains(r.stderr, `"undo_window_ms":10000`) {
		t.Errorf("delete: the confirmation data does not carry the manifest's confirmation_type and undo window: %v", r)
	}
	w.invoke(&list, "list")
	if len(list.Notes) != 1 {
		t.Errorf("after the refused delete, list = %+v, want the note still there", list)
	}

	before := w.auditVerify()
	if before.Entries < 5 {
		t.Errorf("audit verify counts %d entries, want at least the registration and 5 invocations", before.Entries)
	}

	// Restart pcpd on the same state. SIGTERM is a clean shutdown.
	if err := w.stop(w.pcpd, syscall.SIGTERM); err != nil {
		t.Fatalf("pcpd exited with %v after SIGTERM, want status 0", err)
	}
	if _, err := os.Stat(w.socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket %s left behind after a clean shutdown (stat: %v)", w.socket, err)
	}
	w.startPCPD()

	// The manifest was persisted: the capabilities are listed at once,
	// whether or not the app has reconnected yet.
	persisted, r := w.caps(notesApp)
	if r.err != nil {
		t.Fatalf("%v", r)
	}
	if len(persisted) != len(notesCaps) {
		t.Errorf("right after the restart caps --app %s lists %d capabilities, want %d:\n%s", notesApp, len(persisted), len(notesCaps), r.stdout)
	}
	// The app retries with a backoff of at most 5s.
	w.waitNotesAvailable(15 * time.Second)
	if w.notes.exited() {
		t.Fatalf("the notes app exited while pcpd restarted: %v", w.notes.err)
	}

	var c2 created
	w.invoke(&c2, "create", "title=After the restart", "body=still here")
	w.invoke(&list, "list")
	if got, want := titles(list), []string{"After the restart", "Before the restart"}; !slices.Equal(got, want) {
		t.Errorf("list after the restart = %q, want %q", got, want)
	}

	after := w.auditVerify()
	if after.Entries <= before.Entries {
		t.Errorf("audit entries after the restart: %d, want more than %d", after.Entries, before.Entries)
	}
	t.Logf("audit chain: %d entries before the restart, %d after", before.Entries, after.Entries)
	var tail api.AuditTailResult
	w.pcpctlJSON(&tail, "audit", "tail", "-n", "1000")
	if int64(len(tail.Entries)) != after.Entries {
		t.Errorf("audit tail -n 1000 returned %d entries, verify counted %d", len(tail.Entries), after.Entries)
	}

	// And the app stops cleanly too.
	if err := w.stop(w.notes, syscall.SIGTERM); err != nil {
		t.Errorf("notes exited with %v after SIGTERM, want status 0", err)
	}
}

// TestKillDuringBurst kills pcpd with SIGKILL while invocations are in
// flight: every invocation pcpctl reported as a success must be in the
// audit log after the restart, and the chain must verify.
func TestKillDuringBurst(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startPCPD()
	w.startNotes()

	const workers = 4
	var (
		mu        sync.Mutex
		succeeded []string // titles
		failed    int
		inFlight  int // pcpctl runs started and not yet returned
		killed    bool
		wg        sync.WaitGroup
	)
	stop := make(chan struct{})
	firstWave := make(chan struct{})
	allInFlight := make(chan struct{}) // closed once every worker is mid-invocation after the first wave
	failedAfterKill := make(chan struct{})
	var onceWave, onceFlight, onceFailed sync.Once
	for i := range workers {
		wg.Go(func() {
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				title := fmt.Sprintf("burst %d-%d", i, j)
				mu.Lock()
				inFlight++
				if inFlight == workers && len(succeeded) >= 2*workers {
					onceFlight.Do(func() { close(allInFlight) })
				}
				mu.Unlock()
				r := w.pcpctl("--timeout", "10s", "invoke", notesApp+".create", "title="+title, "body=x")
				mu.Lock()
				inFlight--
				if r.err == nil {
					succeeded = append(succeeded, title)
					if len(succeeded) >= 2*workers {
						onceWave.Do(func() { close(firstWave) })
					}
				} else {
					failed++
					if killed {
						onceFailed.Do(func() { close(failedAfterKill) })
					}
				}
				mu.Unlock()
			}
		})
	}
	fail := func(format string, args ...any) {
		close(stop)
		wg.Wait()
		t.Fatalf(format, args...)
	}
	select {
	case <-firstWave:
	case <-time.After(60 * time.Second):
		fail("fewer than %d invocations succeeded in 60s (%d failed)", 2*workers, failed)
	}
	// The kill lands while every worker has an invocation in flight.
	select {
	case <-allInFlight:
	case <-time.After(60 * time.Second):
		fail("the workers were never all mid-invocation at once")
	}
	mu.Lock()
	killed = true
	mu.Unlock()
	w.stop(w.pcpd, syscall.SIGKILL)
	// Invocations started after the kill fail; keep going until one has,
	// then stop.
	select {
	case <-failedAfterKill:
	case <-time.After(60 * time.Second):
		fail("no invocation failed after pcpd was killed")
	}
	close(stop)
	wg.Wait()
	t.Logf("%d invocations succeeded, %d failed around the kill", len(succeeded), failed)

	// Offline verification works on the file pcpd left behind.
	offline := w.pcpctl("--json", "audit", "verify", "--db", filepath.Join(w.stateDir, "pcp.db"))
	if offline.err != nil {
		t.Errorf("offline audit verify after SIGKILL: %v", offline)
	}

	w.startPCPD()
	v := w.auditVerify()
	var tail api.AuditTailResult
	w.pcpctlJSON(&tail, "audit", "tail", "-n", "1000")
	if int64(len(tail.Entries)) != v.Entries {
		t.Fatalf("audit tail returned %d entries, verify counted %d; raise -n", len(tail.Entries), v.Entries)
	}
	audited := map[string]bool{}
	for _, e := range tail.Entries {
		if e.Kind == "invoke" && e.CapabilityID == notesApp+".create" && e.Outcome == api.StatusSuccess {
			audited[e.ParamsDigest] = true
		}
	}
	missing := 0
	for _, title := range succeeded {
		params, err := json.Marshal(map[string]string{"title": title, "body": "x"})
		if err != nil {
			t.Fatal(err)
		}
		if !audited[audit.ParamsDigest(params)] {
			missing++
			t.Logf("invocation %q succeeded but has no audit entry", title)
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d successful invocations have no audit entry", missing, len(succeeded))
	}

	// After the restart the app reconnects and the service goes on.
	w.waitNotesAvailable(15 * time.Second)
	var c created
	w.invoke(&c, "create", "title=after the crash", "body=y")
	w.auditVerify()
}

// TestAuditTamper damages one record of the stopped daemon's audit log
// and checks that offline verification names it.
func TestAuditTamper(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startPCPD()
	w.startNotes()
	for i := range 3 {
		var c created
		w.invoke(&c, "create", fmt.Sprintf("title=note %d", i), "body=b")
	}
	// The second create is the entry to damage.
	var tail api.AuditTailResult
	w.pcpctlJSON(&tail, "audit", "tail", "-n", "100")
	var seq int64
	creates := 0
	for _, en := range tail.Entries {
		if en.CapabilityID == notesApp+".create" && en.Outcome == api.StatusSuccess {
			if creates++; creates == 2 {
				seq = en.Seq
			}
		}
	}
	if seq == 0 {
		t.Fatalf("no second create in the audit log: %+v", tail.Entries)
	}
	if err := w.stop(w.notes, syscall.SIGTERM); err != nil {
		t.Errorf("notes: %v", err)
	}
	if err := w.stop(w.pcpd, syscall.SIGTERM); err != nil {
		t.Errorf("pcpd: %v", err)
	}

	dbPath := filepath.Join(w.stateDir, "pcp.db")
	ok := w.pcpctl("audit", "verify", "--db", dbPath)
	if ok.err != nil {
		t.Fatalf("offline verify before tampering: %v", ok)
	}

	// Damage the record of the second create: one byte of its entry.
	seg := filepath.Join(w.stateDir, "audit", "00000000000000000000.log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	off := 16
	for range seq - 1 {
		off += 8 + int(binary.BigEndian.Uint32(b[off:]))
	}
	b[off+8+72+10] ^= 0x01
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}

	r := w.pcpctl("audit", "verify", "--db", dbPath)
	if r.code == 0 {
		t.Fatalf("offline verify after tampering with seq %d exited 0: %v", seq, r)
	}
	if !regexp.MustCompile(`\b` + strconv.FormatInt(seq, 10) + `\b`).MatchString(r.stderr) {
		t.Errorf("offline verify does not name seq %d on stderr: %v", seq, r)
	}
	t.Logf("tampered with seq %d; pcpctl audit verify --db: %s", seq, strings.TrimSpace(r.stderr))
	var v api.AuditVerifyResult
	rj := w.pcpctl("--json", "audit", "verify", "--db", dbPath)
	if rj.code == 0 {
		t.Errorf("offline verify --json after tampering exited 0: %v", rj)
	}
	if err := json.Unmarshal([]byte(rj.stdout), &v); err != nil {
		t.Fatalf("decoding %v: %v", rj, err)
	}
	if v.OK || v.BrokenSeq != seq || v.Entries != seq-1 {
		t.Errorf("verify --json = %+v, want ok false, broken_seq %d and %d intact entries", v, seq, seq-1)
	}
}

// TestDemoSmoke runs scripts/demo --smoke, the CI form of the demo.
func TestDemoSmoke(t *testing.T) {
	t.Parallel()
	bin(t, "pcpd") // the demo builds for itself, but a broken build should fail here first
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "scripts", "demo"), "--smoke")
	cmd.Dir = repoRoot
	cmd.Env = append(cleanEnv(), "PCP_DEMO_BIN="+t.TempDir())
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/demo --smoke: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "smoke test passed") {
		t.Errorf("scripts/demo --smoke exited 0 without saying it passed:\n%s", out)
	}
	t.Logf("scripts/demo --smoke passed in %v", time.Since(start).Round(time.Millisecond))
}

// TestHungApp stops the notes process (SIGSTOP), as a hung app would be:
// the liveness checks mark it unresponsive, invocations fail fast with
// APP_UNRESPONSIVE instead of waiting for the execution timeout, everyone
// else is served, and once it runs again (SIGCONT) it serves again.
func TestHungApp(t *testing.T) {
	w := newWorld(t)
	w.pcpdArgs = []string{"--liveness-interval", "200ms", "--liveness-timeout", "300ms"}
	w.startPCPD()
	w.startNotes()
	var created map[string]any
	w.invoke(&created, "create", "title=before", "body=hang")

	if err := w.notes.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer w.notes.cmd.Process.Signal(syscall.SIGCONT)
	w.poll("the notes app to be marked unresponsive", 10*time.Second, func() (bool, string) {
		var apps api.AppsListResult
		w.pcpctlJSON(&apps, "apps")
		for _, a := range apps.Apps {
			if a.AppID == notesApp {
				return a.State == api.AppUnresponsive, a.State
			}
		}
		return false, "notes not listed"
	})
	start := time.Now()
	r := w.pcpctl("invoke", notesApp+".list")
	if r.code == 0 || !strings.Contains(r.stderr, "APP_UNRESPONSIVE") {
		t.Fatalf("invoke of a hung app: %s", r)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("APP_UNRESPONSIVE took %v; it should not wait for the execution timeout", d)
	}
	// The daemon serves everyone else meanwhile.
	w.mustPCPCTL("invoke", "pcp.inspection.ping")

	if err := w.notes.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	w.poll("the notes app to answer again", 10*time.Second, func() (bool, string) {
		r := w.pcpctl("invoke", notesApp+".list")
		return r.code == 0, r.String()
	})
	var tail api.AuditTailResult
	w.pcpctlJSON(&tail, "audit", "tail", "-n", "50")
	var states []string
	for _, e := range tail.Entries {
		if e.Kind == "liveness" {
			states = append(states, e.Outcome)
		}
	}
	if len(states) < 2 || states[0] != "unresponsive" || states[len(states)-1] != "responsive" {
		t.Errorf("liveness audit entries = %v, want unresponsive ... responsive", states)
	}
}

// TestPolicySIGHUP: the user's policy file decides trust levels, and a
// real SIGHUP to pcpd rereads it.
func TestPolicySIGHUP(t *testing.T) {
	w := newWorld(t)
	path := filepath.Join(w.config, "pcp", "policy.toml")
	if err := os.WriteFile(path, []byte("[apps.\"org.pcp.notes\".capabilities.create]\ntrust_level = \"deny\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.startPCPD()
	w.startNotes()
	r := w.pcpctl("invoke", notesApp+".create", "title=x", "body=y")
	if r.code == 0 || !strings.Contains(r.stderr, "PERMISSION_DENIED") {
		t.Fatalf("create denied by policy: %s", r)
	}
	if err := os.WriteFile(path, []byte("# create allowed again\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := w.pcpd.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	w.poll("the reloaded policy to allow create", 10*time.Second, func() (bool, string) {
		r := w.pcpctl("invoke", notesApp+".create", "title=x", "body=y")
		return r.code == 0, r.String()
	})
}

// TestTier1Faults: the notes app is a Tier 1 app on its per-app socket.
// Stopped mid-invocation it costs the caller the capability's timeout
// (504 on the framed face); killed mid-invocation the caller is told at
// once (APP_UNRESPONSIVE); restarted, it reconnects and serves; and the
// daemon serves everyone else throughout.
func TestTier1Faults(t *testing.T) {
	w := newWorld(t)
	// A short timeout for list; long liveness checks, so that the hang is
	// found by the invocation's own deadline.
	path := filepath.Join(w.config, "pcp", "policy.toml")
	if err := os.WriteFile(path, []byte("[apps.\"org.pcp.notes\".capabilities.list]\ntimeout = \"1s\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	w.pcpdArgs = []string{"--liveness-interval", "1h"}
	w.startPCPD()
	w.startNotes()

	// The app's socket is where apps.socket said, and invocations take
	// the native route.
	if _, err := os.Stat(filepath.Join(w.runtime, "pcp", "apps", notesApp+".sock")); err != nil {
		t.Fatalf("per-app socket: %v", err)
	}
	var listed notesList
	w.invoke(&listed, "list")
	var tail api.AuditTailResult
	w.pcpctlJSON(&tail, "audit", "tail", "-n", "1")
	var detail struct{ Route string }
	if len(tail.Entries) == 1 {
		json.Unmarshal(tail.Entries[0].Detail, &detail)
	}
	if detail.Route != "native" {
		t.Fatalf("last audit entry %+v, want the native route", tail.Entries)
	}

	// Hung: SIGSTOP, then an execution over the framed face.
	if err := w.notes.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r := w.pcpctl("--framed", "invoke", notesApp+".list")
	if r.code == 0 || !strings.Contains(r.stderr, "EXECUTION_TIMEOUT") || !strings.Contains(r.stderr, "504") {
		t.Fatalf("invoke of a stopped app: %s", r)
	}
	if d := time.Since(start); d < 900*time.Millisecond || d > 10*time.Second {
		t.Errorf("EXECUTION_TIMEOUT after %v, want about the 1 s timeout", d)
	}
	w.mustPCPCTL("invoke", "pcp.inspection.ping")

	// Crash with an invocation in flight: the caller learns at once.
	type outcome struct {
		r  result
		at time.Duration
	}
	done := make(chan outcome, 1)
	queued := unreadBytes(t, w.notes.cmd.Process.Pid)
	start = time.Now()
	go func() {
		r := w.pcpctl("invoke", notesApp+".search", "query=x")
		done <- outcome{r, time.Since(start)}
	}()
	// The app is still stopped, so the search waits in the daemon for its
	// 30 s timeout. The kill must come after the daemon sent it (else the
	// answer would be APP_NOT_FOUND): wait until the InvokeCapability sits
	// unread in the stopped app's socket, its receive queue grown by at
	// least that frame's size (Pings, the only other traffic, are 6 bytes
	// every 10 s).
	w.poll("the search to reach the stopped app", 15*time.Second, func() (bool, string) {
		q := unreadBytes(t, w.notes.cmd.Process.Pid)
		return q-queued >= minSearchFrame(t), fmt.Sprintf("%d bytes unread by the app, %d before the search", q, queued)
	})
	if err := w.notes.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		if o.r.code == 0 || !strings.Contains(o.r.stderr, "APP_UNRESPONSIVE") {
			t.Fatalf("invoke when the app died: %s", o.r)
		}
		if o.at > 5*time.Second {
			t.Errorf("the caller waited %v for a dead app", o.at)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the invocation in flight never returned after the app died")
	}
	<-w.notes.done
	w.mustPCPCTL("invoke", "pcp.inspection.ping")
	r = w.pcpctl("invoke", notesApp+".list")
	if r.code == 0 || !strings.Contains(r.stderr, "APP_NOT_FOUND") {
		t.Fatalf("invoke of a dead app: %s", r)
	}

	// Restarted, it reconnects to its socket and serves again.
	w.startNotes()
	w.invoke(&listed, "list")
	if v := w.auditVerify(); !v.OK {
		t.Fatalf("audit chain: %+v", v)
	}
}

// unreadBytes is what waits unread in the receive queues of the Unix
// stream sockets of process pid (ss's Recv-Q): for a stopped Tier 1 app,
// what the daemon sent it since it stopped.
func unreadBytes(t *testing.T, pid int) int {
	t.Helper()
	out, err := exec.Command("ss", "-xpnH").Output()
	if err != nil {
		t.Fatalf("ss -xpnH (iproute2) lists the app's sockets: %v", err)
	}
	total, seen := 0, false
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "u_str" || f[1] != "ESTAB" || !strings.Contains(line, fmt.Sprintf(",pid=%d,", pid)) {
			continue
		}
		n, err := strconv.Atoi(f[2])
		if err != nil {
			t.Fatalf("ss: Recv-Q %q: %v", f[2], err)
		}
		total, seen = total+n, true
	}
	if !seen {
		t.Fatalf("ss lists no connected Unix socket of pid %d:\n%s", pid, out)
	}
	return total
}

// minSearchFrame is the size of the smallest InvokeCapability frame the
// daemon can send for the search of TestTier1Faults.
func minSearchFrame(t *testing.T) int {
	t.Helper()
	p, err := tier1.Encode(tier1.InvokeCapability{RequestID: 1, CapabilityID: notesApp + ".search", Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"query":"x"}`)})
	if err != nil {
		t.Fatal(err)
	}
	return len(frame.Append(nil, frame.Frame{Type: frame.InvokeCapability, Payload: p}))
}

// TestRevokedAppComesBack: a revoked notes app is told why and keeps
// running; once the user allows it again it serves again, with no
// relaunch.
func TestRevokedAppComesBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	w.startPCPD()
	w.startNotes()
	w.mustPCPCTL("revoke", notesApp, "--reason", "testing")
	r := w.pcpctl("invoke", notesApp+".list")
	if r.code == 0 || !strings.Contains(r.stderr, "PERMISSION_DENIED") {
		t.Fatalf("invoke of a revoked app: %s", r)
	}
	w.mustPCPCTL("apps", "allow", notesApp)
	w.waitNotesAvailable(15 * time.Second) // fails if the app exited
	var listed notesList
	w.invoke(&listed, "list")
	if !strings.Contains(w.notes.out.String(), "revoked by the user: testing") {
		t.Errorf("the app did not log why it was shut down:\n%s", w.notes.out)
	}
}
