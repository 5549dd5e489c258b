// Package daemon wires pcpd together: the store, the broker, the in-process
// services, the listeners and the faces. cmd/pcpd parses flags into a
// Config and calls Run.
package daemon

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/adapter/atspi"
	"github.com/pcp-dev/pcp/internal/jsonrpc"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/appsock"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/face/stream"
	"github.com/pcp-dev/pcp/internal/policy"
	"github.com/pcp-dev/pcp/internal/services/inspection"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// Config is pcpd's configuration.
type Config struct {
	// Socket is the agent socket (apps and the agent connect here).
	Socket string
	// ControlSocket is the user's socket (pcpctl acting as the user).
	ControlSocket string
	// AppSocketDir holds the Tier 1 per-app sockets; empty means "apps"
	// beside the agent socket.
	AppSocketDir string
	// Accessibility binds the AT-SPI2 adapter (Tier 2): elements and
	// actions of every accessible application, and the AT-SPI2 path of the
	// dispatch. It connects to the accessibility bus on first use and
	// again after the bus goes away; without one, it answers
	// NO_ATSPI2_SUPPORT and health reports it degraded.
	Accessibility bool
	// AccessibilityBus overrides the accessibility bus address (default
	// $AT_SPI_BUS_ADDRESS, else asked of the session bus).
	AccessibilityBus string
	// StateDir holds pcp.db.
	StateDir string
	// TrustDir holds trusted publisher keys.
	TrustDir string
	// TCPAddr, if set, is a loopback address for the JSON-RPC face over
	// TCP; clients authenticate with the token written to TokenFile.
	TCPAddr   string
	TokenFile string
	// AllowUnsigned accepts unsigned manifests (development only).
	AllowUnsigned bool
	// RateLimits bound invocations; nil means core.DefaultRateLimits.
	RateLimits *core.RateLimits
	// PolicyFile is the user's policy (default
	// $XDG_CONFIG_HOME/pcp/policy.toml); a missing file means the
	// built-in defaults, a file that does not load stops the start.
	PolicyFile string
	// Reload, when it delivers, rereads the policy file (pcpd sends on
	// SIGHUP).
	Reload <-chan struct{}
	// LivenessInterval and LivenessTimeout: see core.Config.
	LivenessInterval, LivenessTimeout time.Duration
	// MaxLine bounds one JSON-RPC line.
	MaxLine int
	Logger  *slog.Logger
	// Ready, if set, is called once every listener is up.
	Ready func()
}

