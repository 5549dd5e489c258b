// Package daemon wires pcpd together: the store, the broker, the in-process
// services, the listeners and the faces. cmd/pcpd parses flags into a
// Config and runs a Server: New, Serve, and Shutdown on a signal.
//
// Goroutines and their owners (all owned by Server, all ended by Shutdown
// or Close before they return):
//   - one accept loop per listener (Serve starts them; closing the
//     listener ends them);
//   - one goroutine per accepted connection (serveConn; closing the
//     connection ends it, and Close waits for it);
//   - the policy-reload loop (Serve; ends on quit);
//   - the MCP HTTP server, with --mcp-http (Serve; stopAccepting closes
//     it, and the MCP face's HTTP sessions with it: mcp.go);
//   - the scomp HTTP servers, on scomp.sock and with --scomp (Serve;
//     stopAccepting closes them and the scomp sessions: scomp.go);
//   - the dashboard's HTTP server, with --dashboard (Serve; stopAccepting
//     closes it and ends its event streams: dashboard.go);
//   - the accessibility connect attempt (Serve; its context is the
//     server's, cancelled at Shutdown or Close);
//   - the desktop notifier's connect attempt, worker and signal reader
//     (notify.go; Close ends them, in release).
package daemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/adapter/atspi"
	"github.com/pcp-dev/pcp/internal/adapter/notify"
	"github.com/pcp-dev/pcp/internal/adapter/x11"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/deadline"
	"github.com/pcp-dev/pcp/internal/face/appsock"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/face/stream"
	"github.com/pcp-dev/pcp/internal/policy"
	"github.com/pcp-dev/pcp/internal/services/inspection"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// Server is a running pcpd: New opens the state and binds the listeners,
// Serve accepts, Shutdown drains and Close stops at once. Its methods
// may be called from any goroutine.
type Server struct {
	cfg  Config
	log  *slog.Logger
	self int

	lock *os.File
	st   *store.Store
	b    *core.Broker
	ax   *atspi.Adapter // nil without Accessibility
	x11  *x11.Platform  // nil without an X11 display (platform.go)
	// origins gives the AT-SPI2 adapter windows' origins from X11
	// (platform.go).
	origins windowOrigins
	apps    *appsock.Server
	agents  *agentSockets
	face    *rpc.Server
	stream  *stream.Server
	mcp     *mcpServer
	scomp   *scompServer
	dash    *dashServer // with Config.Dashboard (dashboard.go)
	lns     []listener
	shed    *shedder
	// lineBudget bounds the long JSON-RPC lines of every connection.
	lineBudget *deadline.Budget
	// notifier shows confirmations as desktop notifications; nil
	// without Notifications (notify.go).
	notifier *notify.Notifier

	// ctx scopes the server's own background work; cancel ends it.
	ctx    context.Context
	cancel context.CancelFunc
	// quit is closed when Shutdown or Close begins.
	quit     chan struct{}
	quitOnce sync.Once
	// accepting counts the accept loops; bg the other background
	// goroutines; conns the connection goroutines.
	accepting, bg, connWG sync.WaitGroup
	// finished is closed once the server's resources are released.
	finished   chan struct{}
	finishOnce sync.Once

	// mu guards serving, conns, control, perUID, unauth, connsChanged,
	// draining and each tracked.face. Lock order: mu before shedder.mu;
	// no I/O is done under mu except closing connections.
	mu       sync.Mutex
	serving  bool
	draining bool // set by Shutdown and Close: no connection enters a face
	conns    map[*tracked]struct{}
	// control counts the control socket's connections in conns.
	control int
	// perUID counts the agent sockets' connections of each uid.
	perUID map[int]int
	// unauth holds the TCP connections that have not authenticated.
	unauth map[io.ReadWriteCloser]struct{}
	// connsChanged is closed, and replaced, each time a connection is
	// tracked or untracked or a scomp session ends: whoever must see the
	// counts change (a test, a child process reporting them) waits on it
	// instead of polling (watchConns).
	connsChanged chan struct{}
}

type listener struct {
	l    net.Listener
	role core.Role
	mcp  bool // mcp.sock: served by the MCP face
}

