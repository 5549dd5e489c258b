package daemon

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// The dashboard's tests drive Debian's chromium through chromedp: what
// the user sees and clicks is what is tested. Screenshots of each page
// are kept in artifactDir.

const dashAppID = "org.pcp.test.dash"

var dashManifest = json.RawMessage(`{"version":"1.0","signature":"","capabilities":[` +
	`{"name":"delete","tier":1,"trust_level":"confirm","confirmation_type":"delete","description":"Delete a note","parameters":[{"name":"note_id","type":"string"}]},` +
	`{"name":"send","tier":1,"trust_level":"confirm","confirmation_type":"send","description":"Send a message","undo_window_ms":60000,"parameters":[{"name":"to","type":"string"}]},` +
	`{"name":"peek","tier":1,"trust_level":"auto","description":"Read a note"}]}`)

// startServer runs a real daemon like start, and returns the Server
// itself (the tests publish on its broker to time the event stream).
func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	dir, err := os.MkdirTemp("", "pcpd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cfg.Socket = filepath.Join(dir, "run", "pcp.sock")
	cfg.StateDir = filepath.Join(dir, "state")
	cfg.TrustDir = filepath.Join(dir, "trust")
	cfg.PolicyFile = filepath.Join(dir, "policy.toml")
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ready := make(chan struct{})
	cfg.Ready = func() { close(ready) }
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { s.Serve(context.Background()); close(served) }()
	<-ready
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Shutdown(ctx)
		<-served
	})
	return s
}