// Defaults fills empty paths from the XDG environment.
func (c *Config) Defaults() error {
	runtime := os.Getenv("XDG_RUNTIME_DIR")
	if runtime == "" {
		runtime = filepath.Join(os.TempDir(), fmt.Sprintf("pcp-%d", os.Getuid()))
	}
	home, _ := os.UserHomeDir()
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" {
		state = filepath.Join(home, ".local", "state")
	}
	config := os.Getenv("XDG_CONFIG_HOME")
	if config == "" {
		config = filepath.Join(home, ".config")
	}
	if c.Socket == "" {
		c.Socket = filepath.Join(runtime, "pcp", "pcp.sock")
	}
	if c.ControlSocket == "" {
		c.ControlSocket = filepath.Join(filepath.Dir(c.Socket), "control.sock")
	}
	if c.AppSocketDir == "" {
		c.AppSocketDir = filepath.Join(filepath.Dir(c.Socket), "apps")
	}
	if c.StateDir == "" {
		c.StateDir = filepath.Join(state, "pcp")
	}
	if c.TrustDir == "" {
		c.TrustDir = filepath.Join(config, "pcp", "trusted-keys")
	}
	if c.PolicyFile == "" {
		c.PolicyFile = filepath.Join(config, "pcp", "policy.toml")
	}
	if c.TCPAddr != "" && c.TokenFile == "" {
		c.TokenFile = filepath.Join(filepath.Dir(c.Socket), "tcp.token")
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// Run serves until ctx is cancelled, then shuts down cleanly. A
// cancellation is not an error.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Defaults(); err != nil {
		return err
	}
	log := cfg.Logger
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("creating state dir: %w", err)
	}
	st, err := store.Open(ctx, filepath.Join(cfg.StateDir, "pcp.db"))
	if err != nil {
		return fmt.Errorf("opening store: %w", err)
	}
	defer st.Close()
	pol, err := policy.Load(cfg.PolicyFile)
	if err != nil {
		return err
	}
	if pol.Loaded() {
		log.Info("policy loaded", "path", cfg.PolicyFile)
	}
	b, err := core.New(ctx, core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, Policy: pol, TrustDir: cfg.TrustDir, AllowUnsigned: cfg.AllowUnsigned, RateLimits: cfg.RateLimits, LivenessInterval: cfg.LivenessInterval, LivenessTimeout: cfg.LivenessTimeout, Logger: log})
	if err != nil {
		return err
	}
	defer b.Close()
	if err := b.AddService(inspection.New(b)); err != nil {
		return err
	}
	if cfg.AllowUnsigned {
		log.Warn("unsigned manifests are accepted (--allow-unsigned); do not run like this outside development")
	}

	var token string
	if cfg.TCPAddr != "" {
		if err := loopbackOnly(cfg.TCPAddr); err != nil {
			return err
		}
		buf := make([]byte, 32)
		rand.Read(buf)
		token = hex.EncodeToString(buf)
		if err := os.MkdirAll(filepath.Dir(cfg.TokenFile), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(cfg.TokenFile, []byte(token+"\n"), 0o600); err != nil {
			return fmt.Errorf("writing token file: %w", err)
		}
		defer os.Remove(cfg.TokenFile)
	}
	face := rpc.NewServer(b, rpc.Options{MaxLine: cfg.MaxLine, Token: token, Logger: log})

	agentL, err := unixsock.Listen(cfg.Socket)
	if err != nil {
		return err
	}
	controlL, err := unixsock.Listen(cfg.ControlSocket)
	if err != nil {
		agentL.Close()
		return err
	}
	listeners := []net.Listener{agentL, controlL}
	var tcpL net.Listener
	if cfg.TCPAddr != "" {
		if tcpL, err = net.Listen("tcp", cfg.TCPAddr); err != nil {
			agentL.Close()
			controlL.Close()
			return err
		}
		listeners = append(listeners, tcpL)
	}

	if cfg.Accessibility {
		ax := atspi.New(atspi.Config{
			BusAddress: cfg.AccessibilityBus,
			OnEvent: func(eventType, appID, surfaceID string, data map[string]any) {
				b.Publish(eventType, appID, surfaceID, data)
			},
		})
		defer ax.Close()
		if err := b.AddAdapter(api.RegisterAdapterParams{AdapterID: atspi.ID, SurfaceType: "atspi", SupportedTiers: []int{2}}, ax); err != nil {
			return err
		}
		if err := b.AddAccessibilityAdapter(ax, 100); err != nil {
			return err
		}
		go func() {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := ax.Connect(cctx); err != nil {
				log.Warn("no accessibility bus yet; Tier 2 answers NO_ATSPI2_SUPPORT until one appears", "err", err)
			} else {
				log.Info("accessibility adapter connected", "bus", ax.Stats().BusAddress)
			}
		}()
	}

	apps := appsock.New(b, cfg.AppSocketDir, log)
	b.SetAppSockets(apps)

	srv := &server{face: face, stream: stream.NewServer(b, stream.Options{Logger: log}), log: log, self: os.Getuid(), conns: map[net.Conn]struct{}{}}
	var wg sync.WaitGroup
	serve := func(l net.Listener, role core.Role) {
		defer wg.Done()
		srv.acceptLoop(l, role)
	}
	wg.Add(2)
	go serve(agentL, core.RoleAgent)
	go serve(controlL, core.RoleUser)
	if tcpL != nil {
		wg.Add(1)
		go serve(tcpL, core.RoleAgent)
	}
	log.Info("pcpd ready", "socket", cfg.Socket, "app_sockets", cfg.AppSocketDir, "control", cfg.ControlSocket, "state", cfg.StateDir, "trust", cfg.TrustDir, "tcp", cfg.TCPAddr)
	if cfg.Ready != nil {
		cfg.Ready()
	}

	if cfg.Reload != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-cfg.Reload:
				}
				// The signal acts as the user: only they can send it.
				s := b.OpenSession(core.SessionInfo{Role: core.RoleUser, Transport: "signal", UID: os.Getuid(), PID: -1}, core.Endpoint{})
				_, err := b.ReloadPolicy(core.WithSession(ctx, s))
				s.Close()
				if err != nil {
					log.Error("policy reload failed; the policy in force is unchanged", "err", err)
				} else {
					log.Info("policy reloaded", "path", cfg.PolicyFile)
				}
			}
		}()
	}

	<-ctx.Done()
	log.Info("pcpd shutting down")
	for _, l := range listeners {
		l.Close()
	}
	srv.closeAll()
	apps.Close()
	wg.Wait()
	srv.wait()
	return nil
}

type server struct {
	face   *rpc.Server
	stream *stream.Server
	log    *slog.Logger
	self   int

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	active sync.WaitGroup
}

func (s *server) acceptLoop(l net.Listener, role core.Role) {
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("accept failed", "err", err)
			continue
		}
		info := core.SessionInfo{Role: role, UID: -1, PID: -1}
		switch cc := c.(type) {
		case *net.UnixConn:
			info.Transport = "unix"
			uid, pid, err := unixsock.PeerCred(cc)
			if err != nil || !unixsock.AllowPeer(uid, s.self) {
				s.log.Warn("refused connection from another user", "uid", uid, "pid", pid, "err", err)
				refuse(c, uid)
				continue
			}
			info.UID, info.PID = uid, pid
		default:
			info.Transport = "tcp"
			info.Remote = c.RemoteAddr().String()
			info.NeedsAuth = true
		}
		if !s.track(c) {
			c.Close()
			return
		}
		go func() {
			defer s.untrack(c)
			if err := s.serve(c, info); err != nil {
				s.log.Debug("connection ended", "err", err)
			}
		}()
	}
}

// serve hands a connection to its face. On the Unix sockets the first
// byte chooses between JSON-RPC and the framed stream (see isFramed);
// TCP speaks JSON-RPC only.
func (s *server) serve(c net.Conn, info core.SessionInfo) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return s.face.ServeConn(c, info)
	}
	pc := &peekedConn{UnixConn: uc, r: bufio.NewReaderSize(uc, 4096)}
	first, err := pc.r.Peek(1)
	if err != nil {
		c.Close()
		return nil // closed before saying anything
	}
	if isFramed(first[0]) {
		return s.stream.ServeConn(pc, info)
	}
	return s.face.ServeConn(pc, info)
}

func (s *server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.active.Add(1)
	return true
}

func (s *server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.active.Done()
}

func (s *server) closeAll() {
	s.mu.Lock()
	s.closed = true
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
}

func (s *server) wait() { s.active.Wait() }

// refuse tells a peer of another user why it is turned away, then hangs up.
func refuse(c net.Conn, uid int) {
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(jsonrpc.AppendError(nil, nil, api.Errorf(api.CodePermissionDenied, map[string]any{"uid": uid},
		"connection refused: uid %d is not the daemon's user", uid)))
	c.Write([]byte{'\n'})
	c.Close()
}
