package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// Accept back-off: after a failed Accept the loop waits, from
// acceptBackoffMin doubling to acceptBackoffMax, each wait jittered, so a
// daemon out of file descriptors neither spins nor wakes in lockstep.
const (
	acceptBackoffMin = 5 * time.Millisecond
	acceptBackoffMax = time.Second
)

// acceptLoop accepts on one listener until it is closed.
func (s *Server) acceptLoop(ln listener) {
	defer s.accepting.Done()
	var backoff time.Duration
	for {
		c, err := ln.l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if fdExhausted(err) {
				// Shed the oldest waiting connection with a coded
				// refusal rather than leave every client hanging.
				s.shed.shedOne(ln.l)
			}
			s.shed.logAcceptError(err)
			backoff = min(max(2*backoff, acceptBackoffMin), acceptBackoffMax)
			wait := backoff/2 + rand.N(backoff/2+1)
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-s.quit:
				timer.Stop()
				return
			}
			continue
		}
		backoff = 0
		s.admit(c, ln, "")
	}
}

// fdExhausted reports an Accept that failed for want of file descriptors.
func fdExhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}

// admit checks an accepted connection's peer and the connection limits,
// then serves it on its own goroutine, or refuses it. agent names the
// contained agent whose own socket accepted it, "" for the shared ones.
func (s *Server) admit(c net.Conn, ln listener, agent string) {
	info := core.SessionInfo{Role: ln.role, UID: -1, PID: -1, Agent: agent}
	uc, isUnix := c.(*net.UnixConn)
	if isUnix {
		info.Transport = "unix"
		uid, pid, err := unixsock.PeerCred(uc)
		if err != nil || !unixsock.AllowPeer(uid, s.self) {
			s.log.Warn("refused connection from another user", "uid", uid, "pid", pid, "err", err)
			refuse(c, api.Errorf(api.CodePermissionDenied, map[string]any{"uid": uid},
				"connection refused: uid %d is not the daemon's user", uid))
			return
		}
		info.UID, info.PID = uid, pid
	} else {
		info.Transport = "tcp"
		info.Remote = c.RemoteAddr().String()
		info.NeedsAuth = true
	}
	t := &tracked{c: c, uid: info.UID, agent: agent, mcp: ln.mcp, kind: kindTCP}
	if isUnix {
		t.kind = kindAgent
		if ln.role == core.RoleUser {
			t.kind = kindControl
		}
	}
	if refusal := s.track(t); refusal != nil {
		refuse(c, refusal)
		return
	}
	go s.serveConn(t, info)
}

// track counts t against the limits and registers it; it returns the
// refusal when a limit is reached (or the server is stopping).
func (s *Server) track(t *tracked) *api.Error {
	lim := s.cfg.Limits
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return api.Errorf(api.CodeInternalError, nil, "the daemon is shutting down")
	}
	if len(s.conns) >= lim.Connections {
		s.shed.logRefusal("connections", lim.Connections)
		return api.Errorf(api.CodeRateLimited, map[string]any{"scope": "connections", "limit": lim.Connections},
			"connection refused: the daemon serves at most %d connections at once", lim.Connections)
	}
	if shared := lim.Connections - lim.ControlReserve; t.kind != kindControl && len(s.conns)-s.control >= shared {
		s.shed.logRefusal("connections", shared)
		return api.Errorf(api.CodeRateLimited, map[string]any{"scope": "connections", "limit": shared, "control_reserve": lim.ControlReserve},
			"connection refused: the daemon serves at most %d connections at once besides the %d kept for the control socket", shared, lim.ControlReserve)
	}
	switch t.kind {
	case kindAgent:
		if s.perUID[t.uid] >= lim.ConnectionsPerUID {
			s.shed.logRefusal("connections_per_uid", lim.ConnectionsPerUID)
			return api.Errorf(api.CodeRateLimited, map[string]any{"scope": "connections_per_uid", "limit": lim.ConnectionsPerUID, "uid": t.uid},
				"connection refused: uid %d already has %d connections open", t.uid, lim.ConnectionsPerUID)
		}
		s.perUID[t.uid]++
	case kindTCP:
		if len(s.unauth) >= lim.UnauthenticatedTCP {
			s.shed.logRefusal("tcp_unauthenticated", lim.UnauthenticatedTCP)
			return api.Errorf(api.CodeRateLimited, map[string]any{"scope": "tcp_unauthenticated", "limit": lim.UnauthenticatedTCP},
				"connection refused: %d TCP connections are waiting to authenticate already", lim.UnauthenticatedTCP)
		}
		s.unauth[t.c] = struct{}{}
	case kindControl:
		s.control++
	}
	s.conns[t] = struct{}{}
	s.connWG.Add(1)
	s.connsChangedLocked()
	return nil
}

