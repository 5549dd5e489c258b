// Command pcpd is the PCP daemon: it brokers capabilities between desktop
// applications and an AI agent. See `pcpd --help`.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/daemon"
)

func main() {
	var cfg daemon.Config
	var level string
	fs := flag.NewFlagSet("pcpd", flag.ExitOnError)
	fs.StringVar(&cfg.Socket, "socket", "", "agent socket path (default $XDG_RUNTIME_DIR/pcp/pcp.sock)")
	fs.StringVar(&cfg.ControlSocket, "control-socket", "", "user control socket path (default control.sock beside --socket)")
	fs.StringVar(&cfg.AppSocketDir, "app-socket-dir", "", "directory of the Tier 1 per-app sockets (default apps/ beside --socket)")
	fs.BoolVar(&cfg.Accessibility, "atspi", true, "reach accessible applications through the AT-SPI2 adapter (Tier 2)")
	fs.StringVar(&cfg.AccessibilityBus, "atspi-bus", "", "accessibility bus address (default $AT_SPI_BUS_ADDRESS, else asked of the session bus)")
	fs.BoolVar(&cfg.X11, "x11", true, "bind the X11 platform adapter: input, capture and the surfaces of every window (Tier 3)")
	fs.StringVar(&cfg.X11Display, "x11-display", "", "X11 display of the platform adapter (default $DISPLAY)")
	fs.BoolVar(&cfg.Notifications, "notify", true, "show confirmations as desktop notifications with Approve and Deny (org.freedesktop.Notifications)")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "state directory holding pcp.db (default $XDG_STATE_HOME/pcp)")
	fs.StringVar(&cfg.TrustDir, "trust-dir", "", "directory of trusted publisher keys, PEM PUBLIC KEY files (default $XDG_CONFIG_HOME/pcp/trusted-keys)")
	fs.StringVar(&cfg.TCPAddr, "tcp", "", "also serve JSON-RPC on this loopback address, e.g. 127.0.0.1:7878 (token in --token-file)")
	fs.StringVar(&cfg.TokenFile, "token-file", "", "where to write the TCP bearer token (default tcp.token beside --socket)")
	fs.StringVar(&cfg.MCP.Socket, "mcp-socket", "", "MCP socket path: stdio framing, what pcpctl mcp relays to (default mcp.sock beside --socket)")
	fs.StringVar(&cfg.MCP.HTTPAddr, "mcp-http", "", "also serve MCP over streamable HTTP on this loopback address, e.g. 127.0.0.1:7879 (token in --mcp-token-file)")
	fs.StringVar(&cfg.MCP.TokenFile, "mcp-token-file", "", "where to write the MCP HTTP bearer token (default mcp.token beside --socket)")
	fs.DurationVar(&cfg.MCP.ConfirmWait, "mcp-confirm-wait", 0, "how long an MCP tool call waits for the user to decide a confirmation (default 2m)")
	fs.StringVar(&cfg.Scomp.Socket, "scomp-socket", "", "scomp socket path: WebSocket over a Unix socket (default scomp.sock beside --socket)")
	fs.StringVar(&cfg.Scomp.Addr, "scomp", "", "also serve scomp (WebSocket) on this loopback address, e.g. 127.0.0.1:7880 (token in --scomp-token-file)")
	fs.StringVar(&cfg.Scomp.TokenFile, "scomp-token-file", "", "where to write the scomp bearer token (default scomp.token beside --socket)")
	fs.DurationVar(&cfg.Scomp.EvalTimeout, "scomp-eval-timeout", 0, "how long one scomp eval may run, not counting the user's decisions (default 30s; the policy's [scomp] eval_timeout wins)")
	fs.DurationVar(&cfg.Scomp.InvokeTimeout, "scomp-invoke-timeout", 0, "how long a scomp client has to answer the server's invoke (default 30s)")
	fs.DurationVar(&cfg.Scomp.ConfirmWait, "scomp-confirm-wait", 0, "how long a binding call in a scomp eval waits for the user to decide a confirmation (default 2m)")
	fs.IntVar(&cfg.Scomp.Sessions, "scomp-sessions", 0, "how many scomp sessions one agent may hold at once on scomp.sock, and the TCP endpoint's together (default 16)")
	fs.IntVar(&cfg.Scomp.MemoryLimit, "scomp-memory-limit", 0, "bytes of JavaScript heap one scomp session may use (default 64 MiB)")
	fs.Int64Var(&cfg.Scomp.MemoryTotal, "scomp-memory-total", 0, "bytes of JavaScript heap the scomp sessions open at once may reserve together, each its --scomp-memory-limit (default 2 GiB)")
	fs.StringVar(&cfg.Dashboard, "dashboard", "", "serve the web dashboard on this loopback address, e.g. 127.0.0.1:7881 (pcpctl dashboard prints its login URL)")
	fs.BoolVar(&cfg.MCP.ExposeCapabilities, "expose-capabilities", false, "add one MCP tool per registered capability, kept in step as apps register or are revoked")
	fs.BoolVar(&cfg.AuditFsync, "audit-fsync", false, "fsync the audit log before each reply waiting on it, so acknowledged entries survive a power loss (costs a disk flush per group)")
	fs.BoolVar(&cfg.AllowUnsigned, "allow-unsigned", false, "accept manifests with an empty signature (development only; reported by health.check)")
	fs.IntVar(&cfg.MaxLine, "max-line", 1<<20, "largest accepted JSON-RPC line in bytes")
	fs.StringVar(&level, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.PolicyFile, "policy", "", "the user's policy file (default $XDG_CONFIG_HOME/pcp/policy.toml); SIGHUP rereads it")
	rl := core.DefaultRateLimits
	fs.Float64Var(&rl.PerApp, "rate-per-app", rl.PerApp, "invocations per second of one app's capabilities from one source (0: no limit)")
	fs.IntVar(&rl.PerAppBurst, "rate-per-app-burst", rl.PerAppBurst, "burst allowed above --rate-per-app")
	fs.Float64Var(&rl.PerConnection, "rate-per-connection", rl.PerConnection, "invocations and actions per second of one connection (0: no limit)")
	fs.IntVar(&rl.PerConnectionBurst, "rate-per-connection-burst", rl.PerConnectionBurst, "burst allowed above --rate-per-connection")
	cfg.RateLimits = &rl
	fs.DurationVar(&cfg.LivenessInterval, "liveness-interval", core.DefaultLivenessInterval, "how often connected apps are asked health.check (negative: never)")
	fs.DurationVar(&cfg.LivenessTimeout, "liveness-timeout", core.DefaultLivenessTimeout, "an app that does not answer health.check within this is unresponsive")
	fs.DurationVar(&cfg.Limits.FirstByte, "first-byte-timeout", daemon.DefaultFirstByteTimeout, "close a Unix connection that sends nothing for this long after connecting (negative: never)")
	fs.DurationVar(&cfg.Limits.Idle, "idle-timeout", daemon.DefaultIdleTimeout, "close a silent connection with no request in flight, no app and no subscription after this long (negative: never)")
	fs.DurationVar(&cfg.Limits.Message, "message-timeout", daemon.DefaultMessageTimeout, "a message begun must arrive whole within this (negative: no bound)")
	fs.IntVar(&cfg.Limits.Connections, "max-connections", daemon.DefaultMaxConnections, "connections open at once, all listeners together")
	fs.IntVar(&cfg.Limits.ConnectionsPerUID, "max-connections-per-uid", daemon.DefaultMaxConnectionsUID, "connections open at once from one uid on the agent sockets")
	fs.IntVar(&cfg.Limits.ControlReserve, "control-reserve", daemon.DefaultControlReserve, "of --max-connections, how many only the control socket may use (at most a quarter)")
	fs.IntVar(&cfg.Limits.UnauthenticatedTCP, "max-unauthenticated-tcp", daemon.DefaultUnauthenticatedTCP, "TCP connections open at once that have not authenticated")
	shutdownTimeout := fs.Duration("shutdown-timeout", daemon.DefaultShutdownTimeout, "on SIGINT or SIGTERM, how long requests in flight may take to finish before their connections are closed")
	showVersion := fs.Bool("version", false, "print pcpd's version and exit")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), `pcpd is PCP's per-session daemon: it brokers capabilities between desktop
applications and an AI agent. Apps serve their capabilities (Tier 1), or
are reached through the accessibility tree (Tier 2) or input and capture
(Tier 3); the agent discovers and invokes on the agent socket, the user
approves, undoes and audits on the control socket (pcpctl).

Started by a service manager with sockets (LISTEN_FDS, as pcpd.socket from
pcpctl install --user passes them), pcpd serves those in place of the ones
it would create, and says READY=1 on $NOTIFY_SOCKET.

Usage: pcpd [flags]

`)
		fs.PrintDefaults()
	}
	fs.Parse(os.Args[1:])
	if *showVersion {
		fmt.Println("pcpd", core.Version)
		return
	}

	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		fmt.Fprintln(os.Stderr, "pcpd: --log-level:", err)
		os.Exit(2)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lv}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	reload := make(chan struct{}, 1)
	go func() {
		for range hup {
			select {
			case reload <- struct{}{}:
			default:
			}
		}
	}()
	cfg.Reload = reload
	// Sockets the service manager bound (pcpd.socket): taken before
	// anything else opens a descriptor.
	activated, err := daemon.ListenFDs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pcpd:", err)
		os.Exit(1)
	}
	cfg.Activated = activated
	cfg.Ready = func() {
		if err := notifyManager("READY=1"); err != nil {
			cfg.Logger.Warn("could not tell the service manager pcpd is ready", "err", err)
		}
	}
	if err := run(ctx, cfg, *shutdownTimeout); err != nil {
		fmt.Fprintln(os.Stderr, "pcpd:", err)
		os.Exit(1)
	}
}

// run serves until ctx is cancelled (a signal), then shuts down, giving
// the requests in flight at most grace to finish. A signal is success.
func run(ctx context.Context, cfg daemon.Config, grace time.Duration) error {
	srv, err := daemon.New(cfg)
	if err != nil {
		return err
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background()) }()
	<-ctx.Done()
	notifyManager("STOPPING=1")
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		cfg.Logger.Warn("shutdown cut short", "err", err)
	}
	<-served
	return nil
}
