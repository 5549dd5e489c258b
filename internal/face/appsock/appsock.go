// Package appsock is the daemon's side of the Tier 1 per-app sockets of
// spec 001: one Unix socket per app, on which the app serves the
// PcpServer contract and the daemon sends GetManifest, InvokeCapability,
// ValidateParamsMsg, QueryState, Ping and AppShutdown, CBOR-encoded
// (internal/tier1) in frames (internal/frame).
//
// An app gets its socket at registration: it calls apps.socket on the
// agent socket with its signed manifest, the broker checks the manifest
// and asks this package to open the socket (Server.OpenAppSocket), and the
// app connects to the path it is given. The daemon speaks first: it asks
// for the manifest, registers the app with the broker as served by the
// connection, and from then on the connection is a core.Session whose
// Endpoint (conn) turns the broker's calls into Tier 1 requests.
//
// One connection serves an app at a time, and the handshake decides
// which: not the first to connect but the first to answer GetManifest
// with a manifest that registers. Until then up to MaxHandshakes
// connections per socket may be in the handshake at once, each with its
// own HandshakeTimeout, so a peer that connects and says nothing holds
// nothing but its own slot; a connection arriving when every slot is
// taken displaces the one that has waited longest without answering. Once
// an app registers, the other connections in the handshake, and any new
// connection while it is served, are told why in an AppShutdown and
// closed. The sockets stay open until the daemon stops, so an app that
// lost its connection (a crash, a restart) connects again to the same
// path.
package appsock

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// MaxSockets bounds the per-app sockets one daemon opens.
const MaxSockets = 256

// HandshakeTimeout bounds the wait for the app's ManifestResponse.
const HandshakeTimeout = 10 * time.Second

// MaxHandshakes bounds the connections of one per-app socket that are in
// the handshake (accepted, not yet registered or refused) at once.
const MaxHandshakes = 8

// WriteTimeout bounds one frame write: an app that stops reading for this
// long is treated as gone and its connection closed.
const WriteTimeout = 10 * time.Second

// maxSunPath is the longest Unix socket path Linux accepts (sun_path is
// 108 bytes with its terminating NUL).
const maxSunPath = 107

// Server holds the per-app sockets of one daemon.
type Server struct {
	b   *core.Broker
	dir string
	log *slog.Logger

	// mu guards sockets, conns, closed, handshakeTimeout and the
	// appSockets' active and handshaking. Lock order: mu before a conn's
	// mu.
	mu sync.Mutex
	// handshakeTimeout is HandshakeTimeout; tests shorten it.
	handshakeTimeout time.Duration
	sockets          map[string]*appSocket // by app id
	conns            map[*conn]bool
	closed           bool
	wg               sync.WaitGroup
}

type appSocket struct {
	appID string
	path  string
	l     *net.UnixListener
	// active is the connection serving the app, nil when none; guarded
	// by Server.mu.
	active *conn
	// handshaking are the connections accepted and neither registered
	// nor refused yet, oldest first; guarded by Server.mu. At most
	// MaxHandshakes.
	handshaking []*conn
	// register holds a token while one connection claims the app and
	// registers it: of two connections that answer at once, the second
	// waits for the first's outcome instead of being refused while the
	// first may still fail.
	register chan struct{}
}

// New returns a Server that opens sockets in dir, which is created 0700
// when missing.
func New(b *core.Broker, dir string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{b: b, dir: dir, log: log, handshakeTimeout: HandshakeTimeout, sockets: map[string]*appSocket{}, conns: map[*conn]bool{}}
}

// Dir is the directory of the sockets.
func (s *Server) Dir() string { return s.dir }

// SocketPath is where appID's socket lives: <dir>/<app id>.sock, or, when
// that is too long for a Unix socket, <dir>/<first 32 hex digits of the
// SHA-256 of the app id>.sock.
func (s *Server) SocketPath(appID string) string {
	p := filepath.Join(s.dir, appID+".sock")
	if len(p) <= maxSunPath {
		return p
	}
	sum := sha256.Sum256([]byte(appID))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16])+".sock")
}

// OpenAppSocket implements core.AppSocketOpener: it returns the path of
// appID's socket, opening it first if needed.
func (s *Server) OpenAppSocket(appID string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return "", api.Errorf(api.CodeInternalError, nil, "the daemon is shutting down")
	}
	if as := s.sockets[appID]; as != nil {
		return as.path, nil
	}
	if len(s.sockets) >= MaxSockets {
		return "", api.Errorf(api.CodeRateLimited, map[string]any{"scope": "app_sockets", "limit": MaxSockets},
			"the daemon serves at most %d per-app sockets", MaxSockets)
	}
	path := s.SocketPath(appID)
	l, err := unixsock.Listen(path)
	if err != nil {
		return "", api.Errorf(api.CodeInternalError, map[string]any{"app_id": appID}, "opening the socket of %s: %v", appID, err)
	}
	as := &appSocket{appID: appID, path: path, l: l, register: make(chan struct{}, 1)}
	s.sockets[appID] = as
	s.wg.Add(1)
	go s.acceptLoop(as)
	s.log.Info("per-app socket open", "app_id", appID, "socket", path)
	return path, nil
}

