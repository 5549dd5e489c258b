// Package dashboard is the web dashboard: a face of the user's role served
// over HTTP on loopback (pcpd --dashboard 127.0.0.1:PORT). It shows, live,
// the pending confirmations with Approve and Deny, the deferred jobs with
// Undo, the event stream, the audit log and its chain, the apps and the
// trust levels in force with Revoke and Allow, and each surface's element
// tree (the wireframe, and a screenshot with the elements' boxes when the
// platform adapter captures).
//
// Like the rest of the faces it holds no business rule: every request is
// one typed core call on a session of the user's role (its audit actor is
// "user:dashboard"), and live updates are a core subscription to every
// event type delivered as Server-Sent Events.
//
// Who may use it: a browser that presented a one-time login URL, which
// only the user's control connection can ask for (dashboard.login, which
// NewLogin answers), and then holds the session cookie it was given
// (HttpOnly, SameSite=Strict). Every request's Host must name the
// listener (no DNS rebinding); a cross-origin Origin or Sec-Fetch-Site is
// refused; every form post carries the session's CSRF token and a
// same-origin Origin. The pages run no inline script, fetch nothing from
// elsewhere, and say so in a strict Content-Security-Policy. The wire is
// described byte by byte in docs/dashboard.md.
//
// Concurrency: Server's methods may be called from any goroutine; mu
// guards logins and sessions (and each session's shots); it is a leaf
// lock, never held across a core call or a write to a client.
package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/internal/core"
)

// Options configure the dashboard.
type Options struct {
	// Addr is the address the dashboard's listener is bound to, e.g.
	// "127.0.0.1:7881" (the port resolved): requests must name it (or
	// localhost with its port) in Host, and login URLs point at it.
	Addr string
	// LoginTTL is how long a login URL works if unused (default
	// DefaultLoginTTL).
	LoginTTL time.Duration
	// SessionTTL ends a browser session idle this long (default
	// DefaultSessionTTL).
	SessionTTL time.Duration
	Logger     *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Defaults of Options, and bounds.
const (
	DefaultLoginTTL   = time.Minute
	DefaultSessionTTL = 12 * time.Hour
	// maxLogins bounds the unused login URLs; asking for one more
	// forgets the oldest.
	maxLogins = 16
	// maxSessions bounds the logged-in browsers; one more logs the
	// least recently seen out.
	maxSessions = 32
	// maxShots bounds the screenshots a session keeps for its page.
	maxShots = 4
	// maxForm bounds a form post's body.
	maxForm = 16 << 10
)

// Server is the dashboard of one broker. New, then serve Handler on a
// loopback listener; Close ends the event streams.
type Server struct {
	b    *core.Broker
	opts Options
	log  *slog.Logger
	// hosts are the Host values requests may carry; the pages' origin
	// is "http://" + the request's Host (origin is Addr's, for the
	// login URLs).
	hosts  map[string]bool
	origin string
	mux    *http.ServeMux
	pages  *pageSet

	// quit is closed by Close: event streams end.
	quit      chan struct{}
	closeOnce sync.Once
	// streams counts the event streams; Add only under mu while closed
	// is false, so that Close's Wait sees every one.
	streams sync.WaitGroup

	// mu guards logins, sessions, each session's shots, and closed.
	mu       sync.Mutex
	closed   bool
	logins   map[string]time.Time // token → expiry
	sessions map[string]*session  // cookie value → session
}

// session is one logged-in browser.
type session struct {
	id, csrf string
	// tag names the session in the audit log; it is not the cookie.
	tag  string
	seen time.Time
	// shots are the screenshots of the surfaces page, by key.
	shots map[string]*shot
	// ended is closed when the session ends (logout, eviction, expiry):
	// its event streams end with it.
	ended chan struct{}
}

// endLocked forgets a session and ends its streams. s.mu must be held.
func (s *Server) endLocked(se *session) {
	if s.sessions[se.id] == se {
		delete(s.sessions, se.id)
		close(se.ended)
	}
}

// New returns the dashboard for b.
func New(b *core.Broker, opts Options) *Server {
	if opts.LoginTTL <= 0 {
		opts.LoginTTL = DefaultLoginTTL
	}
	if opts.SessionTTL <= 0 {
		opts.SessionTTL = DefaultSessionTTL
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Server{b: b, opts: opts, log: opts.Logger, hosts: allowedHosts(opts.Addr), origin: "http://" + opts.Addr,
		quit: make(chan struct{}), logins: map[string]time.Time{}, sessions: map[string]*session{}}
	s.pages = newPageSet()
	s.mux = s.routes()
	return s
}

// allowedHosts are addr itself and, for a loopback IP, localhost with the
// same port.
func allowedHosts(addr string) map[string]bool {
	hosts := map[string]bool{addr: true}
	if _, port, err := net.SplitHostPort(addr); err == nil {
		hosts[net.JoinHostPort("localhost", port)] = true
	}
	return hosts
}

// Handler serves the dashboard.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// Close ends the event streams; requests in flight finish on their own.
// The broker's logins should be taken away first (core.SetDashboard).
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		close(s.quit)
	})
	s.streams.Wait()
}

