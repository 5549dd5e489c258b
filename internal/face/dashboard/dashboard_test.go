package dashboard

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// fixture is a dashboard of a real broker (SQLite in memory) on a real
// loopback listener, with a clock the test moves.
type fixture struct {
	b    *core.Broker
	srv  *Server
	base string
	mu   sync.Mutex
	now  time.Time
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), LivenessInterval: -1, RateLimits: &core.RateLimits{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{b: b, now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	f.srv = New(b, Options{Addr: ln.Addr().String(), Now: f.clock})
	b.SetDashboard(f.srv)
	hs := &http.Server{Handler: f.srv.Handler()}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close(); f.srv.Close() })
	f.base = "http://" + ln.Addr().String()
	return f
}

// loginURL asks dashboard.login as the user.
func (f *fixture) loginURL(t testing.TB) string {
	t.Helper()
	sess := f.b.OpenSession(core.SessionInfo{Role: core.RoleUser, Transport: "unix"}, core.Endpoint{})
	defer sess.Close()
	res, err := f.b.DashboardLogin(core.WithSession(context.Background(), sess))
	if err != nil {
		t.Fatal(err)
	}
	return res.URL
}

var noRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// login returns a client holding a session cookie, and the session's
// CSRF token as its page carries it.
func (f *fixture) login(t testing.TB) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: noRedirect}
	resp, err := c.Get(f.loginURL(t))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/confirmations" {
		t.Fatalf("login: %s to %q, want 303 to /confirmations", resp.Status, resp.Header.Get("Location"))
	}
	resp, err = c.Get(f.base + "/confirmations")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.Contains(line, `name="pcp-csrf"`) {
			i := strings.Index(line, `content="`) + len(`content="`)
			return c, line[i : i+64]
		}
	}
	t.Fatal("the page carries no CSRF token")
	return nil, ""
}

func do(t *testing.T, c *http.Client, method, u string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, sb.String()
}

// The login URL works once, within its time; the cookie it sets is
// HttpOnly, SameSite=Strict, for the whole site.
func TestLoginOnce(t *testing.T) {
	f := newFixture(t)
	u := f.loginURL(t)
	c := &http.Client{CheckRedirect: noRedirect}
	resp, _ := do(t, c, "GET", u, nil, "")
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("first use: %s, want 303", resp.Status)
	}
	ck := resp.Cookies()
	if len(ck) != 1 || ck[0].Name != CookieName || !ck[0].HttpOnly || ck[0].SameSite != http.SameSiteStrictMode || ck[0].Path != "/" || len(ck[0].Value) != 64 {
		t.Errorf("cookie %+v, want %s HttpOnly SameSite=Strict Path=/", ck, CookieName)
	}
	if resp, _ := do(t, c, "GET", u, nil, ""); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Errorf("second use: %s %v, want 403 and no cookie", resp.Status, resp.Cookies())
	}
	late := f.loginURL(t)
	f.advance(DefaultLoginTTL)
	if resp, _ := do(t, c, "GET", late, nil, ""); resp.StatusCode != http.StatusForbidden {
		t.Errorf("expired login URL: %s, want 403", resp.Status)
	}
	if resp, _ := do(t, c, "GET", f.base+"/login?token=", nil, ""); resp.StatusCode != http.StatusForbidden {
		t.Errorf("empty token: %s, want 403", resp.Status)
	}
	// dashboard.login is the user's only.
	sess := f.b.OpenSession(core.SessionInfo{Role: core.RoleAgent, Transport: "unix"}, core.Endpoint{})
	defer sess.Close()
	if _, err := f.b.DashboardLogin(core.WithSession(context.Background(), sess)); err == nil || !strings.Contains(err.Error(), "only the user") {
		t.Errorf("dashboard.login from an agent: %v, want PERMISSION_DENIED", err)
	}
}

