package core

import (
	"context"
	"fmt"
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

// Peer is the connection behind a session as the core uses it: to call
// an app or adapter that the connection serves, and to push events.
// Implementations must allow concurrent calls.
type Peer interface {
	// Call sends a request to the peer and decodes its answer.
	Call(ctx context.Context, method string, params, result any) error
	// Notify sends a notification; it may block while the peer is slow.
	Notify(method string, params any) error
	// Close ends the connection.
	Close() error
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
}

// Session is one client connection as the core sees it.
type Session struct {
	ID   string
	Info SessionInfo
	b    *Broker
	peer Peer
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

// Actor names the session in audit entries, e.g. "agent:uid=1000,pid=42".
func (s *Session) Actor() string {
	if s == nil {
		return "inproc"
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

// OpenSession registers a connection. Close it when the connection ends.
func (b *Broker) OpenSession(info SessionInfo, peer Peer) *Session {
	s := &Session{ID: b.newID("sess"), Info: info, b: b, peer: peer, apps: map[string]bool{}, adapters: map[string]bool{},
		limiter: b.limits.connectionLimiter(), done: make(chan struct{})}
	b.mu.Lock()
	if b.closed {
		s.closed = true
	} else {
		b.sessions[s.ID] = s
	}
	b.mu.Unlock()
	if s.closed && peer != nil {
		peer.Close()
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
	if s.peer != nil {
		s.peer.Close()
	}
}

// closeGracefully ends the session's connection after the requests it
// has in flight are answered (the caller's own reply included).
func (s *Session) closeGracefully() {
	if g, ok := s.peer.(interface{ CloseWhenIdle() }); ok {
		g.CloseWhenIdle()
		return
	}
	s.Close()
}

// shutdown tells the app behind the session to shut down, saying why,
// where its transport can (a Tier 1 socket's AppShutdown); otherwise it
// closes the connection gracefully.
func (s *Session) shutdown(reason string) {
	if sd, ok := s.peer.(Shutdowner); ok {
		sd.Shutdown(reason)
		return
	}
	s.closeGracefully()
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