// tracked is one accepted connection.
type tracked struct {
	c     net.Conn
	uid   int    // -1 for TCP
	agent string // the agent socket's name, "" for the shared sockets
	mcp   bool   // accepted on an mcp.sock
	kind  connKind
	face  bool // handed to a face (guarded by Server.mu)
}

// connKind says which connection caps count a connection, besides the
// total.
type connKind uint8

const (
	// kindAgent: the shared agent socket or a contained agent's; counted
	// per uid, kept out of the control reserve.
	kindAgent connKind = iota
	// kindControl: the control socket; may use the control reserve.
	kindControl
	// kindTCP: loopback TCP; kept out of the control reserve, and
	// counted as unauthenticated until it presents the token.
	kindTCP
)

// New opens everything pcpd needs and binds its listeners; nothing is
// accepted until Serve. On error, whatever was opened is closed again.
func New(cfg Config) (_ *Server, err error) {
	if err := cfg.Defaults(); err != nil {
		return nil, err
	}
	configured := cfg.Limits.Connections
	nofile := cfg.Limits.fitDescriptors()
	cfg.Limits.clampCaps()
	s := &Server{cfg: cfg, log: cfg.Logger, self: os.Getuid(), quit: make(chan struct{}), finished: make(chan struct{}),
		conns: map[*tracked]struct{}{}, perUID: map[int]int{}, unauth: map[io.ReadWriteCloser]struct{}{}, connsChanged: make(chan struct{})}
	lim := cfg.Limits
	if lim.Connections < configured {
		s.log.Warn("connection cap lowered to fit the file descriptor limit", "nofile", nofile, "configured", configured, "connections", lim.Connections)
	}
	s.log.Info("connection caps", "connections", lim.Connections, "control_reserve", lim.ControlReserve,
		"per_uid", lim.ConnectionsPerUID, "unauthenticated_tcp", lim.UnauthenticatedTCP, "nofile", nofile)
	s.ctx, s.cancel = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			s.release()
		}
	}()
	if cfg.TCPAddr != "" {
		if err := loopbackOnly(cfg.TCPAddr); err != nil {
			return nil, err
		}
	}
	if err := cfg.MCP.check(); err != nil {
		return nil, err
	}
	if cfg.runtimeFallback != "" {
		if err := unixsock.SecureDir(cfg.runtimeFallback); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating state dir: %w", err)
	}
	if s.lock, err = lockStateDir(cfg.StateDir); err != nil {
		return nil, err
	}
	if s.st, err = store.Open(s.ctx, filepath.Join(cfg.StateDir, "pcp.db"), store.WithAuditSync(cfg.AuditFsync)); err != nil {
		return nil, fmt.Errorf("opening store: %w", err)
	}
	s.logRecovery(s.st.AuditRecovery())
	pol, err := policy.Load(cfg.PolicyFile)
	if err != nil {
		return nil, err
	}
	if pol.Loaded() {
		s.log.Info("policy loaded", "path", cfg.PolicyFile)
	}
	s.b, err = core.New(s.ctx, core.Config{Apps: s.st, Audit: s.st, Journal: s.st, Jobs: s.st, Policy: pol, TrustDir: cfg.TrustDir, AllowUnsigned: cfg.AllowUnsigned, RateLimits: cfg.RateLimits, LivenessInterval: cfg.LivenessInterval, LivenessTimeout: cfg.LivenessTimeout, Logger: s.log})
	if err != nil {
		return nil, err
	}
	if err := s.b.AddService(inspection.New(s.b)); err != nil {
		return nil, err
	}
	for _, svc := range cfg.Services {
		if err := s.b.AddService(svc); err != nil {
			return nil, err
		}
	}
	if cfg.AllowUnsigned {
		s.log.Warn("unsigned manifests are accepted (--allow-unsigned); do not run like this outside development")
	}
	token, err := s.writeToken()
	if err != nil {
		return nil, err
	}
	s.lineBudget = deadline.NewBudget(lim.LineMemory)
	s.face = rpc.NewServer(s.b, rpc.Options{MaxLine: cfg.MaxLine, Token: token, Logger: s.log,
		AuthTimeout: lim.Auth, AuthMaxLine: lim.AuthMaxLine,
		AuthFailuresPerSecond: lim.AuthFailuresPerSecond, AuthFailureBurst: lim.AuthFailureBurst,
		IdleTimeout: off(lim.Idle), MessageTimeout: off(lim.Message), LineBudget: s.lineBudget,
		OnAuthenticated: s.authenticated})
	s.stream = stream.NewServer(s.b, stream.Options{Logger: s.log, IdleTimeout: off(lim.Idle), MessageTimeout: off(lim.Message)})
	if err := s.listen(); err != nil {
		return nil, err
	}
	if err := s.newMCP(); err != nil {
		return nil, err
	}
	if err := s.newScomp(); err != nil {
		return nil, err
	}
	if err := s.newDashboard(); err != nil {
		return nil, err
	}
	if err := s.checkActivatedTaken(); err != nil {
		return nil, err
	}
	if s.shed, err = newShedder(s.log); err != nil {
		return nil, err
	}
	if cfg.Accessibility {
		s.ax = atspi.New(atspi.Config{
			BusAddress:    cfg.AccessibilityBus,
			Log:           s.log,
			WindowOrigins: &s.origins,
			OnEvent: func(eventType, appID, surfaceID string, data map[string]any) {
				s.b.Publish(eventType, appID, surfaceID, data)
			},
		})
		if err := s.b.AddAdapter(api.RegisterAdapterParams{AdapterID: atspi.ID, SurfaceType: "atspi", SupportedTiers: []int{2}}, s.ax); err != nil {
			return nil, err
		}
		if err := s.b.AddAccessibilityAdapter(s.ax, 100); err != nil {
			return nil, err
		}
	}
	if err := s.newPlatform(); err != nil {
		return nil, err
	}
	s.apps = appsock.New(s.b, cfg.AppSocketDir, s.log)
	s.b.SetAppSockets(s.apps)
	s.agents = newAgentSockets(s)
	s.b.SetAgentEndpoints(s.agents)
	s.newNotifier()
	return s, nil
}

