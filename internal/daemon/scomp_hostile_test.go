package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/face/scomp"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// A binding called 10,000 times in one eval against a policy's rate
// limit: the calls past the burst are refused RATE_LIMITED, scope app,
// each catchable as a BindingError; the refusals reach the audit log in
// aggregate, not one entry each; and the daemon serves the session's
// next eval and other clients as before.
func TestScompHostileBindingFlood(t *testing.T) {
	testkit.CheckGoroutines(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "policy.toml")
	if err := os.WriteFile(policy, []byte("[defaults]\nrate_per_app = 100.0\nrate_per_app_burst = 50\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := serve(t, Config{AllowUnsigned: true, PolicyFile: policy, Scomp: ScompConfig{EvalTimeout: 2 * time.Minute}})
	serveNotes(t, r.cfg.Socket)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := client.DialScomp(ctx, r.cfg.Scomp.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const calls = 10000
	v, err := s.Eval(ctx, `
let ok = 0, refused = 0, before = -1, first = null, other = null, tookMS = 0;
const start = Date.now();
for (let i = 0; i < `+strconv.Itoa(calls)+`; i++) {
  try {
    await org_example_notes_create({title: "n" + i});
    ok++;
  } catch (e) {
    if (e.name !== "BindingError" || !e.pcp) throw e;
    if (e.pcp.name !== "RATE_LIMITED") { other = e.pcp; break; }
    if (first === null) { first = {code: e.pcp.code, name: e.pcp.name, scope: e.pcp.data && e.pcp.data.scope}; before = ok; tookMS = Date.now() - start; }
    refused++;
  }
}
({ok, refused, before, first, other, tookMS})`)
	if err != nil {
		t.Fatalf("the flood's eval: %v", err)
	}
	var got struct {
		OK, Refused, Before int
		TookMS              int64
		First               struct {
			Code  int
			Name  string
			Scope string
		}
		Other json.RawMessage
	}
	if err := json.Unmarshal(v, &got); err != nil {
		t.Fatalf("the flood's value %s: %v", v, err)
	}
	t.Logf("%d calls: %d succeeded, %d refused, %d before the first refusal", calls, got.OK, got.Refused, got.Before)
	if string(got.Other) != "null" || got.OK+got.Refused != calls {
		t.Fatalf("a call failed other than RATE_LIMITED: %s", v)
	}
	if got.First.Code != int(api.CodeRateLimited) || got.First.Name != "RATE_LIMITED" || got.First.Scope != "app" {
		t.Errorf("the first refusal is %+v, want -32018 RATE_LIMITED scope app", got.First)
	}
	// The burst, plus what 100 calls a second refill while the calls
	// before the first refusal ran (on a loaded machine, that takes a
	// while), plus one for the clock's grain.
	if most := 50 + int(got.TookMS)/10 + 2; got.Before < 50 || got.Before > most {
		t.Errorf("%d calls succeeded before the first refusal, %d ms in, want the burst of 50 (up to %d with the refill)", got.Before, got.TookMS, most)
	}

	// The daemon still serves: the session, another session, another
	// face.
	if v, err := s.Eval(ctx, "1 + 1"); err != nil || string(v) != "2" {
		t.Errorf("the next eval of the flooding session: %s, %v", v, err)
	}
	other, err := client.DialScomp(ctx, r.cfg.Scomp.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if v, err := other.Eval(ctx, "const r = await pcp_inspection_ping({}); typeof r"); err != nil || string(v) != `"object"` {
		t.Errorf("another session's ping after the flood: %s, %v", v, err)
	}
	user, err := client.Dial(ctx, r.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	if _, err := user.Health(ctx); err != nil {
		t.Errorf("health on the control socket after the flood: %v", err)
	}

	// The refusals reach the audit log in aggregate: one entry a second
	// per connection, and per app for the app's limit. The counts not
	// written yet are written when the broker closes: after a restart
	// on the same state, every refusal is counted, in a few entries.
	audited := func(c *client.Client) (entries, refusals, successes int) {
		t.Helper()
		tail, err := c.AuditTail(ctx, calls+1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range tail.Entries {
			if e.Kind != api.AuditInvoke || e.CapabilityID != "org.example.notes.create" {
				continue
			}
			if e.Outcome == "success" {
				successes++
				continue
			}
			if e.Outcome != "RATE_LIMITED" {
				t.Errorf("an audit entry of outcome %s: %s", e.Outcome, e.Detail)
				continue
			}
			var d struct {
				Suppressed int `json:"suppressed_since_last_entry"`
			}
			json.Unmarshal(e.Detail, &d)
			entries++
			refusals += 1 + d.Suppressed
		}
		return entries, refusals, successes
	}
	entries, refusals, successes := audited(user)
	if successes != got.OK || refusals > got.Refused || entries > 30 {
		t.Errorf("while serving, the audit log holds %d successes (want %d) and %d refusals (at most %d) in %d entries (want a few)",
			successes, got.OK, refusals, got.Refused, entries)
	}
	s.Close()
	other.Close()
	user.Close()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	again := serve(t, Config{StateDir: r.cfg.StateDir})
	user, err = client.Dial(ctx, again.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	entries, refusals, successes = audited(user)
	t.Logf("audit: %d successes, %d refusals in %d entries", successes, refusals, entries)
	if successes != got.OK || refusals != got.Refused {
		t.Errorf("the audit log counts %d successes and %d refusals, want %d and %d", successes, refusals, got.OK, got.Refused)
	}
	// One entry a second for each of the two limits, and the last counts.
	if entries > 30 {
		t.Errorf("%d audit entries for %d refusals: they are not aggregated", entries, got.Refused)
	}
}

// memStatus reads VmRSS and VmHWM of this process (pcpd runs in it), in
// bytes.
func memStatus(t *testing.T) (rss, hwm int64) {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("/proc/self/status %s: %v", k, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 || hwm == 0 {
		t.Fatal("/proc/self/status names no VmRSS or VmHWM")
	}
	return rss, hwm
}

// 100 sessions at once, each calling a binding and allocating 4 MiB,
// twice over: every eval succeeds, the budget holds every session's
// heap, pcpd's memory stays within its bounds and does not grow from one
// round to the next, and everything is let go of.
func TestScompHostileHundredSessions(t *testing.T) {
	testkit.CheckGoroutines(t)
	const sessions, limit = 100, 16 << 20
	r := serve(t, Config{Scomp: ScompConfig{Sessions: 128, MemoryLimit: limit, EvalTimeout: 2 * time.Minute}})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	total := int64(scomp.DefaultMemoryTotal)
	key := "uid:" + strconv.Itoa(os.Getuid())
	// Start the peak from here (5 resets VmHWM); without it, the peak
	// since the process started bounds the rounds' from above.
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Logf("VmHWM not reset (%v): the process's peak so far is checked", err)
	}
	debug.FreeOSMemory()
	baseline, _ := memStatus(t)
	round := func(n int) (rss int64) {
		t.Helper()
		held := make([]*client.Scomp, sessions)
		errs := make([]error, sessions)
		var wg sync.WaitGroup
		for i := range held {
			wg.Go(func() { held[i], errs[i] = client.DialScomp(ctx, r.cfg.Scomp.Socket) })
		}
		wg.Wait()
		defer func() {
			for _, s := range held {
				if s != nil {
					s.Close()
				}
			}
		}()
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("round %d: opening %d sessions: %v", n, sessions, err)
		}
		if got, want := r.scomp.face.MemoryInUse(), int64(sessions*limit); got != want {
			t.Errorf("round %d: %d sessions reserved %d bytes, want %d", n, sessions, got, want)
		}
		vals := make([]json.RawMessage, sessions)
		for i, s := range held {
			wg.Go(func() {
				vals[i], errs[i] = s.Eval(ctx, "const p = await pcp_inspection_ping({}); const s = 'x'.repeat(4 << 20); typeof p + ':' + s.length")
			})
		}
		wg.Wait()
		for i := range held {
			if errs[i] != nil || string(vals[i]) != `"object:4194304"` {
				t.Fatalf("round %d: session %d's eval: %s, %v", n, i, vals[i], errs[i])
			}
		}
		for i, s := range held {
			s.Close()
			held[i] = nil
		}
		waitConns(t, r.Server, fmt.Sprintf("round %d: every session ended", n), func() bool {
			return r.scomp.sessions.count(key) == 0 && r.perUID[os.Getuid()] == 0
		})
		if got := r.scomp.face.MemoryInUse(); got != 0 {
			t.Errorf("round %d: %d bytes still reserved after every session ended", n, got)
		}
		debug.FreeOSMemory()
		rss, hwm := memStatus(t)
		t.Logf("round %d: VmRSS %d MiB, VmHWM %d MiB (baseline %d MiB)", n, rss>>20, hwm>>20, baseline>>20)
		if hwm >= baseline+total {
			t.Errorf("round %d: peak RSS %d MiB, want below the baseline %d MiB + the budget %d MiB", n, hwm>>20, baseline>>20, total>>20)
		}
		return rss
	}
	rss1 := round(1)
	rss2 := round(2)
	if rss2 > rss1+64<<20 {
		t.Errorf("RSS grew from %d MiB after round 1 to %d MiB after round 2: more than 64 MiB", rss1>>20, rss2>>20)
	}
}

// probeManifest is an app whose one capability tells the test it ran.
const probeManifest = `{"version":"1.0","signature":"","capabilities":[
{"name":"enter","tier":1,"trust_level":"auto","description":"Tell the test an eval got here","parameters":[]}]}`

// serveProbe registers org.example.probe, whose enter sends on entered,
// and serves it until the test ends.
func serveProbe(t *testing.T, socket string, entered chan<- struct{}) {
	t.Helper()
	serveApp(t, &client.App{AppID: "org.example.probe", Manifest: json.RawMessage(probeManifest), Socket: socket,
		Capabilities: map[string]client.CapabilityFunc{
			"enter": func(context.Context, json.RawMessage) (any, error) {
				select {
				case entered <- struct{}{}:
				default:
				}
				return map[string]bool{"ok": true}, nil
			},
		}})
}

// A session spinning in while (true) {} does not hold up another
// session's eval: the other answers while the spinning one runs, and the
// spinning one ends at its time limit with a TimeoutError.
func TestScompHostileSpinDoesNotStall(t *testing.T) {
	testkit.CheckGoroutines(t)
	const timeout = 3 * time.Second
	r := serve(t, Config{AllowUnsigned: true, Scomp: ScompConfig{EvalTimeout: timeout}})
	entered := make(chan struct{}, 1)
	serveProbe(t, r.cfg.Socket, entered)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	spin, err := client.DialScomp(ctx, r.cfg.Scomp.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer spin.Close()
	calm, err := client.DialScomp(ctx, r.cfg.Scomp.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer calm.Close()

	type answer struct {
		err error
		at  time.Time
	}
	spun := make(chan answer, 1)
	go func() {
		_, err := spin.Eval(ctx, "await org_example_probe_enter({}); while (true) {}")
		spun <- answer{err, time.Now()}
	}()
	select {
	case <-entered: // the spinning eval is past its binding call, into the loop
	case a := <-spun:
		t.Fatalf("the spinning eval ended before spinning: %v", a.err)
	case <-ctx.Done():
		t.Fatal("the spinning eval never called its binding")
	}
	asked := time.Now()
	v, err := calm.Eval(ctx, "1 + 1")
	calmAt := time.Now()
	if err != nil || string(v) != "2" {
		t.Fatalf("the other session's eval: %s, %v", v, err)
	}
	a := <-spun
	var se *client.ScompError
	if !errors.As(a.err, &se) || se.Data.Kind != "TimeoutError" {
		t.Fatalf("the spinning eval: %v, want a TimeoutError", a.err)
	}
	if !calmAt.Before(a.at) {
		t.Errorf("the other session's eval answered %v after the spinning one's TimeoutError", calmAt.Sub(a.at))
	}
	if d := calmAt.Sub(asked); d > timeout/2 {
		t.Errorf("the other session's eval took %v beside the spinning one, want well under the %v time limit", d, timeout)
	}
}
