package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/store"
)

// FuzzRequest sends arbitrary requests of a logged-in browser (method,
// path and query, content type, body) to the dashboard: each is answered
// with a status the wire allows, never a panic, and a refusal with the
// JSON of docs/dashboard.md. The form decoding, the CSRF check and each
// action's fields onto its core call are what it reaches.
func FuzzRequest(f *testing.F) {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	b, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: f.TempDir(), LivenessInterval: -1, RateLimits: &core.RateLimits{}})
	if err != nil {
		f.Fatal(err)
	}
	defer b.Close()
	const addr = "127.0.0.1:7881"
	srv := New(b, Options{Addr: addr})
	u, _, _ := srv.NewLogin()
	token := strings.TrimPrefix(u, "http://"+addr+"/login?token=")
	se, ok := srv.login(token)
	if !ok {
		f.Fatal("login failed")
	}
	h := srv.Handler()
	form := func(v url.Values) string { return v.Encode() }
	ct := "application/x-www-form-urlencoded"
	f.Add("POST", "/action/approve", ct, form(url.Values{"csrf": {se.csrf}, "confirmation_id": {"conf-1"}}))
	f.Add("POST", "/action/deny", ct, form(url.Values{"csrf": {se.csrf}, "confirmation_id": {""}, "reason": {"x"}}))
	f.Add("POST", "/action/undo", ct, form(url.Values{"csrf": {se.csrf}, "job_id": {"job-\x00"}}))
	f.Add("POST", "/action/revoke", ct, form(url.Values{"csrf": {se.csrf}, "app_id": {"pcp.inspection"}, "page": {"../x"}}))
	f.Add("POST", "/action/allow", ct+"; charset=utf-8", form(url.Values{"csrf": {se.csrf}, "app_id": {strings.Repeat("a", 300)}}))
	f.Add("POST", "/action/approve", ct, "csrf="+se.csrf+"&%zz")
	f.Add("POST", "/logout", "text/plain", "csrf="+se.csrf)
	f.Add("GET", "/api/events?before=-1", "", "")
	f.Add("GET", "/api/audit?before=99999999999999999999", "", "")
	f.Add("GET", "/api/surface/wireframe.svg?id=%00", "", "")
	f.Add("GET", "/api/shot/../../etc/passwd", "", "")
	f.Add("GET", "/static/app.js?v=1", "", "")
	f.Add("GET", "/login?token=zz&token=yy", "", "")
	// 301 and 307: the mux cleaning a path (/a/../b).
	allowed := map[int]bool{200: true, 301: true, 307: true, 303: true, 400: true, 401: true, 403: true, 404: true, 405: true, 415: true, 500: true, 503: true}
	f.Fuzz(func(t *testing.T, method, target, contentType, body string) {
		if method != "GET" && method != "POST" {
			method = "POST"
		}
		if !strings.HasPrefix(target, "/") || strings.ContainsAny(target, " \r\n#") || target == "/stream" || strings.HasPrefix(target, "/stream?") {
			return // not a request line a client can send; the stream never ends by itself
		}
		req, err := http.NewRequest(method, "http://"+addr+target, strings.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Origin", "http://"+addr)
		req.Header.Set("Content-Type", contentType)
		req.Header.Set("Accept", "application/json")
		req.AddCookie(&http.Cookie{Name: CookieName, Value: se.id})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if !allowed[rec.Code] {
			t.Fatalf("%s %q: status %d", method, target, rec.Code)
		}
		// Refusals are JSON, but for the login page (a page without a
		// session, a bad login URL) and the mux's own 404 and 405.
		html := strings.HasPrefix(rec.Header().Get("Content-Type"), "text/html") && (rec.Code == 401 || rec.Code == 403)
		if rec.Code >= 400 && rec.Code != 404 && rec.Code != 405 && !html && !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Fatalf("%s %q: refused with %d as %q", method, target, rec.Code, rec.Header().Get("Content-Type"))
		}
		if rec.Header().Get("Content-Security-Policy") != csp {
			t.Fatalf("%s %q: no CSP", method, target)
		}
		if srv.lookup(se.id) == nil {
			// A logout: log in again for the next input.
			u, _, _ := srv.NewLogin()
			ns, _ := srv.login(strings.TrimPrefix(u, "http://"+addr+"/login?token="))
			se = ns
		}
	})
}
