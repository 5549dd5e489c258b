package daemon

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/rpc"
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
	// Notifications shows each confirmation as a desktop notification
	// (org.freedesktop.Notifications on the session bus) whose Approve
	// and Deny are the user's answer (internal/adapter/notify).
	// NotificationsBus overrides the session bus address (default
	// $DBUS_SESSION_BUS_ADDRESS).
	Notifications    bool
	NotificationsBus string
	// X11 binds the X11 platform adapter (internal/adapter/x11, Tier 3):
	// the system and compositor capabilities (input, capture, window
	// focus) and the surfaces of every top-level window. X11Display
	// names the display (default $DISPLAY); without one, or when it
	// cannot be opened, the daemon runs without a platform adapter.
	X11        bool
	X11Display string
	// StateDir holds pcp.db and pcpd.lock, which one daemon at a time
	// holds locked.
	StateDir string
	// TrustDir holds trusted publisher keys.
	TrustDir string
	// TCPAddr, if set, is a loopback address for the JSON-RPC face over
	// TCP; clients authenticate with the token written to TokenFile.
	TCPAddr   string
	TokenFile string
	// AllowUnsigned accepts unsigned manifests (development only).
	AllowUnsigned bool
	// AuditFsync makes every group of audit entries fsynced before the
	// replies waiting for them go out, so that an acknowledged entry
	// survives a power loss too (store.WithAuditSync).
	AuditFsync bool
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
	// Services are in-process capability providers served beside the
	// built-in ones (their app ids start with core.ReservedPrefix).
	Services []core.Service

	Logger *slog.Logger
	// Ready, if set, is called once Serve accepts on every listener.
	Ready func()

	// MCP configures the MCP face (mcp.go).
	MCP MCPConfig
	// Scomp configures the scomp face (scomp.go).
	Scomp ScompConfig
	// Dashboard, if set, is a loopback address serving the web dashboard
	// (dashboard.go); pcpctl dashboard asks for its login URL.
	Dashboard string

	// Activated are the sockets the service manager passed (ListenFDs):
	// each serves as the agent, control, MCP or scomp socket, by its name
	// or else the path it is bound to, in place of one pcpd would create;
	// New refuses one that matches none (activation.go).
	Activated []*Activated

	// Limits bound what connections may hold; zero fields take the
	// defaults (see Defaults), so tests shrink only what they exercise.
	Limits Limits

	// runtimeFallback is the /tmp/pcp-<uid> directory Defaults chose
	// when XDG_RUNTIME_DIR is unset; New refuses it unless it is ours.
	runtimeFallback string
}

// Limits are the bounds on connections. A zero duration or count means
// the default below; a negative duration turns that timeout off.
type Limits struct {
	// FirstByte closes a Unix connection that sends nothing this long
	// after it was accepted (default 10 s).
	FirstByte time.Duration
	// Auth closes a TCP connection that has not authenticated this long
	// after it was accepted (default 10 s).
	Auth time.Duration
	// Idle closes a connection that has been silent this long while it
	// has no request in flight and serves no app or adapter and holds no
	// subscription (default 5 min).
	Idle time.Duration
	// Message bounds the arrival of one message (a JSON-RPC line, a
	// frame) from its first byte to its last (default 30 s).
	Message time.Duration
	// Connections bounds the connections open at once on every listener
	// together (default 1024). ControlReserve of them only the control
	// socket may use (default 16, at most a quarter of Connections), so
	// that the user can reach pcpd, to see what goes on and to approve
	// or deny, whatever holds the agent sockets and TCP.
	// ConnectionsPerUID bounds those of one uid on the agent sockets
	// (the shared one and the contained agents'; default 512).
	// UnauthenticatedTCP bounds the TCP connections that have not
	// authenticated yet (default 64): another local user who reaches the
	// loopback port holds no more than these.
	Connections, ControlReserve, ConnectionsPerUID, UnauthenticatedTCP int
	// LineMemory bounds the bytes that long JSON-RPC lines (above the
	// 64 KiB read buffer) may hold, across every connection (default
	// 64 MiB).
	LineMemory int64
	// AuthMaxLine bounds a line before TCP authentication (default
	// 4 KiB).
	AuthMaxLine int
	// AuthFailuresPerSecond and AuthFailureBurst throttle wrong TCP
	// tokens daemon-wide (default 5/s, bursts of 20).
	AuthFailuresPerSecond float64
	AuthFailureBurst      int
}