// writeToken makes the TCP bearer token and writes it 0600, when TCP is
// enabled.
func (s *Server) writeToken() (string, error) {
	if s.cfg.TCPAddr == "" {
		return "", nil
	}
	return writeTokenFile(s.cfg.TokenFile)
}

// writeTokenFile makes a bearer token and writes it at path, a new file
// of mode 0600 (the TCP, MCP HTTP and scomp TCP endpoints each have one).
func writeTokenFile(path string) (string, error) {
	buf := make([]byte, 32)
	rand.Read(buf)
	token := hex.EncodeToString(buf)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	os.Remove(path) // a file of another mode, or a link, is replaced
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("writing token file: %w", err)
	}
	_, err = f.WriteString(token + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("writing token file: %w", err)
	}
	return token, nil
}

func (s *Server) listen() error {
	agentL, err := s.listenUnix(FDNameAgent, s.cfg.Socket)
	if err != nil {
		return err
	}
	s.lns = append(s.lns, listener{l: agentL, role: core.RoleAgent})
	controlL, err := s.listenUnix(FDNameControl, s.cfg.ControlSocket)
	if err != nil {
		return err
	}
	s.lns = append(s.lns, listener{l: controlL, role: core.RoleUser})
	if s.cfg.TCPAddr != "" {
		tcpL, err := net.Listen("tcp", s.cfg.TCPAddr)
		if err != nil {
			return err
		}
		s.lns = append(s.lns, listener{l: tcpL, role: core.RoleAgent})
	}
	return nil
}

// ErrServerClosed is returned by Serve after Shutdown or Close, and by a
// second Serve.
var ErrServerClosed = errors.New("pcpd: server closed")

