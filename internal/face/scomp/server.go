// Package scomp is PCP's scomp face (spec 004): an agent sends short
// JavaScript programs that call the capabilities it may see as
// functions ("bindings"), and gets only their result back. It is served
// over WebSocket (github.com/coder/websocket), on a loopback TCP address
// behind a bearer token and on pcpd's scomp.sock with the peer's
// credentials; every text frame is one JSON-RPC 2.0 message.
//
// How the parts fit: Server holds the options and the live connections;
// each accepted connection is a conn (conn.go) with its core.Session,
// opened with the SessionInfo the upgrade established, and after
// handshake (handshake.go) its sandbox (sandbox.go): one QuickJS VM whose
// only host objects are the bindings, each a core invocation with the
// connection's session. Before its upgrade a connection reserves its
// heap's limit of the face-wide budget (budget.go), which it gives back
// when it ends.
//
// Goroutines: two per connection: the HTTP server's, which handles the
// requests one at a time, so evals run in order, and a reader that reads
// every frame and hands replies to the reverse invokes waiting for them
// (conn.go). Close ends every connection and waits for them.
package scomp

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// Subprotocol is the WebSocket subprotocol of scomp 0.1, accepted when a
// client offers it; a client offering none is served too.
const Subprotocol = "scomp.v0"

// Defaults of Options.
const (
	DefaultMaxMessage  = 1 << 20
	DefaultEvalTimeout = 30 * time.Second
	DefaultMemoryLimit = 64 << 20
)

// Options configure the face.
type Options struct {
	// MaxMessage bounds one frame's payload; a longer one closes the
	// connection with 1009. 0 means DefaultMaxMessage.
	MaxMessage int
	// EvalTimeout bounds one eval; 0 means DefaultEvalTimeout.
	EvalTimeout time.Duration
	// InvokeTimeout bounds the client's answer to one reverse invoke
	// (a call of a client binding); 0 means DefaultInvokeTimeout.
	InvokeTimeout time.Duration
	// MemoryLimit bounds a session's JavaScript heap; 0 means
	// DefaultMemoryLimit.
	MemoryLimit int
	// MemoryTotal bounds the heaps of the sessions open at once
	// together: each reserves its MemoryLimit before its upgrade and
	// gives it back when its connection ends, and an upgrade that finds
	// too little left is refused with HTTP 429 and RATE_LIMITED, scope
	// scomp_memory. 0 means DefaultMemoryTotal.
	MemoryTotal int64
	// AdmitTCP, if set, is called with each TCP upgrade request that
	// presented the token, before anything else is done with it. An
	// error refuses the upgrade (HTTP 429 for RATE_LIMITED, 503 for any
	// other code) and the connection is closed after the answer;
	// otherwise release is called once the request is done with (for an
	// upgrade, once its session has ended). The daemon counts TCP
	// sessions with it.
	AdmitTCP func(r *http.Request) (release func(), err *api.Error)
	// Version is the server version announced at handshake.
	Version string
	Logger  *slog.Logger
	// NewSessionID makes session ids; nil means random ones. Tests fix it.
	NewSessionID func() string
	// ConfirmWait bounds how long a binding call waits for the user to
	// decide a confirmation; 0 means DefaultConfirmWait.
	ConfirmWait time.Duration
	// AttachmentLimit, when set, lowers the bound on the bytes of one
	// capability result's attachments a binding call hands an eval in
	// base64, which is otherwise a sixteenth of the session's heap.
	AttachmentLimit int64
	// SessionLimits, when set, gives the eval limits of a session of the
	// contained agent named agent ("" for none), read at each eval: the
	// user's policy. A zero field leaves the Options' own.
	SessionLimits func(agent string) Limits
}