func (s *Server) acceptLoop(as *appSocket) {
	defer s.wg.Done()
	self := os.Getuid()
	backoff := 5 * time.Millisecond
	for {
		c, err := as.l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and the like: wait rather than spin.
			s.log.Warn("accepting on per-app socket", "app_id", as.appID, "err", err)
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		uid, pid, err := unixsock.PeerCred(c)
		if err != nil || !unixsock.AllowPeer(uid, self) {
			s.log.Warn("refused per-app connection", "app_id", as.appID, "uid", uid, "pid", pid, "err", err)
			c.Close()
			continue
		}
		cn := newConn(s, as, c, uid, pid)
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[cn] = true
		refusal, displaced := s.admitLocked(cn)
		s.mu.Unlock()
		if displaced != nil {
			s.log.Warn("per-app handshake slots full; closing the connection silent longest", "app_id", as.appID, "pid", displaced.pid)
			displaced.refuse(fmt.Sprintf("no ManifestResponse before %d newer connections to this socket", MaxHandshakes))
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			cn.serve(refusal)
			s.mu.Lock()
			delete(s.conns, cn)
			s.mu.Unlock()
		}()
	}
}

// admitLocked decides what becomes of a new connection cn: it is refused
// (refusal set) when a live connection serves the app (one still
// registering does not count: its registration may fail); otherwise it joins
// the handshake, displacing, when MaxHandshakes are there already, the
// oldest one that has not answered GetManifest (returned, to be told
// why). When all of them have answered and wait for their registration,
// which ends soon, cn is refused instead.
func (s *Server) admitLocked(cn *conn) (refusal string, displaced *conn) {
	as := cn.as
	if old := as.active; old != nil && old.serving && !old.isClosed() {
		return alreadyServed(as.appID), nil
	}
	if len(as.handshaking) >= MaxHandshakes {
		i := slices.IndexFunc(as.handshaking, func(c *conn) bool { return !c.answered })
		if i < 0 {
			return fmt.Sprintf("%d connections to this socket are registering app %s", MaxHandshakes, as.appID), nil
		}
		displaced = as.handshaking[i]
		as.handshaking = slices.Delete(as.handshaking, i, i+1)
	}
	as.handshaking = append(as.handshaking, cn)
	cn.handshakeTimeout = s.handshakeTimeout
	return "", displaced
}

func alreadyServed(appID string) string {
	return fmt.Sprintf("app %s is already served by another connection on this socket", appID)
}

// answered records that cn answered GetManifest, so that a newer
// connection no longer displaces it.
func (s *Server) answered(cn *conn) {
	s.mu.Lock()
	cn.answered = true
	s.mu.Unlock()
}

// leaveHandshake takes cn out of its socket's handshake, if it is there.
func (s *Server) leaveHandshake(cn *conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cn.as.handshaking = slices.DeleteFunc(cn.as.handshaking, func(c *conn) bool { return c == cn })
}

// claim makes cn the connection serving its app; it fails when another
// connection serves it. A connection that is ending no longer counts:
// claim takes over from it and returns it, and the caller waits for it to
// have ended (its session closed) before registering, so an app that
// reconnects at once is neither refused nor racing its old connection.
// The caller holds cn.as.register.
func (s *Server) claim(cn *conn) (prev *conn, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := cn.as.active; old != nil && old != cn {
		if !old.isClosed() {
			return nil, false
		}
		prev = old
	}
	cn.as.active = cn
	return prev, true
}

// registered ends the handshake of cn, now the app's server, and refuses
// the other connections still in it: the app is served. If cn has ended
// meanwhile, the connections that came since are left to their own
// handshakes.
func (s *Server) registered(cn *conn) {
	s.mu.Lock()
	if cn.isClosed() {
		s.mu.Unlock()
		return
	}
	cn.serving = true
	others := slices.DeleteFunc(cn.as.handshaking, func(c *conn) bool { return c == cn })
	cn.as.handshaking = nil
	s.mu.Unlock()
	for _, c := range others {
		c.refuse(alreadyServed(cn.as.appID))
	}
}

// release frees the app's socket for a new connection, if cn holds it.
func (s *Server) release(cn *conn) {
	s.mu.Lock()
	if cn.as.active == cn {
		cn.as.active = nil
	}
	s.mu.Unlock()
}

// Close closes every socket and connection and waits for their
// goroutines. Apps see their connection drop, not AppShutdown: a daemon
// that stops is expected back, and apps reconnect.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	for _, as := range s.sockets {
		as.l.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	s.wg.Wait()
	return nil
}

// Sockets lists the open sockets by app id.
func (s *Server) Sockets() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.sockets))
	for id, as := range s.sockets {
		out[id] = as.path
	}
	return out
}

var _ core.AppSocketOpener = (*Server)(nil)