// Serve accepts on every listener until Shutdown or Close is called, and
// returns ErrServerClosed once its accept loops have ended. Cancelling
// ctx closes the server as Close does; for a graceful stop, call Shutdown.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	if s.serving || s.draining {
		s.mu.Unlock()
		return ErrServerClosed
	}
	s.serving = true
	s.accepting.Add(len(s.lns))
	s.mu.Unlock()
	for _, ln := range s.lns {
		go s.acceptLoop(ln)
	}
	s.startBackground()
	s.serveMCPHTTP()
	s.serveScomp()
	s.serveDashboard()
	s.log.Info("pcpd ready", "socket", s.cfg.Socket, "app_sockets", s.cfg.AppSocketDir, "control", s.cfg.ControlSocket, "state", s.cfg.StateDir, "trust", s.cfg.TrustDir, "tcp", s.cfg.TCPAddr)
	if s.cfg.Ready != nil {
		s.cfg.Ready()
	}
	select {
	case <-ctx.Done():
		s.Close()
	case <-s.quit:
	}
	s.accepting.Wait()
	return ErrServerClosed
}

// startBackground starts the accessibility connect attempt and the
// policy-reload loop.
func (s *Server) startBackground() {
	s.startNotifier()
	s.startPlatform()
	if s.ax != nil {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			cctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
			defer cancel()
			if err := s.ax.Connect(cctx); err != nil {
				s.log.Warn("no accessibility bus yet; Tier 2 answers NO_ATSPI2_SUPPORT until one appears", "err", err)
			} else {
				s.log.Info("accessibility adapter connected", "bus", s.ax.Stats().BusAddress)
			}
		}()
	}
	if s.cfg.Reload != nil {
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			for {
				select {
				case <-s.quit:
					return
				case <-s.cfg.Reload:
				}
				s.reloadPolicy()
			}
		}()
	}
}

func (s *Server) reloadPolicy() {
	// The signal acts as the user: only they can send it.
	sess := s.b.OpenSession(core.SessionInfo{Role: core.RoleUser, Transport: "signal", UID: os.Getuid(), PID: -1}, core.Endpoint{})
	_, err := s.b.ReloadPolicy(core.WithSession(s.ctx, sess))
	sess.Close()
	if err != nil {
		s.log.Error("policy reload failed; the policy in force is unchanged", "err", err)
	} else {
		s.log.Info("policy reloaded", "path", s.cfg.PolicyFile)
	}
}

// stopAccepting begins the end: no new connection is accepted or handed
// to a face, and the background work is told to stop. It reports false
// when the end had already begun.
func (s *Server) stopAccepting() bool {
	first := false
	s.quitOnce.Do(func() {
		first = true
		s.mu.Lock()
		s.draining = true
		s.mu.Unlock()
		for _, ln := range s.lns {
			ln.l.Close()
		}
		if s.agents != nil {
			s.agents.closeAll()
		}
		s.stopMCP()
		s.stopScomp()
		s.stopDashboard()
		close(s.quit) // after the listeners: quit means nothing is accepted
		s.cancel()
	})
	s.accepting.Wait()
	return first
}

// Shutdown stops accepting, then lets the requests in flight finish
// (their audit entries are committed before their replies go out) while
// reading nothing new: connections that serve no app go first, then the
// apps' and adapters'. When they are done, or ctx ends first, it closes
// what is left (connections, the per-app sockets, the adapters, the
// broker, the store) as Close does. It returns ctx's error if the drain
// was cut short.
func (s *Server) Shutdown(ctx context.Context) error {
	if !s.stopAccepting() {
		<-s.finished
		return nil
	}
	s.log.Info("pcpd shutting down")
	s.closeWaiting()
	err := s.b.Drain(ctx)
	if err != nil {
		s.log.Warn("shutdown deadline reached with requests in flight; closing their connections", "err", err)
	}
	s.finish()
	return err
}

// Close closes the listeners and every connection at once, then releases
// the server's resources, and waits for its goroutines to end.
func (s *Server) Close() error {
	if !s.stopAccepting() {
		<-s.finished
		return nil
	}
	s.finish()
	return nil
}

// closeWaiting closes the connections that have not reached a face (they
// have sent nothing yet).
func (s *Server) closeWaiting() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t := range s.conns {
		if !t.face {
			t.c.Close()
		}
	}
}

// finish closes every connection and releases everything, in order.
func (s *Server) finish() {
	s.mu.Lock()
	for t := range s.conns {
		t.c.Close()
	}
	s.mu.Unlock()
	s.release()
}