// connsChangedLocked wakes those waiting on the connection counts. s.mu
// must be held.
func (s *Server) connsChangedLocked() {
	close(s.connsChanged)
	s.connsChanged = make(chan struct{})
}

// notifyConns wakes those waiting on the connection counts after a change
// that is not a connection's tracking (a scomp session's end).
func (s *Server) notifyConns() {
	s.mu.Lock()
	s.connsChangedLocked()
	s.mu.Unlock()
}

// watchConns calls f with s.mu held, now and after each change of the
// tracked connections, until f returns true or ctx ends; it reports
// whether f did.
func (s *Server) watchConns(ctx context.Context, f func() bool) bool {
	for {
		s.mu.Lock()
		done, changed := f(), s.connsChanged
		s.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// authenticated takes a TCP connection that presented the token out of
// the unauthenticated ones (rpc.Options.OnAuthenticated).
func (s *Server) authenticated(rwc io.ReadWriteCloser) {
	s.mu.Lock()
	delete(s.unauth, rwc)
	s.mu.Unlock()
}

func (s *Server) untrack(t *tracked) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.conns, t)
	switch t.kind {
	case kindAgent:
		if s.perUID[t.uid]--; s.perUID[t.uid] <= 0 {
			delete(s.perUID, t.uid)
		}
	case kindTCP:
		delete(s.unauth, t.c)
	case kindControl:
		s.control--
	}
	s.connsChangedLocked()
}

// refuse tells a peer why it is turned away, as a JSON-RPC error line
// (the peer has not said which face it speaks, and JSON-RPC is the one a
// person reading the socket can read), then hangs up. A fresh socket's
// send buffer is empty, so the write does not block the accept loop.
func refuse(c net.Conn, e *api.Error) {
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	c.Write(append(jsonrpc.AppendError(nil, nil, e), '\n'))
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	c.Close()
}

// shedder keeps the daemon able to shed load when it runs out of file
// descriptors, and keeps the log small meanwhile.
//
// Concurrency: mu guards every field; the accept loops share it.
type shedder struct {
	log *slog.Logger

	mu sync.Mutex
	// reserve is a descriptor held back for accepting one connection
	// (to refuse it) when none is left.
	reserve *os.File
	// lastLog and suppressed rate-limit the accept-error and refusal
	// lines to one a second each, counting those left out.
	lastLog    map[string]time.Time
	suppressed map[string]int
}

// logEvery is the least time between two log lines of one kind.
const logEvery = time.Second

func newShedder(log *slog.Logger) (*shedder, error) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	return &shedder{log: log, reserve: f, lastLog: map[string]time.Time{}, suppressed: map[string]int{}}, nil
}

// shedOne frees the reserve descriptor, accepts one waiting connection
// with it, refuses it with RATE_LIMITED and takes the reserve back.
func (sh *shedder) shedOne(l net.Listener) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.reserve == nil {
		return
	}
	sh.reserve.Close()
	sh.reserve = nil
	// The listener is blocking; only try when a connection is waiting,
	// which an EMFILE from Accept implies. Bound the wait regardless.
	if dl, ok := l.(interface{ SetDeadline(time.Time) error }); ok {
		dl.SetDeadline(time.Now().Add(10 * time.Millisecond))
		defer dl.SetDeadline(time.Time{})
	}
	if c, err := l.Accept(); err == nil {
		refuse(c, api.Errorf(api.CodeRateLimited, map[string]any{"scope": "file_descriptors"},
			"connection refused: the daemon is out of file descriptors; retry later"))
	}
	sh.reserve, _ = os.Open(os.DevNull)
}

func (sh *shedder) close() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.reserve != nil {
		sh.reserve.Close()
		sh.reserve = nil
	}
}

// allowLogLocked reports whether a line of kind may be logged now, and
// how many were suppressed since the last one.
func (sh *shedder) allowLogLocked(kind string) (bool, int) {
	now := time.Now()
	if now.Sub(sh.lastLog[kind]) < logEvery {
		sh.suppressed[kind]++
		return false, 0
	}
	n := sh.suppressed[kind]
	sh.lastLog[kind], sh.suppressed[kind] = now, 0
	return true, n
}

func (sh *shedder) logAcceptError(err error) {
	sh.mu.Lock()
	ok, n := sh.allowLogLocked("accept")
	sh.mu.Unlock()
	if ok {
		sh.log.Warn("accept failed; backing off", "err", err, "suppressed_since_last", n)
	}
}

func (sh *shedder) logRefusal(scope string, limit int) {
	sh.mu.Lock()
	ok, n := sh.allowLogLocked("refuse " + scope)
	sh.mu.Unlock()
	if ok {
		sh.log.Warn("connection refused: limit reached", "scope", scope, "limit", limit, "suppressed_since_last", n)
	}
}
