// Package mcp is PCP's Model Context Protocol face, served by pcpd on
// the go-sdk (github.com/modelcontextprotocol/go-sdk): what agent hosts
// speak. It offers a small fixed set of tools (tools.go), each one typed
// core call with the caller's session, so every request is the core's
// own: the same checks, the same audit entries, the same confirmations.
//
// Two transports: ServeConn serves MCP's stdio framing on one accepted
// stream connection (pcpd's mcp.sock; `pcpctl mcp` relays an agent
// host's stdin/stdout to it), framed by lineConn (conn.go); HTTPHandler
// serves streamable HTTP behind a bearer token and Host/Origin checks
// (http.go).
//
// How the parts fit: one sdk.Server holds the tool table; a connection
// (or an HTTP MCP session) is a caller: its core.Session, opened with the
// SessionInfo read at accept, and the event sink its pcp_events waits
// read from. A tool handler finds its caller, validates the arguments
// against the tool's JSON Schema, makes the core call and turns the
// answer into a CallToolResult; a PCP error becomes a result with
// isError and {code, name, message, data}. CONFIRMATION_REQUIRED is
// waited out (confirm.go).
//
// Goroutines: ServeConn runs the SDK's session for its connection and
// returns when it ends; each HTTP session has one goroutine that closes
// its core session when the SDK ends it, and the exposer's subscription
// has its pump in the core (both owned by Server, ended by Close).
package mcp

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/deadline"
)

// Options configure the face.
type Options struct {
	// ConfirmWait bounds how long a tool call waits for the user to
	// decide a confirmation; 0 means DefaultConfirmWait.
	ConfirmWait time.Duration
	// ProgressInterval is how often a waiting call sends a progress
	// notification (when the client gave a progressToken), after the
	// first one, sent at once; 0 means DefaultProgressInterval.
	ProgressInterval time.Duration
	// MaxLine bounds one message on a stream connection and one HTTP
	// request body; 0 means DefaultMaxLine.
	MaxLine int
	// MessageTimeout bounds the arrival of one line once begun; 0 means
	// no bound.
	MessageTimeout time.Duration
	// WriteTimeout closes a stream connection whose peer has not taken a
	// message within it; 0 means DefaultWriteTimeout.
	WriteTimeout time.Duration
	// HTTPSessionTimeout ends an HTTP MCP session that has sent no
	// request this long (its core session with it); 0 means never.
	HTTPSessionTimeout time.Duration
	// LineBudget bounds the memory of long lines across connections.
	LineBudget *deadline.Budget
	// ExposeCapabilities adds one tool per registered capability, kept in
	// step with the registry (expose.go).
	ExposeCapabilities bool
	// Version is the server version announced at initialize.
	Version string
	Logger  *slog.Logger

	onProtocol func(*api.Error)
}

// Defaults of Options.
const (
	DefaultConfirmWait      = 120 * time.Second
	DefaultProgressInterval = 5 * time.Second
	DefaultMaxLine          = 1 << 20
	DefaultWriteTimeout     = 10 * time.Second
)

// Server is the MCP face of one broker.
type Server struct {
	b    *core.Broker
	opts Options
	srv  *sdk.Server

	// mu guards byHTTP, streams, closed, httpServed and httpInfo.
	mu         sync.Mutex
	byHTTP     map[*sdk.ServerSession]*caller
	streams    map[*sdk.ServerSession]bool // the sessions of ServeConn
	closed     bool
	httpServed bool
	httpInfo   core.SessionInfo
	// exposer keeps the capability tools; nil without ExposeCapabilities.
	exposer *exposer
	// httpWG counts the goroutines that end the HTTP sessions' callers.
	httpWG sync.WaitGroup
}