// artifactDir is where the tests keep the pages' screenshots:
// $PCP_TEST_ARTIFACTS/dashboard, else testdata-out/dashboard beside this
// package (not in git).
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join("testdata-out", "dashboard")
	if a := os.Getenv("PCP_TEST_ARTIFACTS"); a != "" {
		dir = filepath.Join(a, "dashboard")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser starts headless chromium, failing when it is not installed.
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("the dashboard tests need Debian's chromium (scripts/desktop install installs it): ", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	if os.Geteuid() == 0 {
		// Chromium refuses to start as root with its sandbox on (its
		// setuid/namespace sandbox is not for root); CI runs the tests
		// as root in a throwaway container, and the page it loads is
		// our own.
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel2 := chromedp.NewContext(actx)
	t.Cleanup(cancel2)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// do runs browser steps with a bound, failing the test on error.
func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := chromedp.Do(cctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// get runs one browser action that answers a value, with a bound.
func get[T any](t *testing.T, ctx context.Context, what string, a chromedp.Action[T]) T {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	v, err := chromedp.Run(cctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return v
}

// css is a CSS selector of the first match.
func css(sel string) chromedp.CSS { return chromedp.CSS(sel) }

// shoot saves a full-page screenshot as name.png in the artifacts.
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	get(t, ctx, "scrolling to the top", chromedp.Evaluate[int](`window.scrollTo(0, 0), 0`))
	png := get(t, ctx, "screenshot "+name, chromedp.FullScreenshot(100))
	path := filepath.Join(artifactDir(t), name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}

// seenMS reads the wall-clock time (Unix ms) at which the page drew the
// element matching sel.
func seenMS(t *testing.T, ctx context.Context, sel string) float64 {
	t.Helper()
	do(t, ctx, "waiting for "+sel, chromedp.WaitVisible(css(sel)))
	v := get(t, ctx, "reading when "+sel+" was drawn", chromedp.AttributeValue(css(sel), "data-seen-ms"))
	f, err := strconv.ParseFloat(v.Value, 64)
	if !v.Exists || err != nil {
		t.Fatalf("%s has no data-seen-ms (%q)", sel, v.Value)
	}
	return f
}

func unixMS(t time.Time) float64 { return float64(t.UnixNano()) / 1e6 }

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// Goals of the dashboard, asserted on medians.
const (
	firstPaintGoalMS = 200
	eventGoalMS      = 100
)

// TestDashboardInBrowser is the user's side, in chromium: log in with
// the URL dashboard.login makes; an agent asks for a confirm-level
// capability and the confirmation appears, live, with its description
// and countdown; Approve lets the waiting call run, Deny reaches the
// agent as CONFIRMATION_DENIED; an approved action with an undo window
// is a job whose Undo works inside its window; the event stream, the
// apps page (revoke, allow) and the audit log's broken chain after
// tampering. It measures the first paint and the delay from publish to
// screen.
func TestDashboardInBrowser(t *testing.T) {
	s := startServer(t, Config{AllowUnsigned: true, RateLimits: &core.RateLimits{}, Dashboard: "127.0.0.1:0"})
	ctx := context.Background()
	ran := make(chan string, 8)
	app, err := client.Dial(ctx, s.cfg.Socket, client.Options{Handler: func(ctx context.Context, method string, params json.RawMessage) (any, error) {
		var p api.InvokeCapabilityParams
		json.Unmarshal(params, &p)
		ran <- p.CapabilityID + " " + string(p.Params)
		return &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"done":true}`)}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	yes := true
	if _, err := app.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: dashAppID, Manifest: dashManifest, Serve: &yes}); err != nil {
		t.Fatal(err)
	}
	agent, err := client.Dial(ctx, s.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	user, err := client.Dial(ctx, s.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()

	if _, err := agent.DashboardLogin(ctx); !errors.Is(err, &api.Error{Code: api.CodePermissionDenied}) {
		t.Errorf("dashboard.login on the agent socket: %v, want PERMISSION_DENIED", err)
	}
	login, err := user.DashboardLogin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.DashboardAddr()
	if !strings.HasPrefix(login.URL, base+"/login?token=") {
		t.Fatalf("login URL %q is not on %s", login.URL, base)
	}

	b := browser(t)
	do(t, b, "logging in", chromedp.Navigate(login.URL), chromedp.WaitVisible(css(`#live.on`)),
		chromedp.WaitVisible(css(`body[data-rendered-ms]`)))
	loc := get(t, b, "location", chromedp.Location())
	if loc != base+"/confirmations" {
		t.Errorf("after login the browser is at %s, want %s/confirmations", loc, base)
	}
	// The login URL works once.
	if resp, err := http.Get(login.URL); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a used login URL: %v %v, want 403", resp.Status, err)
	}

	// First paint: each page loaded again, the browser's own paint
	// timing and the moment the page's lists are drawn.
	var paints, drawn []float64
	for _, p := range []string{"confirmations", "jobs", "events", "audit", "apps", "confirmations", "jobs", "events", "audit", "apps"} {
		do(t, b, "loading "+p, chromedp.Navigate(base+"/"+p), chromedp.WaitVisible(css(`body[data-rendered-ms]`)))
		// The paint entry is reported after the paint, which may follow
		// the drawing.
		fcp := get(t, b, "paint timing", chromedp.Poll[float64](`(performance.getEntriesByName('first-contentful-paint')[0]||{}).startTime`, chromedp.WithPollingTimeout(5*time.Second)))
		rendered := get(t, b, "render mark", chromedp.Evaluate[float64](`performance.getEntriesByName('pcp-rendered')[0].startTime`))
		paints, drawn = append(paints, fcp), append(drawn, rendered)
	}
	t.Logf("first contentful paint (ms from navigation): median %.1f, all %v", median(paints), paints)
	t.Logf("lists drawn (ms from navigation): median %.1f, all %v", median(drawn), drawn)
	if m := median(paints); m < 0 || m > firstPaintGoalMS {
		t.Errorf("first paint median %.1f ms, goal ≤ %d ms", m, firstPaintGoalMS)
	}
	if m := median(drawn); m > firstPaintGoalMS {
		t.Errorf("lists drawn at median %.1f ms, goal ≤ %d ms", m, firstPaintGoalMS)
	}

	// ask makes the agent invoke a confirm capability; it returns the
	// confirmation id and the time just before the request.
	ask := func(capName, params string) (*api.InvokeCapabilityParams, time.Time) {
		t.Helper()
		p := &api.InvokeCapabilityParams{CapabilityID: dashAppID + "." + capName, AppID: dashAppID, Source: api.SourceSystemIntelligence, Params: json.RawMessage(params)}
		t0 := time.Now()
		_, err := agent.InvokeCapability(ctx, p)
		var pe *api.Error
		if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired {
			t.Fatalf("invoking %s: %v, want CONFIRMATION_REQUIRED", capName, err)
		}
		p.ConfirmationID, _ = pe.DataMap()["confirmation_id"].(string)
		return p, t0
	}
	wait := func(p *api.InvokeCapabilityParams) <-chan error {
		done := make(chan error, 1)
		go func() {
			q := *p
			q.WaitMS = 20000
			res, err := agent.InvokeCapability(ctx, &q)
			if err == nil && res.Status == api.StatusDeferred {
				err = fmt.Errorf("deferred: %s", res.Data)
			}
			done <- err
		}()
		return done
	}
	outcome := func(done <-chan error) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(15 * time.Second):
			t.Fatal("the invocation waiting on the confirmation did not return")
		}
		return nil
	}

	// A confirmation appears live; Approve lets the waiting call run.
	do(t, b, "confirmations page", chromedp.Navigate(base+"/confirmations"), chromedp.WaitVisible(css(`#live.on`)),
		chromedp.WaitVisible(css(`body[data-rendered-ms]`)))
	var confLat []float64
	p, t0 := ask("delete", `{"note_id":"n-1"}`)
	card := `article.card[data-id="` + p.ConfirmationID + `"]`
	confLat = append(confLat, seenMS(t, b, card)-unixMS(t0))
	text := get(t, b, "reading the card", chromedp.Text(css(card)))
	for _, want := range []string{dashAppID + ".delete", `note_id="n-1"`, "Delete a note", dashAppID, "agent:uid=", "expires in"} {
		if !strings.Contains(text, want) {
			t.Errorf("the confirmation's card lacks %q:\n%s", want, text)
		}
	}
	d1 := get(t, b, "countdown", chromedp.Text(css(card+` .countdown`)))
	do(t, b, "countdown moves", chromedp.Poll[chromedp.Void](`document.querySelector('`+card+` .countdown').textContent !== '`+d1+`'`, chromedp.WithPollingTimeout(5*time.Second)))
	shoot(t, b, "confirmations")
	done := wait(p)
	do(t, b, "approving", chromedp.Click(css(card+` button.approve`)), chromedp.WaitNotPresent(css(card)))
	if err := outcome(done); err != nil {
		t.Errorf("approved on the dashboard, the agent's call answered %v", err)
	}
	if got := <-ran; got != dashAppID+`.delete {"note_id":"n-1"}` {
		t.Errorf("the app ran %s", got)
	}

	// Deny reaches the agent as CONFIRMATION_DENIED.
	p, t0 = ask("delete", `{"note_id":"n-2"}`)
	card = `article.card[data-id="` + p.ConfirmationID + `"]`
	confLat = append(confLat, seenMS(t, b, card)-unixMS(t0))
	done = wait(p)
	do(t, b, "denying", chromedp.Click(css(card+` button.deny`)), chromedp.WaitNotPresent(css(card)),
		chromedp.WaitVisible(css(`#decided tr[data-id="`+p.ConfirmationID+`"][data-state="denied"]`)))
	if err := outcome(done); !errors.Is(err, &api.Error{Code: api.CodeConfirmationDenied}) {
		t.Errorf("denied on the dashboard, the agent's call answered %v, want CONFIRMATION_DENIED", err)
	}
	for range 3 {
		p, t0 = ask("delete", `{"note_id":"n-x"}`)
		confLat = append(confLat, seenMS(t, b, `article.card[data-id="`+p.ConfirmationID+`"]`)-unixMS(t0))
		if _, err := user.ConfirmDeny(ctx, p.ConfirmationID, "enough"); err != nil {
			t.Fatal(err)
		}
	}
	shoot(t, b, "confirmations-decided")
	t.Logf("confirmation asked → on screen (ms): median %.1f, all %v", median(confLat), confLat)
	if m := median(confLat); m > eventGoalMS {
		t.Errorf("a confirmation took a median %.1f ms to appear, goal ≤ %d ms", m, eventGoalMS)
	}

	// A forged form post (the session's cookie, no CSRF token) decides
	// nothing.
	p, _ = ask("delete", `{"note_id":"n-3"}`)
	forged := url.Values{"confirmation_id": {p.ConfirmationID}, "csrf": {"0000"}}
	jar := loggedIn(t, user, base)
	req, _ := http.NewRequest(http.MethodPost, base+"/action/approve", strings.NewReader(forged.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	resp, err := (&http.Client{Jar: jar}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("forged approve: %s, want 403", resp.Status)
	}
	if st := confirmationState(t, user, p.ConfirmationID); st != api.ConfirmPending {
		t.Errorf("after a forged approve the confirmation is %s, want pending", st)
	}
	user.ConfirmDeny(ctx, p.ConfirmationID, "")

	// An approved action with an undo window is a queued job; Undo, in
	// its window, means it never runs.
	do(t, b, "jobs page", chromedp.Navigate(base+"/jobs"), chromedp.WaitVisible(css(`body[data-rendered-ms]`)))
	p, _ = ask("send", `{"to":"bob"}`)
	// The navigation's badge counts the pending confirmation, live.
	if n := get(t, b, "badge", chromedp.Poll[string](`document.querySelector('[data-badge="confirmations"]').textContent`, chromedp.WithPollingTimeout(5*time.Second))); n != "1" {
		t.Errorf("the confirmations badge says %q, want 1", n)
	}
	if title := get(t, b, "title", chromedp.Evaluate[string](`document.title`)); title != "(1) Jobs · PCP dashboard" {
		t.Errorf("the tab's title is %q, want it to count the pending confirmation", title)
	}
	if _, err := user.ConfirmApprove(ctx, p.ConfirmationID, ""); err != nil {
		t.Fatal(err)
	}
	res, err := agent.InvokeCapability(ctx, p)
	var deferred struct {
		JobID string `json:"job_id"`
	}
	if err != nil || res.Status != api.StatusDeferred || json.Unmarshal(res.Data, &deferred) != nil || deferred.JobID == "" {
		t.Fatalf("approved send: %v %+v, want a deferred job", err, res)
	}
	row := `#jobs tr[data-id="` + deferred.JobID + `"]`
	seenMS(t, b, row+`[data-state="queued"]`)
	do(t, b, "undo countdown", chromedp.WaitVisible(css(row+` .countdown`)))
	shoot(t, b, "jobs")
	do(t, b, "undoing", chromedp.Click(css(row+` button`)), chromedp.WaitVisible(css(row+`[data-state="undone"]`)))
	jl, err := user.JobsList(ctx, 10)
	if err != nil || len(jl.Jobs) == 0 || jl.Jobs[0].JobID != deferred.JobID || jl.Jobs[0].State != api.JobUndone {
		t.Errorf("after Undo: jobs %+v %v, want %s undone", jl, err, deferred.JobID)
	}
	shoot(t, b, "jobs-undone")

	// The event stream: events published appear at once; the filters
	// narrow the list.
	do(t, b, "events page", chromedp.Navigate(base+"/events"), chromedp.WaitVisible(css(`#live.on`)), chromedp.WaitVisible(css(`body[data-rendered-ms]`)))
	var evLat []float64
	for i := range 9 {
		seq := s.b.EventSequence() + 1
		t0 := time.Now()
		s.b.Publish(api.EventAppResponsive, dashAppID, "", map[string]any{"app_id": dashAppID, "n": i})
		evLat = append(evLat, seenMS(t, b, `#events tr[data-seq="`+strconv.FormatInt(seq, 10)+`"]`)-unixMS(t0))
	}
	t.Logf("event published → on screen (ms): median %.1f, all %v", median(evLat), evLat)
	if m := median(evLat); m > eventGoalMS {
		t.Errorf("an event took a median %.1f ms to appear, goal ≤ %d ms", m, eventGoalMS)
	}
	if _, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: dashAppID + ".peek", AppID: dashAppID, Source: api.SourceSystemIntelligence}); err != nil {
		t.Fatal(err)
	}
	<-ran
	do(t, b, "invoked event", chromedp.WaitVisible(css(`#events tr[data-type="capability.invoked"]`)))
	shoot(t, b, "events")
	do(t, b, "filtering by type", chromedp.SetValue(css(`#f-type`), api.EventCapabilityInvoked))
	get(t, b, "filter change", chromedp.Evaluate[bool](`document.querySelector('#f-type').dispatchEvent(new Event('change'))`))
	nOther := get(t, b, "rows left", chromedp.Evaluate[int](`document.querySelectorAll('#events tbody tr:not([data-type="capability.invoked"])').length`))
	if nOther != 0 {
		t.Errorf("filtered to capability.invoked, %d other rows remain", nOther)
	}
	// The agent filter: capability.invoked names who invoked.
	agentRows := func(who string) int {
		t.Helper()
		do(t, b, "agent filter", chromedp.SetValue(css(`#f-agent`), who))
		get(t, b, "filter input", chromedp.Evaluate[bool](`document.querySelector('#f-agent').dispatchEvent(new Event('input'))`))
		return get(t, b, "rows", chromedp.Evaluate[int](`document.querySelectorAll('#events tbody tr').length`))
	}
	if n := agentRows("agent:uid=" + strconv.Itoa(os.Getuid())); n == 0 {
		t.Error("filtered to the agent that invoked, no invocation is listed")
	}
	shoot(t, b, "events-filtered")
	if n := agentRows("agent:nobody"); n != 0 {
		t.Errorf("filtered to an agent that did nothing, %d rows remain", n)
	}

	// Apps: revoke and allow, with the trust levels in force.
	do(t, b, "apps page", chromedp.Navigate(base+"/apps"), chromedp.WaitVisible(css(`#apps tr[data-app="`+dashAppID+`"]`)))
	capsText := get(t, b, "trust levels", chromedp.Text(css(`#caps tr[data-cap="`+dashAppID+`.delete"]`)))
	if !strings.Contains(capsText, "confirm") || !strings.Contains(capsText, "manifest") {
		t.Errorf("the delete capability's row lacks its trust level and where it comes from: %q", capsText)
	}
	shoot(t, b, "apps")
	do(t, b, "revoking", chromedp.Click(css(`#apps tr[data-app="`+dashAppID+`"] button.deny`)),
		chromedp.WaitVisible(css(`#apps tr[data-app="`+dashAppID+`"][data-state="revoked"]`)))
	shoot(t, b, "apps-revoked")
	do(t, b, "allowing", chromedp.Click(css(`#apps tr[data-app="`+dashAppID+`"] button.approve`)),
		chromedp.WaitNotPresent(css(`#apps tr[data-app="`+dashAppID+`"][data-state="revoked"]`)))

	// The audit log holds the logins, the sessions, and the decisions
	// taken on the dashboard as user:dashboard.
	tail, err := user.AuditTail(ctx, 1000)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range tail.Entries {
		if e.Kind == api.AuditDashboard || e.Actor == "user:dashboard" {
			got[e.Kind+" "+e.Outcome+" "+strings.SplitN(e.Actor, ",", 2)[0]] = true
		}
	}
	for _, want := range []string{"dashboard login_issued user:uid=" + strconv.Itoa(os.Getuid()), "dashboard session_opened user:dashboard",
		"confirmation approved user:dashboard", "confirmation denied user:dashboard", "job undone user:dashboard",
		"revoke success user:dashboard", "allow success user:dashboard"} {
		if !got[want] {
			t.Errorf("the audit log lacks %q; it has %v", want, got)
		}
	}

	// Audit: intact, then tampered behind the daemon's back.
	do(t, b, "audit page", chromedp.Navigate(base+"/audit"), chromedp.WaitVisible(css(`#chain.ok`)))
	shoot(t, b, "audit")
	rewriteAuditOutcome(t, filepath.Join(s.cfg.StateDir, "audit", "00000000000000000000.log"), 3, "PERMISSION_DENIED")
	do(t, b, "audit page, tampered", chromedp.Reload(), chromedp.WaitVisible(css(`#chain.broken`)))
	chain := get(t, b, "chain status", chromedp.Text(css(`#chain`)))
	entry := get(t, b, "broken entry", chromedp.Text(css(`#broken-entry`)))
	if !strings.Contains(chain, "Chain broken at entry #3") {
		t.Errorf("the audit page says %q, want the chain broken at entry #3", chain)
	}
	// The entry is shown as the index copied it when it was written: what
	// the log held before someone rewrote it.
	if !strings.Contains(entry, `"seq": 3`) || strings.Contains(entry, "PERMISSION_DENIED") {
		t.Errorf("the first broken entry shown is %q, want entry 3 as it was written", entry)
	}
	shoot(t, b, "audit-broken")
}

// rewriteAuditOutcome rewrites entry seq's outcome in the audit log
// segment at path as someone with write access to the file could: the
// record stays well formed (its length and checksum recomputed, see
// docs/audit.md), so only the hash chain can tell.
func rewriteAuditOutcome(t *testing.T, path string, seq int, outcome string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	off := 16 // the segment header
	for i := 1; i < seq; i++ {
		off += 8 + int(binary.BigEndian.Uint32(b[off:]))
	}
	n := int(binary.BigEndian.Uint32(b[off:]))
	body := b[off+8 : off+8+n]
	entry := regexp.MustCompile(`"outcome":"[^"]*"`).ReplaceAll(slices.Clone(body[72:]), []byte(`"outcome":"`+outcome+`"`))
	nb := append(slices.Clone(body[:72]), entry...)
	rec := binary.BigEndian.AppendUint32(nil, uint32(len(nb)))
	rec = binary.BigEndian.AppendUint32(rec, crc32.Checksum(nb, crc32.MakeTable(crc32.Castagnoli)))
	out := append(slices.Clone(b[:off]), append(rec, nb...)...)
	out = append(out, b[off+8+n:]...)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// loggedIn logs a cookie jar in through a fresh login URL, as a second
// browser would.
func loggedIn(t *testing.T, user *client.Client, base string) http.CookieJar {
	t.Helper()
	login, err := user.DashboardLogin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Get(login.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("login: %s", resp.Status)
	}
	u, _ := url.Parse(base)
	if len(jar.Cookies(u)) != 1 {
		t.Fatal("login set no cookie")
	}
	return jar
}

func confirmationState(t *testing.T, user *client.Client, id string) string {
	t.Helper()
	l, err := user.ConfirmList(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range l.Confirmations {
		if c.ConfirmationID == id {
			return c.State
		}
	}
	return ""
}

// TestDashboardSurfacesInBrowser shows a real application's window (GTK's
// widget factory) on
// the surfaces page of a headless desktop: the element tree as the
// wireframe, whose labels the browser lays out without one overlapping
// another and each inside its box, and a screenshot through the X11
// platform adapter with the elements' boxes over it.
func TestDashboardSurfacesInBrowser(t *testing.T) {
	desk, err := testkit.StartDesktop(true)
	if err != nil {
		t.Fatalf("the surfaces test needs the headless desktop: %v", err)
	}
	t.Cleanup(desk.Stop)
	if err := desk.WaitApps(60*time.Second, "gtk3-widget-factory", "gnome-calculator"); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, Config{Accessibility: true, AccessibilityBus: desk.Vars["AT_SPI_BUS_ADDRESS"], X11: true, X11Display: desk.Vars["DISPLAY"],
		RateLimits: &core.RateLimits{}, Dashboard: "127.0.0.1:0"})
	ctx := context.Background()
	user, err := client.Dial(ctx, s.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	login, err := user.DashboardLogin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.DashboardAddr()
	b := browser(t)
	do(t, b, "logging in", chromedp.Navigate(login.URL), chromedp.WaitVisible(css(`#live.on`)))
	// The adapter connects to the accessibility bus in the background:
	// the page lists the calculator once it is there, live or on a
	// reload.
	sel := `button[data-surface*="gtk3-widget-factory"]`
	deadline := time.Now().Add(30 * time.Second)
	for {
		do(t, b, "surfaces page", chromedp.Navigate(base+"/surfaces"), chromedp.WaitVisible(css(`body[data-rendered-ms]`)))
		if get(t, b, "listed", chromedp.Evaluate[bool](`!!document.querySelector('`+sel+`')`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the surfaces page does not list GTK's widget factory:\n%s", get(t, b, "page", chromedp.Text(css(`#content`))))
		}
		// Wait for the next surface event rather than a fixed time.
		get(t, b, "a surface event", chromedp.Evaluate[bool](`new Promise((ok) => { const es = new EventSource('/stream'); es.onmessage = (m) => { if (JSON.parse(m.data).type.startsWith('surface.')) { es.close(); ok(true); } }; setTimeout(() => { es.close(); ok(false); }, 3000); })`, chromedp.EvalAwaitPromise))
	}
	do(t, b, "choosing the widget factory", chromedp.Click(css(sel)), chromedp.WaitVisible(css(`#wireframe svg`)))
	n := get(t, b, "boxes", chromedp.Evaluate[int](`document.querySelectorAll('#wireframe svg > g').length`))
	if n < 20 {
		t.Errorf("the wireframe draws %d elements, want the widget factory's", n)
	}
	// Each label lies inside its box and over no other label, as the
	// browser lays them out.
	bad := get(t, b, "label layout", chromedp.Evaluate[[]string](`(() => {
		const out = [];
		const ls = [...document.querySelectorAll('#wireframe svg > g > svg')].map((v) => {
			const t = v.querySelector('text').getBoundingClientRect(), bx = v.getBoundingClientRect();
			const r = { l: t.left, t: t.top, r: Math.min(t.right, bx.right), b: t.bottom, text: v.textContent };
			if (r.l < bx.left - 0.5 || r.t < bx.top - 0.5 || r.b > bx.bottom + 0.5) out.push('outside its box: ' + r.text);
			return r;
		});
		for (let i = 0; i < ls.length; i++) for (let j = i + 1; j < ls.length; j++) {
			const a = ls[i], b = ls[j];
			if (a.l < b.r - 0.5 && b.l < a.r - 0.5 && a.t < b.b - 0.5 && b.t < a.b - 0.5) out.push(a.text + ' / ' + b.text);
		}
		return ls.length < 5 ? ['only ' + ls.length + ' labels'] : out;
	})()`))
	for _, m := range bad {
		t.Errorf("wireframe label: %s", m)
	}
	shoot(t, b, "surfaces-wireframe")
	do(t, b, "screenshot", chromedp.Click(css(`#take-shot`)), chromedp.WaitVisible(css(`svg.shot`)))
	boxes := get(t, b, "boxes on the screenshot", chromedp.Evaluate[int](`document.querySelectorAll('svg.shot rect.elbox').length`))
	if boxes < 20 {
		t.Errorf("the screenshot outlines %d elements, want the widget factory's", boxes)
	}
	// The image is the PNG the platform adapter captured.
	href := get(t, b, "image", chromedp.Evaluate[string](`document.querySelector('svg.shot image').getAttribute('href')`))
	sig := get(t, b, "the image's bytes", chromedp.Evaluate[string](`fetch('`+href+`').then(async (r) => r.headers.get('Content-Type') + ' ' + String.fromCharCode(...new Uint8Array(await r.arrayBuffer()).slice(1, 4)))`, chromedp.EvalAwaitPromise))
	if sig != "image/png PNG" {
		t.Errorf("the screenshot's image: %q, want image/png with a PNG signature", sig)
	}
	// It is this browser's: another session does not see it.
	if resp, _ := fetch(t, loggedIn(t, user, base), base+href); resp.StatusCode != http.StatusNotFound {
		t.Errorf("the screenshot from another session: %s, want 404", resp.Status)
	}
	if resp, _ := fetch(t, nil, base+href); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the screenshot without the cookie: %s, want 401", resp.Status)
	}
	shoot(t, b, "surfaces-screenshot")
}

func fetch(t *testing.T, jar http.CookieJar, u string) (*http.Response, string) {
	t.Helper()
	resp, err := (&http.Client{Jar: jar}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// The dashboard listens on loopback only, and a shutdown ends its open
// event streams and leaves no goroutine behind.
func TestDashboardLoopbackAndShutdown(t *testing.T) {
	dir := t.TempDir()
	for _, addr := range []string{"0.0.0.0:0", "192.0.2.1:7881", "example.com:80"} {
		_, err := New(Config{Socket: filepath.Join(dir, "r", "pcp.sock"), StateDir: filepath.Join(dir, "s"), TrustDir: filepath.Join(dir, "t"),
			Dashboard: addr, Logger: slog.New(slog.DiscardHandler)})
		if err == nil || !strings.Contains(err.Error(), "--dashboard") || !strings.Contains(err.Error(), "not loopback") {
			t.Errorf("--dashboard %s: %v, want it refused as not loopback", addr, err)
		}
	}
	testkit.CheckGoroutines(t)
	s := startServer(t, Config{Dashboard: "127.0.0.1:0"})
	user, err := client.Dial(context.Background(), s.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	base := "http://" + s.DashboardAddr()
	jar := loggedIn(t, user, base)
	resp, err := (&http.Client{Jar: jar}).Get(base + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ended := make(chan struct{})
	go func() { io.Copy(io.Discard, resp.Body); close(ended) }()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Errorf("Shutdown with a stream open: %v", err)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the event stream outlived the daemon")
	}
	if _, err := user.DashboardLogin(context.Background()); err == nil {
		t.Error("dashboard.login after shutdown succeeded")
	}
}
