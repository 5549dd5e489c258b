package rpc

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// Options configure the face.
type Options struct {
	// MaxLine bounds one request line; 0 means 1 MiB.
	MaxLine int
	// Token is the bearer token TCP sessions must present with
	// session.authenticate before any other method.
	Token  string
	Logger *slog.Logger
}

// Server serves the JSON-RPC face of one broker.
type Server struct {
	b    *core.Broker
	opts Options
}

// NewServer returns the face for b.
func NewServer(b *core.Broker, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{b: b, opts: opts}
}

// maxAuthFailures closes a TCP connection that keeps guessing the token.
const maxAuthFailures = 3

// ServeConn serves one accepted connection until it closes. info says who
// the peer is, as read at accept.
func (s *Server) ServeConn(rwc io.ReadWriteCloser, info core.SessionInfo) error {
	h := &handler{srv: s}
	conn := jsonrpc.NewConn(rwc, jsonrpc.Options{
		Handler: h,
		MaxLine: s.opts.MaxLine,
		OnProtocolError: func(e *api.Error) {
			s.opts.Logger.Debug("protocol error", "code", e.Code.Name(), "message", e.Message)
		},
	})
	h.conn = conn
	h.sess = s.b.OpenSession(info, endpoint(conn))
	defer h.sess.Close()
	return conn.Run()
}

type handler struct {
	srv      *Server
	conn     *jsonrpc.Conn
	sess     *core.Session
	failures atomic.Int32
}

func (h *handler) Handle(ctx context.Context, m *jsonrpc.Message) (any, error) {
	ctx = core.WithSession(ctx, h.sess)
	if m.Method == api.MethodSessionAuthenticate {
		return h.authenticate(m.Params)
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

func (h *handler) authenticate(raw json.RawMessage) (any, error) {
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
	if h.srv.opts.Token == "" || subtle.ConstantTimeCompare([]byte(p.Token), []byte(h.srv.opts.Token)) != 1 {
		if h.failures.Add(1) >= maxAuthFailures {
			// Let the refusal reach the peer, then hang up.
			time.AfterFunc(100*time.Millisecond, func() { h.conn.Close() })
		}
		return nil, api.Errorf(api.CodePermissionDenied, nil, "invalid token")
	}
	h.sess.MarkAuthenticated()
	return &api.SessionAuthenticateResult{Authenticated: true}, nil
}
