package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// maxAgents bounds the agent sockets open at once.
const maxAgents = 64

// maxSocketPath is the longest path a Unix socket address holds.
const maxSocketPath = 107

// agentSockets are the contained agents' own sockets,
// <agent socket dir>/agents/<name>/pcp.sock (JSON-RPC and the framed
// stream), mcp.sock beside it (the MCP face, which `pcpctl mcp` inside
// the sandbox finds beside $PCP_SOCKET) and scomp.sock (the scomp face,
// found the same way), in a 0700 directory of the agent's own. A
// connection accepted on any of them is a session of role agent
// whose SessionInfo.Agent is the name: the daemon, not the agent, says who
// it is. The broker opens and closes them (core.AgentEndpoints).
//
// Goroutines: one accept loop per open socket (scomp.sock's is its HTTP
// server's), counted in wg; closing the socket's listener ends it. Server.release waits for wg.
type agentSockets struct {
	s   *Server
	dir string

	// mu guards open and closed.
	mu     sync.Mutex
	open   map[string]*agentSocket
	closed bool
	wg     sync.WaitGroup
}

type agentSocket struct {
	path string
	l    *net.UnixListener
	mcp  *net.UnixListener // mcp.sock beside path
	// scomp serves scomp.sock beside path on scompLn.
	scomp   *http.Server
	scompLn *scompListener
	// done is closed when the accept loops have ended.
	done chan struct{}
}

func newAgentSockets(s *Server) *agentSockets {
	return &agentSockets{s: s, dir: filepath.Join(filepath.Dir(s.cfg.Socket), "agents"), open: map[string]*agentSocket{}}
}

// OpenAgent opens name's socket and starts accepting on it.
func (a *agentSockets) OpenAgent(name string) (string, []string, []string, error) {
	path := filepath.Join(a.dir, name, "pcp.sock")
	if longest := filepath.Join(a.dir, name, "scomp.sock"); len(longest) > maxSocketPath {
		return "", nil, nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "name", "socket": longest},
			"the agent's socket path %s is longer than the %d bytes a Unix socket address holds; choose a shorter name", longest, maxSocketPath)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return "", nil, nil, api.Errorf(api.CodeInternalError, nil, "the daemon is shutting down")
	}
	if _, ok := a.open[name]; ok {
		return "", nil, nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "name", "name": name, "open": true}, "agent %s is already running", name)
	}
	if len(a.open) >= maxAgents {
		return "", nil, nil, api.Errorf(api.CodeRateLimited, map[string]any{"scope": "agents", "limit": maxAgents}, "at most %d agents may run at once", maxAgents)
	}
	if err := unixsock.SecureDir(a.dir); err != nil {
		return "", nil, nil, err
	}
	l, err := unixsock.Listen(path)
	if err != nil {
		return "", nil, nil, fmt.Errorf("opening agent %s's socket: %w", name, err)
	}
	ml, err := unixsock.Listen(filepath.Join(filepath.Dir(path), "mcp.sock"))
	if err != nil {
		l.Close()
		return "", nil, nil, fmt.Errorf("opening agent %s's MCP socket: %w", name, err)
	}
	sl, err := unixsock.Listen(filepath.Join(filepath.Dir(path), "scomp.sock"))
	if err != nil {
		l.Close()
		ml.Close()
		return "", nil, nil, fmt.Errorf("opening agent %s's scomp socket: %w", name, err)
	}
	as := &agentSocket{path: path, l: l, mcp: ml, scomp: a.s.newScompHTTP(name), scompLn: &scompListener{UnixListener: sl, s: a.s, agent: name}, done: make(chan struct{})}
	a.open[name] = as
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		defer close(as.done)
		var both sync.WaitGroup
		both.Go(func() { a.accept(name, as.l, listener{role: core.RoleAgent}) })
		both.Go(func() { a.accept(name, as.mcp, listener{role: core.RoleAgent, mcp: true}) })
		both.Go(func() {
			if err := as.scomp.Serve(as.scompLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.s.log.Error("agent scomp socket stopped", "agent", name, "err", err)
			}
		})
		both.Wait()
	}()
	a.s.log.Info("agent socket opened", "agent", name, "socket", path)
	return path, a.hide(), a.readOnly(), nil
}

// accept admits the connections of one of name's sockets until it is
// closed.
func (a *agentSockets) accept(name string, l *net.UnixListener, ln listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or the like: the shared listeners shed
			// load; an agent's own socket only waits and tries again.
			a.s.shed.logAcceptError(err)
			t := time.NewTimer(acceptBackoffMax / 10)
			select {
			case <-a.s.quit:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		a.s.admit(c, ln, name)
	}
}

// CloseAgent closes name's socket and the connections accepted on it.
func (a *agentSockets) CloseAgent(name string) int {
	a.mu.Lock()
	as := a.open[name]
	delete(a.open, name)
	a.mu.Unlock()
	if as == nil {
		return 0
	}
	as.close()
	n := a.s.closeAgentConns(name)
	a.s.log.Info("agent socket closed", "agent", name, "connections", n)
	return n
}

// closeAll closes every agent socket (not their connections, which the
// server closes with the rest) and refuses new ones.
func (a *agentSockets) closeAll() {
	a.mu.Lock()
	a.closed = true
	open := a.open
	a.open = map[string]*agentSocket{}
	a.mu.Unlock()
	for _, as := range open {
		as.close()
	}
}

// close closes the listeners, waits for their accept loops and removes
// the agent's directory. The scomp sessions upgraded on scomp.sock
// outlive its HTTP server: closeAgentConns closes them.
func (as *agentSocket) close() {
	as.l.Close()
	as.mcp.Close()
	as.scomp.Close()
	as.scompLn.Close() // in case Serve had not begun
	<-as.done
	os.Remove(filepath.Dir(as.path)) // the listeners unlinked their sockets
}

// hide lists the directories that hold the daemon's own files, which an
// agent's sandbox must hide: the socket directories (the control socket,
// the per-app sockets, the token), the state, the trust directory and the
// policy file's directory.
func (a *agentSockets) hide() []string {
	c := a.s.cfg
	dirs := []string{filepath.Dir(c.Socket), filepath.Dir(c.ControlSocket), c.AppSocketDir, c.StateDir, c.TrustDir, filepath.Dir(c.PolicyFile)}
	if c.TCPAddr != "" {
		dirs = append(dirs, filepath.Dir(c.TokenFile))
	}
	dirs = append(dirs, filepath.Dir(c.MCP.Socket), filepath.Dir(c.Scomp.Socket))
	if c.MCP.HTTPAddr != "" {
		dirs = append(dirs, filepath.Dir(c.MCP.TokenFile))
	}
	if c.Scomp.TokenFile != "" {
		dirs = append(dirs, filepath.Dir(c.Scomp.TokenFile))
	}
	slices.Sort(dirs)
	return slices.Compact(dirs)
}

// readOnly lists the files an agent may run but must not replace:
// pcpd's executable (the user starts it again later).
func (a *agentSockets) readOnly() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return nil
	}
	return []string{exe}
}

// closeAgentConns closes the connections accepted on agent name's socket
// and returns how many there were.
func (s *Server) closeAgentConns(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for t := range s.conns {
		if t.agent == name {
			t.c.Close()
			n++
		}
	}
	return n
}