// release closes what New opened, in reverse order, after the
// connections' goroutines have ended. It runs once.
func (s *Server) release() {
	s.finishOnce.Do(func() {
		s.cancel()
		if s.apps != nil {
			s.apps.Close()
		}
		if s.ax != nil {
			s.ax.Close()
		}
		s.closePlatform()
		s.closeNotifier()
		s.stopMCP() // New failing halfway: never served
		s.stopScomp()
		s.stopDashboard()
		if s.b != nil {
			s.b.Close()
		}
		if s.agents != nil {
			s.agents.closeAll() // New failing halfway: never served
			s.agents.wg.Wait()
		}
		s.connWG.Wait()
		s.bg.Wait()
		for _, ln := range s.lns {
			ln.l.Close() // New failing halfway: never served
		}
		closeActivated(s.cfg.Activated) // those no listener took
		if s.shed != nil {
			s.shed.close()
		}
		if s.st != nil {
			s.st.Close()
		}
		if s.cfg.TCPAddr != "" && s.face != nil {
			os.Remove(s.cfg.TokenFile)
		}
		unlockStateDir(s.lock)
		close(s.finished)
	})
}

// Run serves cfg until ctx is cancelled, then shuts down, draining for at
// most DefaultShutdownTimeout. A cancellation is not an error.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return s.serveUntil(ctx)
}

// serveUntil serves until ctx is cancelled, then shuts down, draining for
// at most DefaultShutdownTimeout.
func (s *Server) serveUntil(ctx context.Context) error {
	served := make(chan struct{})
	go func() {
		s.Serve(context.Background())
		close(served)
	}()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), DefaultShutdownTimeout)
	defer cancel()
	s.Shutdown(sctx)
	<-served
	return nil
}

// serveConn hands a connection to its face. On the Unix sockets the first
// byte chooses between JSON-RPC and the framed stream (see isFramed), and
// must come within Limits.FirstByte; TCP speaks JSON-RPC only, and its
// gate (session.authenticate first, within Limits.Auth) bounds the wait.
func (s *Server) serveConn(t *tracked, info core.SessionInfo) {
	defer s.connWG.Done()
	defer s.untrack(t)
	defer t.c.Close()
	if t.mcp {
		s.serveMCP(t, info)
		return
	}
	var (
		rwc    net.Conn = t.c
		framed bool
	)
	if uc, ok := t.c.(*net.UnixConn); ok {
		pc := &peekedConn{UnixConn: uc, r: bufio.NewReaderSize(uc, 4096)}
		if d := s.cfg.Limits.FirstByte; d > 0 {
			uc.SetReadDeadline(time.Now().Add(d))
		}
		first, err := pc.r.Peek(1)
		if err != nil {
			return // closed, or silent, before saying anything
		}
		uc.SetReadDeadline(time.Time{})
		rwc, framed = pc, isFramed(first[0])
	}
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return
	}
	t.face = true
	s.mu.Unlock()
	var err error
	if framed {
		err = s.stream.ServeConn(rwc, info)
	} else {
		err = s.face.ServeConn(rwc, info)
	}
	if err != nil {
		s.log.Debug("connection ended", "transport", info.Transport, "err", err)
	}
}

// logRecovery reports what opening the audit log found and did.
func (s *Server) logRecovery(r store.Recovery) {
	if r.Torn != "" {
		s.log.Warn("audit log: cut off a record the last run did not finish writing (never acknowledged)", "record", r.Torn)
	}
	if r.Corrupt != "" {
		s.log.Error("audit log: a record is damaged; every action is refused until the log is repaired (see docs/audit.md)", "record", r.Corrupt)
	}
	if r.Migrated > 0 {
		s.log.Info("audit log: moved the database's audit entries into the log", "entries", r.Migrated)
	}
	if r.Restored > 0 {
		s.log.Warn("audit log: appended again entries the log had lost and its index kept", "entries", r.Restored)
	}
	if r.Rebuilt {
		s.log.Warn("audit log: its index disagreed with the log and was rebuilt", "entries", r.Indexed)
	} else if r.Indexed > 0 {
		s.log.Info("audit log: indexed entries the index lacked", "entries", r.Indexed)
	}
}
