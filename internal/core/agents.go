package core

import (
	"context"
	"sync"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// Agents. A contained agent (pcpctl agent run) reaches the daemon only
// through a socket of its own, which the user's control connection asks
// for with agents.open. The daemon opens it (AgentEndpoints) and stamps
// every session accepted there with the agent's name (SessionInfo.Agent),
// so the core knows which agent each request came from without taking the
// agent's word for it: the audit actor is "agent:<name>", and the policy's
// per-agent rules apply. The socket closes on agents.close or when the
// control connection that opened it closes, whichever comes first.

// AgentEndpoints opens and closes the agents' own sockets. The daemon
// provides it; its methods may be called concurrently.
type AgentEndpoints interface {
	// OpenAgent opens name's socket and returns its path, the
	// directories the agent's sandbox must hide and the files it must
	// keep read-only.
	OpenAgent(name string) (socket string, hide, readOnly []string, err error)
	// CloseAgent closes name's socket and the connections accepted on
	// it, and returns how many there were.
	CloseAgent(name string) int
}

// agentTable holds the agents whose sockets are open.
type agentTable struct {
	// mu guards ep and open. Lock order: never held while calling ep
	// or auditing; b.mu is never taken under it.
	mu   sync.Mutex
	ep   AgentEndpoints
	open map[string]*openAgent
}

type openAgent struct {
	socket string
	owner  *Session
	// stop ends the goroutine that closes the agent with its owner.
	stop chan struct{}
}

// SetAgentEndpoints gives the broker the daemon's agent sockets. Without
// them agents.open answers that this daemon offers none.
func (b *Broker) SetAgentEndpoints(ep AgentEndpoints) {
	b.agents.mu.Lock()
	b.agents.ep = ep
	b.agents.mu.Unlock()
}

// Agent is the name of the contained agent the session speaks for, ""
// for a connection on the shared agent socket or the control socket.
func (s *Session) Agent() string {
	if s == nil {
		return ""
	}
	return s.Info.Agent
}

// ownsAgents reports whether s opened an agent's socket that is open.
func (b *Broker) ownsAgents(s *Session) bool {
	b.agents.mu.Lock()
	defer b.agents.mu.Unlock()
	for _, a := range b.agents.open {
		if a.owner == s {
			return true
		}
	}
	return false
}

// OpenAgent answers agents.open: it opens the named agent's socket for
// the user's control connection that asks, which owns it.
func (b *Broker) OpenAgent(ctx context.Context, p *api.AgentsOpenParams) (*api.AgentsOpenResult, error) {
	if roleOf(ctx) != RoleUser {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"required_role": "user"}, "only the user opens an agent's socket; use the control socket")
	}
	if err := api.ValidateAgentName(p.Name); err != nil {
		return nil, err
	}
	if err := b.auditAvailable(); err != nil {
		return nil, err
	}
	owner := SessionFrom(ctx)
	t := &b.agents
	t.mu.Lock()
	ep := t.ep
	if ep == nil {
		t.mu.Unlock()
		return nil, api.Errorf(api.CodeActionNotSupported, nil, "this daemon offers no agent sockets")
	}
	if _, dup := t.open[p.Name]; dup {
		t.mu.Unlock()
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "name", "name": p.Name, "open": true},
			"agent %s is already running; choose another name", p.Name)
	}
	a := &openAgent{owner: owner, stop: make(chan struct{})}
	if t.open == nil {
		t.open = map[string]*openAgent{}
	}
	t.open[p.Name] = a // reserved while the daemon opens it
	t.mu.Unlock()

	socket, hide, readOnly, err := ep.OpenAgent(p.Name)
	if err != nil {
		t.mu.Lock()
		delete(t.open, p.Name)
		t.mu.Unlock()
		return nil, err
	}
	a.socket = socket
	if err := b.audit(ctx, audit.Record{Kind: api.AuditAgent, Actor: owner.Actor(), Outcome: api.AuditAgentOpened,
		Detail: detailOf(&api.AuditAgentDetail{Agent: p.Name, Socket: socket})}); err != nil {
		b.closeAgent(ctx, p.Name, a, "the audit entry of its opening failed")
		return nil, err
	}
	if owner != nil {
		go func() {
			select {
			case <-owner.done:
				b.closeAgent(context.Background(), p.Name, a, "the control connection that opened it closed")
			case <-a.stop:
			}
		}()
	}
	return &api.AgentsOpenResult{Name: p.Name, Socket: socket, Hide: hide, ReadOnly: readOnly}, nil
}

// CloseAgent answers agents.close.
func (b *Broker) CloseAgent(ctx context.Context, p *api.AgentsCloseParams) (*api.AgentsCloseResult, error) {
	if roleOf(ctx) != RoleUser {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"required_role": "user"}, "only the user closes an agent's socket; use the control socket")
	}
	if err := api.ValidateAgentName(p.Name); err != nil {
		return nil, err
	}
	b.agents.mu.Lock()
	a := b.agents.open[p.Name]
	b.agents.mu.Unlock()
	if a == nil || a.socket == "" {
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "name", "name": p.Name}, "no agent %s is running", p.Name)
	}
	n, err := b.closeAgent(ctx, p.Name, a, "agents.close")
	if err != nil {
		return nil, err
	}
	return &api.AgentsCloseResult{Name: p.Name, Connections: n}, nil
}

// closeAgent closes agent name's socket, if a is still the one open
// under that name, and audits it.
func (b *Broker) closeAgent(ctx context.Context, name string, a *openAgent, reason string) (int, error) {
	t := &b.agents
	t.mu.Lock()
	if t.open[name] != a {
		t.mu.Unlock()
		return 0, nil
	}
	delete(t.open, name)
	ep := t.ep
	t.mu.Unlock()
	close(a.stop)
	n := ep.CloseAgent(name)
	actor := "inproc"
	if s := SessionFrom(ctx); s != nil {
		actor = s.Actor()
	} else if a.owner != nil {
		actor = a.owner.Actor()
	}
	err := b.audit(ctx, audit.Record{Kind: api.AuditAgent, Actor: actor, Outcome: api.AuditAgentClosed,
		Detail: detailOf(&api.AuditAgentDetail{Agent: name, Socket: a.socket, Connections: n, Reason: reason})})
	return n, err
}
