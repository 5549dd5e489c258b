package dashboard

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"mime"
	"net/http"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// CookieName is the session cookie.
const CookieName = "pcp_dashboard"

// csp is every response's Content-Security-Policy: nothing inline,
// nothing from elsewhere, no framing, forms only to the dashboard.
const csp = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

func (s *Server) routes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/confirmations", http.StatusSeeOther)
	})
	m.HandleFunc("GET /login", s.serveLogin)
	m.HandleFunc("GET /static/{file}", s.serveStatic)
	for _, p := range pageNames {
		m.HandleFunc("GET /"+p, s.page(p))
	}
	m.HandleFunc("GET /stream", s.authed(s.serveStream))
	m.HandleFunc("GET /api/confirmations", s.authed(s.apiConfirmations))
	m.HandleFunc("GET /api/jobs", s.authed(s.apiJobs))
	m.HandleFunc("GET /api/events", s.authed(s.apiEvents))
	m.HandleFunc("GET /api/audit", s.authed(s.apiAudit))
	m.HandleFunc("GET /api/apps", s.authed(s.apiApps))
	m.HandleFunc("GET /api/surfaces", s.authed(s.apiSurfaces))
	m.HandleFunc("GET /api/surface/wireframe.svg", s.authed(s.apiWireframe))
	m.HandleFunc("GET /api/surface/screenshot", s.authed(s.apiScreenshot))
	m.HandleFunc("GET /api/shot/{key}", s.authed(s.apiShot))
	for name, a := range actions {
		m.HandleFunc("POST /action/"+name, s.authed(s.action(a)))
	}
	m.HandleFunc("POST /logout", s.authed(s.serveLogout))
	return m
}

// serveHTTP applies what holds for every request, then routes it: the
// security headers, the Host check and the cross-origin checks.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	if !s.hosts[r.Host] {
		// DNS rebinding: a page of another site whose name now resolves
		// to 127.0.0.1 sends its own name.
		refuse(w, http.StatusMisdirectedRequest, "wrong_host", "this dashboard answers only to "+s.opts.Addr)
		return
	}
	// The page's own origin is that of the Host it was loaded from (the
	// listener's address, or localhost with its port).
	origin := "http://" + r.Host
	if o := r.Header.Get("Origin"); o != "" && o != origin {
		refuse(w, http.StatusForbidden, "foreign_origin", "requests from another origin are refused")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get("Origin") != origin {
		// Browsers send Origin with every POST; without it the request
		// did not come from the dashboard's own page.
		refuse(w, http.StatusForbidden, "missing_origin", "a form post must carry the dashboard's Origin")
		return
	}
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		// Another site (or another port of this host) asked: a
		// navigation to a page is harmless (the SameSite=Strict cookie
		// is not sent), anything else is refused.
		if r.Method != http.MethodGet || r.Header.Get("Sec-Fetch-Mode") != "navigate" {
			refuse(w, http.StatusForbidden, "cross_site", "cross-site requests are refused")
			return
		}
	}
	s.mux.ServeHTTP(w, r)
}

// refusal is the JSON body of a refused request.
type refusal struct {
	OK    bool      `json:"ok"`
	Error errorBody `json:"error"`
}

type errorBody struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

func refuse(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, &refusal{Error: errorBody{Code: code, Message: msg}})
}

// writeError answers a core error with its catalogue name.
func writeError(w http.ResponseWriter, err error) {
	var pe *api.Error
	if !errors.As(err, &pe) {
		writeJSON(w, http.StatusInternalServerError, &refusal{Error: errorBody{Code: api.CodeInternalError.Name(), Message: err.Error()}})
		return
	}
	status := http.StatusBadRequest
	switch pe.Code {
	case api.CodePermissionDenied:
		status = http.StatusForbidden
	case api.CodeInternalError:
		status = http.StatusInternalServerError
	}
	writeJSON(w, status, &refusal{Error: errorBody{Code: pe.Code.Name(), Message: pe.Message, Data: pe.DataMap()}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	enc.Encode(v)
}

// session finds the request's session by its cookie, nil without one.
func (s *Server) session(r *http.Request) *session {
	c, err := r.Cookie(CookieName)
	if err != nil || c.Value == "" {
		return nil
	}
	return s.lookup(c.Value)
}

// authed serves h only to a logged-in browser.
func (s *Server) authed(h func(w http.ResponseWriter, r *http.Request, se *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		se := s.session(r)
		if se == nil {
			refuse(w, http.StatusUnauthorized, "not_logged_in", "log in with the URL `pcpctl dashboard` prints")
			return
		}
		h(w, r, se)
	}
}

// serveLogin trades a one-time token for the session cookie, then sends
// the browser to the confirmations page (so the token leaves the
// address bar).
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	se, ok := s.login(r.URL.Query().Get("token"))
	if ok {
		if err := s.auditSession(r, se, true); err != nil {
			// No session the audit log does not show.
			s.logout(se)
			writeError(w, err)
			return
		}
	}
	if !ok {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		w.Write(s.pages.loginRefused)
		return
	}
	// A session cookie (no Max-Age): the browser keeps it in memory, not
	// in its profile on disk, and pcpd ends it after SessionTTL idle.
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: se.id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, "/confirmations", http.StatusSeeOther)
}

func (s *Server) serveLogout(w http.ResponseWriter, r *http.Request, se *session) {
	if !s.checkForm(w, r, se) {
		return
	}
	s.logout(se)
	if err := s.auditSession(r, se, false); err != nil {
		s.log.Error("dashboard logout not audited", "err", err)
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// auditSession writes a session's opening or closing to the audit log.
func (s *Server) auditSession(r *http.Request, se *session, opened bool) error {
	ctx, sess := s.userContext(r.Context(), core.Endpoint{})
	defer sess.Close()
	return s.b.DashboardSession(ctx, s.opts.Addr, se.tag, opened)
}

// checkForm parses a form post, bounded, and checks its CSRF token.
func (s *Server) checkForm(w http.ResponseWriter, r *http.Request, se *session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		refuse(w, http.StatusUnsupportedMediaType, "bad_form", "a form post is application/x-www-form-urlencoded")
		return false
	}
	if err := r.ParseForm(); err != nil {
		refuse(w, http.StatusBadRequest, "bad_form", "the form does not parse: "+err.Error())
		return false
	}
	got := r.PostForm.Get("csrf")
	if subtle.ConstantTimeCompare([]byte(got), []byte(se.csrf)) != 1 {
		refuse(w, http.StatusForbidden, "bad_csrf", "the form's CSRF token is missing or wrong; reload the page")
		return false
	}
	return true
}