// What a browser that is not the user's, or a page of another site,
// sends is refused: no cookie, a foreign Host (DNS rebinding), a foreign
// Origin, a cross-site fetch, a form post without Origin or without the
// CSRF token. Every answer carries the CSP.
func TestRefusals(t *testing.T) {
	f := newFixture(t)
	c, csrf := f.login(t)
	anon := &http.Client{CheckRedirect: noRedirect}
	host := strings.TrimPrefix(f.base, "http://")
	form := func(v url.Values) string { return v.Encode() }
	post := map[string]string{"Origin": f.base, "Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
	with := func(m map[string]string, k, v string) map[string]string {
		out := map[string]string{}
		for a, b := range m {
			out[a] = b
		}
		if v == "" {
			delete(out, k)
		} else {
			out[k] = v
		}
		return out
	}
	cases := []struct {
		name   string
		c      *http.Client
		method string
		path   string
		hdr    map[string]string
		body   string
		status int
		code   string
	}{
		{"api without cookie", anon, "GET", "/api/confirmations", nil, "", 401, "not_logged_in"},
		{"stream without cookie", anon, "GET", "/stream", nil, "", 401, "not_logged_in"},
		{"page without cookie", anon, "GET", "/confirmations", nil, "", 401, ""},
		{"post without cookie", anon, "POST", "/action/approve", post, form(url.Values{"csrf": {csrf}, "confirmation_id": {"conf-1"}}), 401, "not_logged_in"},
		{"foreign host", c, "GET", "/api/confirmations", map[string]string{"Host": "evil.example:" + strings.Split(host, ":")[1]}, "", 421, "wrong_host"},
		{"foreign origin on a read", c, "GET", "/api/audit", map[string]string{"Origin": "http://evil.example"}, "", 403, "foreign_origin"},
		{"foreign origin on a post", c, "POST", "/action/approve", with(post, "Origin", "http://evil.example"), form(url.Values{"csrf": {csrf}, "confirmation_id": {"conf-1"}}), 403, "foreign_origin"},
		{"post without origin", c, "POST", "/action/approve", with(post, "Origin", ""), form(url.Values{"csrf": {csrf}, "confirmation_id": {"conf-1"}}), 403, "missing_origin"},
		{"cross-site fetch", c, "GET", "/api/apps", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}, "", 403, "cross_site"},
		{"same-site other port", c, "GET", "/stream", map[string]string{"Sec-Fetch-Site": "same-site", "Sec-Fetch-Mode": "cors"}, "", 403, "cross_site"},
		{"forged form, no token", c, "POST", "/action/revoke", post, form(url.Values{"app_id": {"pcp.inspection"}}), 403, "bad_csrf"},
		{"forged form, wrong token", c, "POST", "/action/undo", post, form(url.Values{"csrf": {strings.Repeat("0", 64)}, "job_id": {"job-1"}}), 403, "bad_csrf"},
		{"token in the query", c, "POST", "/action/allow?csrf=" + csrf, post, form(url.Values{"app_id": {"x"}}), 403, "bad_csrf"},
		{"not a form", c, "POST", "/action/approve", with(post, "Content-Type", "application/json"), `{"csrf":"` + csrf + `"}`, 415, "bad_form"},
		{"form too big", c, "POST", "/action/approve", post, form(url.Values{"csrf": {csrf}, "x": {strings.Repeat("a", maxForm)}}), 400, "bad_form"},
		{"unknown action", c, "POST", "/action/drop", post, form(url.Values{"csrf": {csrf}}), 404, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := do(t, tc.c, tc.method, f.base+tc.path, tc.hdr, tc.body)
			if resp.StatusCode != tc.status {
				t.Errorf("%s %s: got %s, want %d\n%s", tc.method, tc.path, resp.Status, tc.status, body)
			}
			if tc.code != "" {
				var r refusal
				if err := json.Unmarshal([]byte(body), &r); err != nil || r.Error.Code != tc.code {
					t.Errorf("body %s: want error code %s", body, tc.code)
				}
			}
			if got := resp.Header.Get("Content-Security-Policy"); got != csp {
				t.Errorf("CSP %q, want %q", got, csp)
			}
		})
	}
	// A navigation from another site reaches the page, but without the
	// cookie (SameSite=Strict): the login page.
	resp, body := do(t, anon, "GET", f.base+"/confirmations", map[string]string{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}, "")
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, "pcpctl dashboard") {
		t.Errorf("cross-site navigation without the cookie: %s, want 401 and the login page", resp.Status)
	}
	// The page loaded as localhost:PORT posts with that origin. (A
	// browser keeps cookies per host name: this one is handed over.)
	port := strings.Split(host, ":")[1]
	bu, _ := url.Parse(f.base)
	cookie := c.Jar.Cookies(bu)[0]
	bare := &http.Client{CheckRedirect: noRedirect}
	resp, body = do(t, bare, "POST", f.base+"/action/approve", map[string]string{"Host": "localhost:" + port, "Origin": "http://localhost:" + port,
		"Cookie": cookie.String(), "Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}, form(url.Values{"csrf": {csrf}, "confirmation_id": {"conf-nope"}}))
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "INVALID_PARAMS") {
		t.Errorf("a post from the localhost origin: %s %s, want it to reach the core", resp.Status, body)
	}
	resp, _ = do(t, bare, "POST", f.base+"/action/approve", map[string]string{"Host": "localhost:" + port, "Origin": f.base,
		"Cookie": cookie.String(), "Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}, form(url.Values{"csrf": {csrf}, "confirmation_id": {"conf-nope"}}))
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("Host localhost with the 127.0.0.1 origin: %s, want 403", resp.Status)
	}
	// The right form is accepted: it reaches the core, which answers.
	resp, body = do(t, c, "POST", f.base+"/action/approve", post, form(url.Values{"csrf": {csrf}, "confirmation_id": {"conf-nope"}}))
	var r refusal
	if json.Unmarshal([]byte(body), &r); resp.StatusCode != http.StatusBadRequest || r.Error.Code != api.CodeInvalidParams.Name() {
		t.Errorf("approve of an unknown confirmation: %s %s, want the core's INVALID_PARAMS", resp.Status, body)
	}
	// Logging out ends the session.
	resp, _ = do(t, c, "POST", f.base+"/logout", with(post, "Accept", ""), form(url.Values{"csrf": {csrf}}))
	if resp.StatusCode != http.StatusSeeOther {
		t.Errorf("logout: %s", resp.Status)
	}
	if resp, _ := do(t, c, "GET", f.base+"/api/jobs", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("after logout: %s, want 401", resp.Status)
	}
}

// The event stream is Server-Sent Events: ready with the sequence it
// starts after, then each event published as one message.
func TestStream(t *testing.T) {
	f := newFixture(t)
	c, _ := f.login(t)
	c.Timeout = 0
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", f.base+"/stream", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("stream content type %q", ct)
	}
	rd := bufio.NewReader(resp.Body)
	message := func() []string {
		t.Helper()
		var lines []string
		for {
			l, err := rd.ReadString('\n')
			if err != nil {
				t.Fatal(err)
			}
			l = strings.TrimSuffix(l, "\n")
			if l == "" {
				return lines
			}
			lines = append(lines, l)
		}
	}
	seq := f.b.EventSequence()
	if got := message(); len(got) != 3 || got[0] != "retry: 1000" || got[1] != "event: ready" || got[2] != `data: {"sequence":`+itoa(seq)+`}` {
		t.Fatalf("first message %q", got)
	}
	f.b.Publish(api.EventAppConnected, "org.example", "", map[string]any{"app_id": "org.example"})
	got := message()
	if len(got) != 2 || got[0] != "id: "+itoa(seq+1) || !strings.HasPrefix(got[1], "data: ") {
		t.Fatalf("event message %q", got)
	}
	var ev api.Event
	if err := json.Unmarshal([]byte(strings.TrimPrefix(got[1], "data: ")), &ev); err != nil || ev.Type != api.EventAppConnected || ev.AppID != "org.example" || string(ev.Data) != `{"app_id":"org.example"}` {
		t.Errorf("event %+v %v", ev, err)
	}
	cancel()
	resp.Body.Close()
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// Close ends the streams that are open, and no stream goroutine stays.
func TestCloseEndsStreams(t *testing.T) {
	testkit.CheckGoroutines(t)
	f := newFixture(t)
	c, _ := f.login(t)
	resp, err := c.Get(f.base + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	rd.ReadString('\n')
	done := make(chan struct{})
	go func() { f.srv.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end the open stream")
	}
	var rest strings.Builder
	for {
		l, err := rd.ReadString('\n')
		rest.WriteString(l)
		if err != nil {
			break
		}
	}
}

// Logging out ends the session's open streams.
func TestLogoutEndsStream(t *testing.T) {
	f := newFixture(t)
	c, csrf := f.login(t)
	resp, err := c.Get(f.base + "/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if l, _ := rd.ReadString('\n'); l != "retry: 1000\n" {
		t.Fatalf("stream began %q", l)
	}
	r, _ := do(t, c, "POST", f.base+"/logout", map[string]string{"Origin": f.base, "Content-Type": "application/x-www-form-urlencoded"}, url.Values{"csrf": {csrf}}.Encode())
	if r.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %s", r.Status)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := rd.ReadString('\n'); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the stream outlived the logout")
	}
}
