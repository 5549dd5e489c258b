package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/golden"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// A golden transcript of the dashboard is a txtar file whose "requests"
// section lists what a browser (and an agent) do, one per line:
//
//	login                          ask dashboard.login and follow the URL (the browser's session)
//	[anon] [H:Name=Value]... METHOD PATH [FORM]
//	                               an HTTP request: anon without the
//	                               session's cookie; a POST sends FORM
//	                               (url-encoded; csrf=<csrf> is the
//	                               session's token) with the page's Origin
//	                               and Accept: application/json
//	agent> CAPABILITY PARAMS [CONF] the agent invokes, presenting the
//	                               confirmation CONF if given; its answer
//	                               is shown
//	# ...                          a comment
//
// and whose "exchanges" section is what the dashboard answered: the
// status, the headers that matter, and the body. The broker runs with a
// fixed clock and deterministic ids; the random login token, cookie,
// CSRF token and session tag, and the listener's address, are written as
// <token>, <cookie>, <csrf>, <tag> and <addr>, and the audit chain's
// hashes (which cover the address) as <hash>. Run with -update to
// regenerate "exchanges" after an intended change, and review the diff.
func TestGolden(t *testing.T) { golden.ForEach(t, "testdata/*.txtar", runGolden) }

var hash64 = regexp.MustCompile(`[0-9a-f]{64}`)

// goldenApp serves org.example.notes for the transcripts: every
// invocation succeeds.
type goldenApp struct{}

