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
// One connection serves an app at a time. A second connection while the
// first is open is told why in an AppShutdown and closed. The sockets stay
// open until the daemon stops, so an app that lost its connection (a
// crash, a restart) connects again to the same path.
package appsock

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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

	// mu guards sockets, conns and closed.
	mu      sync.Mutex
	sockets map[string]*appSocket // by app id
	conns   map[*conn]bool
	closed  bool
	wg      sync.WaitGroup
}

type appSocket struct {
	appID string
	path  string
	l     *net.UnixListener
	// active is the connection serving the app, nil when none; guarded
	// by Server.mu.
	active *conn
}

// New returns a Server that opens sockets in dir, which is created 0700
// when missing.
func New(b *core.Broker, dir string, log *slog.Logger) *Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{b: b, dir: dir, log: log, sockets: map[string]*appSocket{}, conns: map[*conn]bool{}}
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
	as := &appSocket{appID: appID, path: path, l: l}
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
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			cn.serve()
			s.mu.Lock()
			delete(s.conns, cn)
			s.mu.Unlock()
		}()
	}
}

// claim makes cn the connection serving its app; it fails when another
// connection serves it. A connection that is ending no longer counts:
// claim takes over from it and returns it, and the caller waits for it to
// have ended (its session closed) before registering, so an app that
// reconnects at once is neither refused nor racing its old connection.
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
