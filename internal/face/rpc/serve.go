package rpc

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/deadline"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// Options configure the face.
type Options struct {
	// MaxLine bounds one request line; 0 means 1 MiB.
	MaxLine int
	// Token is the bearer token TCP sessions must present with
	// session.authenticate, alone, before anything else is read.
	Token string
	// AuthTimeout closes a TCP connection that has not authenticated in
	// time; 0 means DefaultAuthTimeout, negative no bound.
	AuthTimeout time.Duration
	// AuthMaxLine bounds a line before authentication; 0 means
	// DefaultAuthMaxLine.
	AuthMaxLine int
	// AuthFailuresPerSecond and AuthFailureBurst bound wrong tokens,
	// daemon-wide: once the burst is spent, every attempt is answered
	// RATE_LIMITED, unchecked, until the bucket refills. 0 means
	// DefaultAuthFailuresPerSecond, DefaultAuthFailureBurst.
	AuthFailuresPerSecond float64
	AuthFailureBurst      int
	// IdleTimeout closes a connection that is silent and has no duties
	// (no request in flight, no app, adapter or subscription); 0 means
	// never. MessageTimeout bounds the arrival of one line once begun;
	// 0 means no bound. See jsonrpc.Options.
	IdleTimeout, MessageTimeout time.Duration
	// LineBudget bounds the memory of long lines of all connections.
	LineBudget *deadline.Budget
	Logger     *slog.Logger
	// MaxUnreadAttachments bounds, per connection, the bytes of the
	// attachments passed as memfds that the peer may leave unread; 0
	// means DefaultMaxUnreadAttachments (see fdPassing.reserve).
	MaxUnreadAttachments int64
	// OnAuthenticated, if set, is told when a connection that needs the
	// token (the rwc ServeConn was given) presents the right one; it may
	// be told more than once of one connection. The daemon counts
	// unauthenticated TCP connections apart.
	OnAuthenticated func(rwc io.ReadWriteCloser)
}

// Defaults of Options.
const (
	DefaultAuthTimeout           = 10 * time.Second
	DefaultAuthMaxLine           = 4 << 10
	DefaultAuthFailuresPerSecond = 5
	DefaultAuthFailureBurst      = 20
)

// Server serves the JSON-RPC face of one broker.
type Server struct {
	b    *core.Broker
	opts Options
	// authFailures throttles wrong tokens across every connection.
	authFailures *rate.Limiter
}

// NewServer returns the face for b.
func NewServer(b *core.Broker, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.AuthTimeout == 0 {
		opts.AuthTimeout = DefaultAuthTimeout
	}
	if opts.AuthMaxLine <= 0 {
		opts.AuthMaxLine = DefaultAuthMaxLine
	}
	if opts.AuthFailuresPerSecond <= 0 {
		opts.AuthFailuresPerSecond = DefaultAuthFailuresPerSecond
	}
	if opts.AuthFailureBurst <= 0 {
		opts.AuthFailureBurst = DefaultAuthFailureBurst
	}
	if opts.MaxUnreadAttachments <= 0 {
		opts.MaxUnreadAttachments = DefaultMaxUnreadAttachments
	}
	return &Server{b: b, opts: opts, authFailures: rate.NewLimiter(rate.Limit(opts.AuthFailuresPerSecond), opts.AuthFailureBurst)}
}

// maxAuthFailures closes an authenticated TCP connection that keeps
// presenting wrong tokens.
const maxAuthFailures = 3

// ServeConn serves one accepted connection until it closes. info says who
// the peer is, as read at accept. A connection that needs the token
// (TCP) must send session.authenticate first, alone (jsonrpc.Gate): any
// other first message, or a wrong token, is answered and the connection
// closed, and one that has not authenticated within AuthTimeout is
// closed.
func (s *Server) ServeConn(rwc io.ReadWriteCloser, info core.SessionInfo) error {
	h := &handler{srv: s, rwc: rwc}
	opts := jsonrpc.Options{
		Handler: h,
		MaxLine: s.opts.MaxLine,
		OnProtocolError: func(e *api.Error) {
			s.opts.Logger.Debug("protocol error", "code", e.Code.Name(), "message", e.Message)
		},
		OnPanic: func(v any, stack []byte) {
			s.opts.Logger.Error("recovered from a panic in a handler", "panic", v, "session", h.sess.ID, "stack", string(stack))
		},
		IdleTimeout:    s.opts.IdleTimeout,
		MessageTimeout: s.opts.MessageTimeout,
		KeepAlive:      func() bool { return h.sess.OnDuty() },
		LineBudget:     s.opts.LineBudget,
	}
	if info.NeedsAuth {
		opts.Gate = &jsonrpc.Gate{Method: api.MethodSessionAuthenticate, MaxLine: s.opts.AuthMaxLine, Timeout: s.opts.AuthTimeout}
	}
	conn := jsonrpc.NewConn(rwc, opts)
	h.conn = conn
	h.fds = newFDPassing(conn, rwc, s.opts.MaxUnreadAttachments)
	h.sess = s.b.OpenSession(info, endpoint(conn))
	defer h.sess.Close()
	return conn.Run()
}