// streamStarted counts a new event stream, false once Close has begun.
func (s *Server) streamStarted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.streams.Add(1)
	return true
}

// NewLogin mints a one-time login URL (core.DashboardLogins).
func (s *Server) NewLogin() (string, time.Time, error) {
	token := randomHex()
	now := s.opts.Now()
	expires := now.Add(s.opts.LoginTTL)
	s.mu.Lock()
	s.pruneLocked(now)
	for len(s.logins) >= maxLogins {
		s.dropOldestLoginLocked()
	}
	s.logins[token] = expires
	s.mu.Unlock()
	return s.origin + "/login?token=" + token, expires, nil
}

// pruneLocked forgets expired logins and sessions. s.mu must be held.
func (s *Server) pruneLocked(now time.Time) {
	for t, exp := range s.logins {
		if !now.Before(exp) {
			delete(s.logins, t)
		}
	}
	for _, se := range s.sessions {
		if now.Sub(se.seen) >= s.opts.SessionTTL {
			s.endLocked(se)
		}
	}
}

func (s *Server) dropOldestLoginLocked() {
	var oldest string
	var at time.Time
	for t, exp := range s.logins {
		if oldest == "" || exp.Before(at) {
			oldest, at = t, exp
		}
	}
	delete(s.logins, oldest)
}

// Address is the dashboard's listener (core.DashboardLogins).
func (s *Server) Address() string { return s.opts.Addr }

// login trades a login token for a new session, once.
func (s *Server) login(token string) (*session, bool) {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(now)
	if _, ok := s.logins[token]; !ok || len(token) != 64 {
		return nil, false
	}
	delete(s.logins, token)
	for len(s.sessions) >= maxSessions {
		var lru *session
		for _, se := range s.sessions {
			if lru == nil || se.seen.Before(lru.seen) {
				lru = se
			}
		}
		s.endLocked(lru)
	}
	se := &session{id: randomHex(), csrf: randomHex(), tag: randomHex()[:8], seen: now, shots: map[string]*shot{}, ended: make(chan struct{})}
	s.sessions[se.id] = se
	return se, true
}

// lookup finds the session of a cookie value and marks it seen.
func (s *Server) lookup(id string) *session {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.sessions[id]
	if se == nil {
		return nil
	}
	if now.Sub(se.seen) >= s.opts.SessionTTL {
		s.endLocked(se)
		return nil
	}
	se.seen = now
	return se
}

func (s *Server) logout(se *session) {
	s.mu.Lock()
	s.endLocked(se)
	s.mu.Unlock()
}

// userContext opens a core session of the user's role for one request;
// call the returned function when done.
func (s *Server) userContext(ctx context.Context, ep core.Endpoint) (context.Context, *core.Session) {
	sess := s.b.OpenSession(core.SessionInfo{Role: core.RoleUser, Transport: Transport, UID: os.Getuid(), PID: -1}, ep)
	return core.WithSession(ctx, sess), sess
}

// Transport names the dashboard's core sessions: their audit actor is
// "user:dashboard".
const Transport = "dashboard"

func randomHex() string {
	buf := make([]byte, 32)
	rand.Read(buf)
	return hex.EncodeToString(buf)
}