// Default limits.
const (
	DefaultFirstByteTimeout   = 10 * time.Second
	DefaultIdleTimeout        = 5 * time.Minute
	DefaultMessageTimeout     = 30 * time.Second
	DefaultMaxConnections     = 1024
	DefaultMaxConnectionsUID  = 512
	DefaultControlReserve     = 16
	DefaultUnauthenticatedTCP = 64
	DefaultLineMemory         = 64 << 20
	// DefaultShutdownTimeout is how long Run (and pcpd) let Shutdown
	// drain before closing what is left.
	DefaultShutdownTimeout = 10 * time.Second
)

func (l *Limits) defaults() {
	dur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	dur(&l.FirstByte, DefaultFirstByteTimeout)
	dur(&l.Auth, rpc.DefaultAuthTimeout)
	dur(&l.Idle, DefaultIdleTimeout)
	dur(&l.Message, DefaultMessageTimeout)
	if l.Connections <= 0 {
		l.Connections = DefaultMaxConnections
	}
	if l.ConnectionsPerUID <= 0 {
		l.ConnectionsPerUID = DefaultMaxConnectionsUID
	}
	if l.ControlReserve <= 0 {
		l.ControlReserve = DefaultControlReserve
	}
	if l.UnauthenticatedTCP <= 0 {
		l.UnauthenticatedTCP = DefaultUnauthenticatedTCP
	}
	if l.LineMemory <= 0 {
		l.LineMemory = DefaultLineMemory
	}
	// AuthMaxLine and the throttle on wrong tokens are defaulted by the
	// rpc face, which owns them.
}

// fdHeadroom is what the descriptor limit keeps back from the connection
// caps, for the descriptors pcpd holds besides its connections: standard
// streams, the poller, the state lock and the store's files, the
// listeners, the per-app and contained agents' sockets and the apps'
// connections on them, the D-Bus connections, the reserve descriptor.
// Beyond it, the reserve descriptor and the accept back-off take over.
const fdHeadroom = 64

// fitDescriptors lowers Connections so that connections cannot use up
// the file descriptors (RLIMIT_NOFILE's soft limit, which the Go runtime
// raised to the hard limit at start): it keeps back fdHeadroom or a
// quarter of the limit, whichever is more, but never more than half. A
// daemon out of descriptors cannot accept, so it cannot refuse either,
// and every client waits in the listen queue; under the cap, a connection
// over it is refused at once with a coded error. It returns the limit,
// 0 when it could not be read (the caps are then left alone).
func (l *Limits) fitDescriptors() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	nofile := int(min(rl.Cur, 1<<30)) // RLIM_INFINITY is all ones
	keep := min(max(fdHeadroom, nofile/4), nofile/2)
	l.Connections = max(min(l.Connections, nofile-keep), 1)
	return nofile
}

// clampCaps makes the connection caps consistent: the control reserve is
// at most a quarter of the total, and the caps of the agent sockets' uid
// and of unauthenticated TCP at most what the reserve leaves.
func (l *Limits) clampCaps() {
	l.ControlReserve = min(l.ControlReserve, l.Connections/4)
	shared := l.Connections - l.ControlReserve
	l.ConnectionsPerUID = min(l.ConnectionsPerUID, shared)
	l.UnauthenticatedTCP = min(l.UnauthenticatedTCP, shared)
}

// off turns a negative (disabled) timeout into the 0 the faces read as
// "none".
func off(d time.Duration) time.Duration { return max(d, 0) }

// Defaults fills empty paths from the XDG environment, makes every path
// absolute (a Tier 1 app is handed its socket path and may run in another
// directory), and fills the limits.
func (c *Config) Defaults() error {
	runtime := os.Getenv("XDG_RUNTIME_DIR")
	if runtime == "" {
		runtime = filepath.Join(os.TempDir(), fmt.Sprintf("pcp-%d", os.Getuid()))
		c.runtimeFallback = runtime
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
	} else {
		c.runtimeFallback = ""
	}
	abs := func(p *string) error {
		if *p == "" {
			return nil
		}
		a, err := filepath.Abs(*p)
		if err != nil {
			return fmt.Errorf("making %s absolute: %w", *p, err)
		}
		*p = a
		return nil
	}
	if err := abs(&c.Socket); err != nil {
		return err
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
	c.mcpDefaults()
	c.scompDefaults()
	for _, p := range []*string{&c.ControlSocket, &c.AppSocketDir, &c.StateDir, &c.TrustDir, &c.PolicyFile, &c.TokenFile, &c.MCP.Socket, &c.MCP.TokenFile, &c.Scomp.Socket, &c.Scomp.TokenFile} {
		if err := abs(p); err != nil {
			return err
		}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Limits.defaults()
	return nil
}