// New returns the face for b.
func New(b *core.Broker, opts Options) *Server {
	if opts.ConfirmWait <= 0 {
		opts.ConfirmWait = DefaultConfirmWait
	}
	if opts.ProgressInterval <= 0 {
		opts.ProgressInterval = DefaultProgressInterval
	}
	if opts.MaxLine <= 0 {
		opts.MaxLine = DefaultMaxLine
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	if opts.Version == "" {
		opts.Version = "0.1.0"
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	log := opts.Logger
	opts.onProtocol = func(e *api.Error) { log.Debug("mcp protocol error", "code", e.Code.Name(), "message", e.Message) }
	s := &Server{b: b, opts: opts, byHTTP: map[*sdk.ServerSession]*caller{}, streams: map[*sdk.ServerSession]bool{}}
	s.srv = sdk.NewServer(&sdk.Implementation{Name: "pcp", Title: "PCP", Version: opts.Version}, &sdk.ServerOptions{
		Instructions: instructions,
		// The SDK logs every session's start and end at Info; the
		// daemon's log keeps its warnings and errors only.
		Logger:       slog.New(minLevel{opts.Logger.Handler(), slog.LevelWarn}),
		Capabilities: &sdk.ServerCapabilities{Tools: &sdk.ToolCapabilities{ListChanged: true}},
	})
	for _, t := range tools {
		s.srv.AddTool(t.tool(), s.handler(t))
	}
	if opts.ExposeCapabilities {
		if err := s.startExposer(); err != nil {
			log.Error("cannot expose the capabilities as tools", "err", err)
		}
	}
	return s
}

// minLevel passes on the records of its handler at level or above.
type minLevel struct {
	slog.Handler
	level slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.level && m.Handler.Enabled(ctx, l)
}

func (m minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(a), m.level}
}

func (m minLevel) WithGroup(g string) slog.Handler { return minLevel{m.Handler.WithGroup(g), m.level} }

// instructions tell the agent how the tools fit together.
const instructions = `PCP reaches the user's desktop apps. Find capabilities with pcp_search, read one's parameters with pcp_describe, run it with pcp_invoke. Apps without capabilities (Tier 2) are reached through their accessibility tree: pcp_context and pcp_search list their windows (surfaces), pcp_elements reads a window's elements, pcp_act acts on one. Some actions need the user's approval: the call then waits until the user decides on their own screen; nothing you send can approve it.`

// caller is one MCP peer as the core sees it: a stream connection, or an
// HTTP MCP session.
type caller struct {
	sess *core.Session
	sink *sink
	// ctx ends when the peer goes; a tool call's context ends with it.
	ctx    context.Context
	cancel context.CancelFunc
}

func (s *Server) newCaller(info core.SessionInfo, closer interface{ Close() error }) *caller {
	c := &caller{sink: newSink()}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	ep := core.Endpoint{Events: c.sink}
	if closer != nil {
		ep.Closer = closer
	}
	c.sess = s.b.OpenSession(info, ep)
	return c
}

func (c *caller) close() {
	c.cancel()
	c.sess.Close()
}

type callerKey struct{}

// ServeConn serves MCP's stdio framing on one accepted connection until
// it closes. info says who the peer is, as read at accept.
func (s *Server) ServeConn(c net.Conn, info core.SessionInfo) error {
	lc := newLineConn(c, &s.opts)
	cl := s.newCaller(info, lc)
	defer cl.close()
	// The SDK's handlers run in contexts derived from this one's values
	// (not its cancellation), which is how a tool call finds its caller.
	ctx := context.WithValue(context.Background(), callerKey{}, cl)
	ss, err := s.srv.Connect(ctx, lc, nil)
	if err != nil {
		lc.Close()
		return err
	}
	s.mu.Lock()
	s.streams[ss] = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, ss)
		s.mu.Unlock()
	}()
	go func() {
		<-lc.done
		cl.cancel()
	}()
	return ss.Wait()
}

// callerOf finds the caller of a tool call: from the context on a stream
// connection, by the SDK's session over HTTP (opened at its first call).
func (s *Server) callerOf(ctx context.Context, ss *sdk.ServerSession) *caller {
	if cl, ok := ctx.Value(callerKey{}).(*caller); ok {
		return cl
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cl := s.byHTTP[ss]; cl != nil {
		return cl
	}
	if s.closed || !s.httpServed || ss == nil {
		return nil
	}
	cl := s.newCaller(s.httpInfo, nil)
	s.byHTTP[ss] = cl
	s.httpWG.Add(1)
	go func() {
		defer s.httpWG.Done()
		ss.Wait()
		s.mu.Lock()
		delete(s.byHTTP, ss)
		s.mu.Unlock()
		cl.close()
	}()
	return cl
}

// Close ends the HTTP sessions (and their callers) and waits for their
// goroutines. Stream connections end when the daemon closes them.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	var open []*sdk.ServerSession
	for ss := range s.srv.Sessions() {
		if !s.streams[ss] {
			open = append(open, ss)
		}
	}
	s.mu.Unlock()
	for _, ss := range open {
		ss.Close()
	}
	if s.exposer != nil {
		s.exposer.close()
	}
	s.httpWG.Wait()
	return nil
}