type handler struct {
	srv      *Server
	rwc      io.ReadWriteCloser
	conn     *jsonrpc.Conn
	sess     *core.Session
	failures atomic.Int32
	// fds is the connection's memfd passing, nil if it cannot pass any.
	fds *fdPassing
}

func (h *handler) Handle(ctx context.Context, m *jsonrpc.Message) (any, error) {
	ctx = withFDPassing(core.WithSession(ctx, h.sess), h.fds)
	if m.Method == api.MethodSessionAuthenticate {
		return h.authenticate(ctx, m.Params)
	}
	if !h.sess.Authenticated() {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"method": m.Method},
			"authenticate first: call %s with the bearer token", api.MethodSessionAuthenticate)
	}
	if m.IsNotification() {
		// An adapter reporting what it saw, when the core says so; a
		// notification has no answer to carry a refusal.
		if ok, _ := h.srv.b.AdapterEvent(ctx, m.Method, m.Params); ok {
			return nil, nil
		}
	}
	md := lookup(m.Method)
	if md == nil {
		return nil, api.Errorf(api.CodeMethodNotFound, map[string]any{"method": m.Method}, "method not found: %s", m.Method)
	}
	if md.userOnly && h.sess.Info.Role != core.RoleUser {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"method": m.Method, "required_role": "user"},
			"%s is for the user only; it is served on the control socket", m.Method)
	}
	return md.call(ctx, h.srv.b, m.Params)
}

func (h *handler) authenticate(ctx context.Context, raw json.RawMessage) (any, error) {
	var p api.SessionAuthenticateParams
	if err := decodeParams(raw, &p); err != nil {
		return nil, err
	}
	if !h.sess.Info.NeedsAuth {
		return &api.SessionAuthenticateResult{Authenticated: true}, nil
	}
	if p.Token == "" {
		return nil, api.MissingParam("token")
	}
	if h.srv.opts.Token != "" && subtle.ConstantTimeCompare([]byte(p.Token), []byte(h.srv.opts.Token)) == 1 {
		// The right token is never throttled: a flood of wrong ones from
		// another local process cannot lock the real client out.
		h.sess.MarkAuthenticated()
		if f := h.srv.opts.OnAuthenticated; f != nil {
			f(h.rwc)
		}
		return &api.SessionAuthenticateResult{Authenticated: true}, nil
	}
	if err := h.tarpit(ctx); err != nil {
		return nil, err
	}
	if h.failures.Add(1) >= maxAuthFailures {
		// Let the refusal reach the peer, then hang up. (Before
		// authentication the gate already hangs up at the first.)
		h.conn.CloseWhenIdle()
	}
	return nil, api.Errorf(api.CodePermissionDenied, nil, "invalid token")
}

// tarpit holds the answer to a wrong token until the daemon-wide
// throttle has room for it, so that guesses over any number of
// connections are answered at most at its rate (after its burst). A
// guess that would wait past the authentication timeout gets no answer
// at all: the connection is closed, and the peer learns nothing of it.
func (h *handler) tarpit(ctx context.Context) error {
	lim := h.srv.authFailures
	r := lim.Reserve()
	d := r.Delay()
	if d == 0 {
		return nil
	}
	refused := api.Errorf(api.CodeRateLimited, map[string]any{"scope": "authentication", "limit_per_second": float64(lim.Limit()), "burst": lim.Burst()},
		"too many failed authentications")
	if d > h.srv.opts.AuthTimeout {
		r.Cancel()
		h.conn.Close()
		return refused
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		r.Cancel()
		return refused
	}
}