// Server is the scomp face of one broker.
type Server struct {
	b    *core.Broker
	opts Options
	// ctx ends with Close: it interrupts the evals running.
	ctx    context.Context
	cancel context.CancelFunc

	mem    *memoryBudget
	mu     sync.Mutex
	conns  map[*websocket.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// New returns the face for b.
func New(b *core.Broker, opts Options) *Server {
	if opts.MaxMessage <= 0 {
		opts.MaxMessage = DefaultMaxMessage
	}
	if opts.EvalTimeout <= 0 {
		opts.EvalTimeout = DefaultEvalTimeout
	}
	if opts.InvokeTimeout <= 0 {
		opts.InvokeTimeout = DefaultInvokeTimeout
	}
	if opts.MemoryLimit <= 0 {
		opts.MemoryLimit = DefaultMemoryLimit
	}
	if opts.MemoryTotal <= 0 {
		opts.MemoryTotal = DefaultMemoryTotal
	}
	if opts.Version == "" {
		opts.Version = "0.1.0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.NewSessionID == nil {
		opts.NewSessionID = randomSessionID
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Server{b: b, opts: opts, conns: map[*websocket.Conn]bool{}, mem: newMemoryBudget(opts.MemoryTotal), ctx: ctx, cancel: cancel}
}

// Authentication failures are throttled face-wide, as the other TCP
// endpoints throttle wrong tokens.
const (
	authFailuresPerSecond = 5
	authFailureBurst      = 20
)

// TCPHandler serves scomp for a loopback listener on addr. An upgrade
// must name a loopback host on addr's port in Host (no DNS rebinding),
// carry no Origin or a loopback one on that port (no web page
// elsewhere), and present the token (Authorization: Bearer TOKEN).
// Refusals are HTTP errors with a JSON-RPC error body from the catalogue.
func (s *Server) TCPHandler(addr, token string) http.Handler {
	_, port, _ := net.SplitHostPort(addr)
	failures := rate.NewLimiter(authFailuresPerSecond, authFailureBurst)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host, port) {
			refuse(w, http.StatusForbidden, api.Errorf(api.CodePermissionDenied, map[string]any{"host": r.Host},
				"host %q refused: this endpoint answers only to 127.0.0.1, localhost or [::1] on port %s", r.Host, port))
			return
		}
		if !s.originAllowed(w, r, port) {
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) != 1 {
			if !failures.Allow() {
				refuse(w, http.StatusTooManyRequests, api.Errorf(api.CodeRateLimited, map[string]any{"scope": "authentication"},
					"too many failed authentications"))
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="pcp"`)
			refuse(w, http.StatusUnauthorized, api.Errorf(api.CodePermissionDenied, nil,
				"missing or wrong bearer token: send Authorization: Bearer with the token pcpd wrote to its scomp token file"))
			return
		}
		if s.opts.AdmitTCP != nil {
			release, e := s.opts.AdmitTCP(r)
			if e != nil {
				status := http.StatusTooManyRequests
				if e.Code != api.CodeRateLimited {
					status = http.StatusServiceUnavailable
				}
				w.Header().Set("Connection", "close")
				refuse(w, status, e)
				return
			}
			defer release()
		}
		info := core.SessionInfo{Role: core.RoleAgent, Transport: "tcp", Remote: r.RemoteAddr, UID: -1, PID: -1}
		s.serve(w, r, info, map[string]any{"kind": "websocket", "network": "tcp", "auth": "bearer"})
	})
}

type peerKey struct{}

type peer struct{ uid, pid int }

// UnixConnContext is the http.Server ConnContext of a Unix socket
// listener: it records the peer's credentials for UnixHandler.
func UnixConnContext(ctx context.Context, c net.Conn) context.Context {
	p := peer{uid: -1, pid: -1}
	if uc, ok := c.(*net.UnixConn); ok {
		if uid, pid, err := unixsock.PeerCred(uc); err == nil {
			p = peer{uid, pid}
		}
	}
	return context.WithValue(ctx, peerKey{}, p)
}

// UnixHandler serves scomp on a Unix socket (an http.Server whose
// ConnContext is UnixConnContext): the peer's credentials decide who the
// session is, and only the daemon's own user is served. Any Origin is
// refused: no web page speaks to a Unix socket on its own.
func (s *Server) UnixHandler() http.Handler {
	self := os.Getuid()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, ok := r.Context().Value(peerKey{}).(peer)
		if !ok || !unixsock.AllowPeer(p.uid, self) {
			refuse(w, http.StatusForbidden, api.Errorf(api.CodePermissionDenied, map[string]any{"uid": p.uid},
				"peer uid %d refused: scomp.sock serves only the daemon's user", p.uid))
			return
		}
		if !s.originAllowed(w, r, "") {
			return
		}
		info := core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: p.uid, PID: p.pid, Agent: agentOf(r.Context())}
		s.serve(w, r, info, map[string]any{"kind": "websocket", "network": "unix", "uid": p.uid, "pid": p.pid})
	})
}

// originAllowed refuses an upgrade whose Origin is not a loopback origin
// on port ("" allows none), answering it.
func (s *Server) originAllowed(w http.ResponseWriter, r *http.Request, port string) bool {
	values, ok := r.Header["Origin"]
	if !ok {
		return true
	}
	if len(values) == 1 && port != "" {
		if u, err := url.Parse(values[0]); err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Port() == port && isLoopbackName(u.Hostname()) {
			return true
		}
	}
	origin := strings.Join(values, ",")
	refuse(w, http.StatusForbidden, api.Errorf(api.CodePermissionDenied, map[string]any{"origin": origin},
		"origin %q refused: a web page may not open a scomp session", origin))
	return false
}

func loopbackHost(hostport, port string) bool {
	host, p, err := net.SplitHostPort(hostport)
	return err == nil && p == port && isLoopbackName(host)
}

func isLoopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func refuse(w http.ResponseWriter, status int, e *api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(jsonrpc.AppendError(nil, nil, e), '\n'))
}

// serve upgrades the request and serves the connection until it ends.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, info core.SessionInfo, transport map[string]any) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		refuse(w, http.StatusServiceUnavailable, api.Errorf(api.CodeInternalError, nil, "pcpd is shutting down"))
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	limit := int64(s.limitsFor(info.Agent).MemoryLimit)
	if inUse, ok := s.mem.reserve(limit); !ok {
		w.Header().Set("Connection", "close")
		refuse(w, http.StatusTooManyRequests, api.Errorf(api.CodeRateLimited,
			map[string]any{"scope": "scomp_memory", "limit": s.opts.MemoryTotal, "in_use": inUse, "session_limit": limit},
			"scomp session refused: the sessions open have reserved %d of the %d bytes of heap they may hold together, and one more needs %d",
			inUse, s.opts.MemoryTotal, limit))
		return
	}
	defer s.mem.release(limit)
	// Origin is checked above, by rules of PCP's own.
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}, InsecureSkipVerify: true})
	if err != nil {
		s.opts.Logger.Debug("scomp upgrade failed", "err", err)
		return
	}
	ws.SetReadLimit(int64(s.opts.MaxMessage))
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ws.Close(websocket.StatusGoingAway, "pcpd is shutting down")
		return
	}
	s.conns[ws] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, ws)
		s.mu.Unlock()
	}()
	c := &conn{s: s, ws: ws, transport: transport, events: newEventBuffer(), reserved: int(limit)}
	c.sess = s.b.OpenSession(info, core.Endpoint{Events: c.events, Closer: closerFunc(func() error { return ws.CloseNow() })})
	defer c.close()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.ctx, cancel)()
	s.opts.Logger.Debug("scomp connection ended", "err", c.run(ctx))
}

// MemoryInUse is the heap the sessions open now have reserved of
// Options.MemoryTotal.
func (s *Server) MemoryInUse() int64 { return s.mem.used() }

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// Close ends every connection, interrupting the evals running, and
// waits until each is let go of.
func (s *Server) Close() {
	s.cancel()
	s.mu.Lock()
	s.closed = true
	for ws := range s.conns {
		ws.CloseNow()
	}
	s.mu.Unlock()
	s.wg.Wait()
}
