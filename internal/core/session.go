package core

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/time/rate"

	"github.com/pcp-dev/pcp/api"
)

// Role is what a session may do.
type Role int

const (
	// RoleAgent is a connection on the agent socket: the agent (the
	// spec's System Intelligence) and apps serving their capabilities.
	RoleAgent Role = iota
	// RoleUser is a connection on the user's control socket: the CLI
	// acting as the user, trusted surfaces. Only it may lift revocations.
	RoleUser
)

func (r Role) String() string {
	if r == RoleUser {
		return "user"
	}
	return "agent"
}

// Endpoint is what the connection behind a session offers the core,
// declared when the session opens: one typed role per field, nil for a
// role the connection does not offer. Each face implements the roles in
// its own wire format; the core never sees a method name or a JSON-RPC
// message. Every role's methods may be called concurrently.
type Endpoint struct {
	// App serves the capabilities of the apps the connection registers
	// (register.capability). Nil: registering serves nothing, as with
	// serve: false.
	App AppChannel
	// Validate and State are optional parts of spec 001's PcpServer
	// contract that an app's channel may offer (a Tier 1 socket does).
	Validate ParamsValidator
	State    StateQuerier
	// Shutdown tells the app to go, saying why, and ends the connection
	// (revocation). Nil: the session is closed.
	Shutdown Shutdowner
	// Adapter answers the adapter queries once the connection calls
	// register.adapter. Nil: register.adapter is refused.
	Adapter Adapter
	// Events delivers the session's subscriptions. Nil: subscribe.events
	// is refused.
	Events EventSink
	// Closer ends the connection when the core closes the session. Nil:
	// there is nothing to close (an in-process session).
	Closer io.Closer
}

// SessionInfo describes a connection, read when it was accepted.
type SessionInfo struct {
	Role Role
	// Transport is "unix", "tcp" or "inproc".
	Transport string
	// UID and PID are the peer's credentials on a Unix socket, -1 when
	// unknown.
	UID, PID int
	// Remote is the peer address for TCP.
	Remote string
	// NeedsAuth is true for TCP sessions until they present the token.
	NeedsAuth bool
	// Agent names the contained agent whose own socket the connection
	// came in on (agents.open); "" on the shared sockets.
	Agent string
}

// Session is one client connection as the core sees it.
type Session struct {
	ID   string
	Info SessionInfo
	b    *Broker
	ep   Endpoint
	// limiter bounds the session's invocations; nil when unlimited.
	// Guarded by mu (a policy reload replaces it).
	limiter *rate.Limiter
	// unresponsive is set while the peer fails liveness checks.
	unresponsive atomic.Bool
	liveness     sync.Once
	// done is closed when the session closes; it ends the liveness loop.
	done chan struct{}

	// mu guards authed, apps, adapters and closed.
	mu       sync.Mutex
	authed   bool
	apps     map[string]bool // app ids this session serves
	adapters map[string]bool // adapter ids this session serves
	closed   bool
}

// Actor names the session in audit entries, e.g. "agent:uid=1000,pid=42",
// or "agent:<name>" for a contained agent on its own socket.
func (s *Session) Actor() string {
	if s == nil {
		return "inproc"
	}
	if s.Info.Agent != "" {
		return "agent:" + s.Info.Agent
	}
	switch s.Info.Transport {
	case "unix":
		return fmt.Sprintf("%s:uid=%d,pid=%d", s.Info.Role, s.Info.UID, s.Info.PID)
	case "tcp":
		return fmt.Sprintf("%s:tcp=%s", s.Info.Role, s.Info.Remote)
	}
	return s.Info.Role.String() + ":" + s.Info.Transport
}

// Authenticated reports whether the session may call methods.
func (s *Session) Authenticated() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.Info.NeedsAuth || s.authed
}

// MarkAuthenticated records a successful session.authenticate.
func (s *Session) MarkAuthenticated() {
	s.mu.Lock()
	s.authed = true
	s.mu.Unlock()
}

// OpenSession registers a connection and the roles it offers. Close it
// when the connection ends.
func (b *Broker) OpenSession(info SessionInfo, ep Endpoint) *Session {
	s := &Session{ID: b.newID("sess"), Info: info, b: b, ep: ep, apps: map[string]bool{}, adapters: map[string]bool{},
		limiter: b.limits.connectionLimiter(), done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		s.closed = true
	} else {
		b.sessions[s.ID] = s
	}
	b.mu.Unlock()
	if s.closed && ep.Closer != nil {
		ep.Closer.Close()
	}
	return s
}

// Close detaches the session: its subscriptions end, the apps it served
// stop being available, the adapters it served are unbound. It is safe to
// call more than once.
func (s *Session) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	s.mu.Unlock()
	close(s.done)
	s.b.closeSession(s)
	if s.ep.Closer != nil {
		s.ep.Closer.Close()
	}
}

// shutdown tells the app behind the session to shut down, saying why,
// where its connection offers that (a Tier 1 socket's AppShutdown, a
// JSON-RPC connection closing once its requests are answered); otherwise
// it closes the session.
func (s *Session) shutdown(reason string) {
	if s.ep.Shutdown != nil {
		s.ep.Shutdown.Shutdown(reason)
		return
	}
	s.Close()
}

func (b *Broker) closeSession(s *Session) {
	b.mu.Lock()
	delete(b.sessions, s.ID)
	var ended []*subscription
	for id, sub := range b.subs {
		if sub.sess == s {
			delete(b.subs, id)
			ended = append(ended, sub)
		}
	}
	var gone []string
	for _, a := range b.apps {
		if a.owner == s {
			a.owner, a.provider = nil, nil
			gone = append(gone, a.id)
		}
	}
	kept := b.adapters[:0]
	for _, ad := range b.adapters {
		if ad.owner != s {
			kept = append(kept, ad)
		}
	}
	for i := len(kept); i < len(b.adapters); i++ {
		b.adapters[i] = nil
	}
	b.adapters = kept
	b.mu.Unlock()
	for _, sub := range ended {
		sub.stop()
	}
	for _, id := range gone {
		b.publish(api.EventAppDisconnected, id, "", map[string]any{"app_id": id})
	}
	b.sessionEnded(s)
}

type sessionKey struct{}

// WithSession returns ctx carrying s as the caller.
func WithSession(ctx context.Context, s *Session) context.Context {
	return context.WithValue(ctx, sessionKey{}, s)
}

// SessionFrom returns the caller's session, or nil.
func SessionFrom(ctx context.Context) *Session {
	s, _ := ctx.Value(sessionKey{}).(*Session)
	return s
}

func roleOf(ctx context.Context) Role {
	if s := SessionFrom(ctx); s != nil {
		return s.Info.Role
	}
	return RoleAgent
}