func (goldenApp) Invoke(context.Context, *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	return &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"done":true}`)}, nil
}
func (goldenApp) Ping(context.Context) error { return nil }

const goldenManifest = `{"version":"1.0","signature":"","capabilities":[` +
	`{"name":"delete","tier":1,"trust_level":"confirm","confirmation_type":"delete","description":"Delete a note","parameters":[{"name":"note_id","type":"string"}]},` +
	`{"name":"send","tier":1,"trust_level":"confirm","confirmation_type":"send","description":"Send a note","undo_window_ms":30000,"parameters":[{"name":"to","type":"string"}]}]}`

func runGolden(t *testing.T, file string) {
	ar := golden.Load(t, file)
	for _, k := range []string{"XDG_SESSION_TYPE", "XDG_CURRENT_DESKTOP", "DISPLAY", "WAYLAND_DISPLAY"} {
		t.Setenv(k, "")
	}
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := testkit.NewClock(testkit.GoldenTime)
	b, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), AllowUnsigned: true,
		SessionID: "session-1", RateLimits: &core.RateLimits{}, LivenessInterval: -1, Now: clk.Now, AfterFunc: clk.AfterFunc, NewID: testkit.SeqIDs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	appSess := b.OpenSession(core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 7}, core.Endpoint{App: goldenApp{}})
	defer appSess.Close()
	yes := true
	if _, err := b.RegisterCapability(core.WithSession(context.Background(), appSess), &api.RegisterCapabilityParams{AppID: "org.example.notes",
		Manifest: json.RawMessage(goldenManifest), Serve: &yes}); err != nil {
		t.Fatal(err)
	}
	agentSess := b.OpenSession(core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 4242}, core.Endpoint{})
	defer agentSess.Close()
	agent := core.WithSession(context.Background(), agentSess)
	userSess := b.OpenSession(core.SessionInfo{Role: core.RoleUser, Transport: "unix", UID: 1000, PID: 99}, core.Endpoint{})
	defer userSess.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	srv := New(b, Options{Addr: addr, Now: clk.Now})
	b.SetDashboard(srv)
	hs := &http.Server{Handler: srv.Handler()}
	go hs.Serve(ln)
	defer func() { hs.Close(); srv.Close() }()
	base := "http://" + addr
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	var cookie, csrf, token string
	var out strings.Builder
	redact := func(s string) string {
		for _, r := range [][2]string{{token, "<token>"}, {cookie, "<cookie>"}, {csrf, "<csrf>"}, {addr, "<addr>"}} {
			if r[0] != "" {
				s = strings.ReplaceAll(s, r[0], r[1])
			}
		}
		srv.mu.Lock()
		for _, se := range srv.sessions {
			s = strings.ReplaceAll(s, se.tag, "<tag>")
		}
		srv.mu.Unlock()
		return hash64.ReplaceAllString(s, "<hash>")
	}
	record := func(line string, resp *http.Response) {
		out.WriteString("> " + line + "\n")
		fmt.Fprintf(&out, "< %s\n", resp.Status)
		for _, h := range []string{"Content-Type", "Location", "Set-Cookie", "Cache-Control"} {
			if v := resp.Header.Get(h); v != "" {
				fmt.Fprintf(&out, "< %s: %s\n", h, redact(v))
			}
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		text := strings.TrimRight(string(body), "\n")
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
			text = fmt.Sprintf("(%d bytes of HTML)", len(body))
		}
		if text != "" {
			out.WriteString(redact(text) + "\n")
		}
		out.WriteString("\n")
	}
	for _, line := range ar.Lines("requests") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case line == "login":
			res, err := b.DashboardLogin(core.WithSession(context.Background(), userSess))
			if err != nil {
				t.Fatal(err)
			}
			u, _ := url.Parse(res.URL)
			token = u.Query().Get("token")
			fmt.Fprintf(&out, "# dashboard.login: %s (expires %s)\n", redact(res.URL), res.ExpiresAt)
			resp, err := c.Get(res.URL)
			if err != nil {
				t.Fatal(err)
			}
			for _, ck := range resp.Cookies() {
				if ck.Name == CookieName {
					cookie = ck.Value
				}
			}
			srv.mu.Lock()
			if se := srv.sessions[cookie]; se != nil {
				csrf = se.csrf
			}
			srv.mu.Unlock()
			record("GET /login?token=<token>", resp)
		case strings.HasPrefix(line, "agent> "):
			f := strings.Fields(strings.TrimPrefix(line, "agent> "))
			appID, _ := api.CapabilityAppID(f[0])
			p := &api.InvokeCapabilityParams{CapabilityID: f[0], AppID: appID, Source: api.SourceSystemIntelligence, Params: json.RawMessage(f[1])}
			if len(f) > 2 {
				p.ConfirmationID = f[2]
			}
			res, err := b.InvokeCapability(agent, p)
			var pe *api.Error
			switch {
			case errors.As(err, &pe):
				fmt.Fprintf(&out, "> %s\n< %s %v\n\n", line, pe.Code.Name(), pe.DataMap()["confirmation_id"])
			case err != nil:
				t.Fatal(err)
			default:
				fmt.Fprintf(&out, "> %s\n< %s %s\n\n", line, res.Status, res.Data)
			}
		default:
			fields := strings.Fields(line)
			anon := false
			hdr := map[string]string{}
			for len(fields) > 0 && (fields[0] == "anon" || strings.HasPrefix(fields[0], "H:")) {
				if fields[0] == "anon" {
					anon = true
				} else {
					k, v, _ := strings.Cut(strings.TrimPrefix(fields[0], "H:"), "=")
					hdr[k] = v
				}
				fields = fields[1:]
			}
			if len(fields) < 2 {
				t.Fatalf("bad request line %q", line)
			}
			method, path := fields[0], fields[1]
			var body io.Reader
			if len(fields) > 2 {
				body = strings.NewReader(strings.ReplaceAll(fields[2], "<csrf>", csrf))
			}
			req, _ := http.NewRequest(method, base+path, body)
			if method == http.MethodPost {
				req.Header.Set("Origin", base)
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Accept", "application/json")
			}
			for k, v := range hdr {
				if k == "Host" {
					req.Host = v
				} else if v == "" {
					req.Header.Del(k)
				} else {
					req.Header.Set(k, v)
				}
			}
			if !anon && cookie != "" {
				req.AddCookie(&http.Cookie{Name: CookieName, Value: cookie})
			}
			resp, err := c.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			record(line, resp)
		}
	}
	got := out.String()
	if *golden.Update {
		ar.Save(t, "exchanges", []byte(got))
		return
	}
	if want := string(ar.Section("exchanges")); got != want {
		t.Errorf("exchanges differ (run with -update and review the diff):\n--- got\n%s\n--- want\n%s", got, want)
	}
}
