// Package cli is pcpctl, the command-line client of pcpd, as a library.
//
// Run parses the arguments into a cobra command tree built afresh for each
// call, talks to the daemon only through package client, and writes to the
// writers it is given, so tests drive it in-process. cmd/pcpctl is a thin
// main around Run, FormatError and ExitCode.
//
// Every command prints a readable table or summary by default and, with
// --json, the method's result as indented JSON. Errors from the daemon are
// returned as the *api.Error the client decoded, unwrapped, so the caller
// sees their codes.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/client"
)

// DefaultTimeout bounds each call to the daemon unless --timeout says
// otherwise. It is longer than the daemon's default execution timeout so
// that a slow capability's EXECUTION_TIMEOUT reaches the user.
const DefaultTimeout = 35 * time.Second

// maxInput bounds the files pcpctl reads (manifests, keys, --params).
const maxInput = 16 << 20

// env is one invocation's global options and I/O. It lives for one Run.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	root          *cobra.Command
	socket        string
	controlSocket string
	json          bool
	framed        bool
	timeout       time.Duration

	// started is set once a command's own code runs; an error before that
	// came from parsing the command line.
	started bool
}

// Run runs pcpctl with args (without the program name). It returns nil on
// success, including when ctx is cancelled while following events; an
// error for which IsUsage reports true when the command line was wrong;
// and otherwise the error that stopped the command.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if args == nil {
		args = []string{} // cobra reads os.Args when given nil
	}
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr}
	root := e.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return nil
	}
	var ue *usageError
	if !e.started && !errors.As(err, &ue) {
		ue = &usageError{err: err}
		err = ue
	}
	if ue != nil && ue.cmd == "" && cmd != nil {
		ue.cmd = cmd.CommandPath()
	}
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		return errors.New("interrupted")
	}
	return err
}

func (e *env) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "pcpctl",
		Short: "Inspect and drive pcpd, the PCP capability broker",
		Long: `pcpctl talks to pcpd, the per-session PCP daemon, over its Unix socket.

It lists and invokes capabilities, follows events, revokes and allows apps,
approves and denies confirmations, lists and undoes deferred jobs, shows and
reloads the policy, checks health, reads and verifies the audit log,
signs and verifies capability manifests, says what is not ready (doctor),
installs pcpd's systemd user units (install --user), and opens the web
dashboard.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version(),
	}
	root.SetVersionTemplate("pcpctl {{.Version}}\n")
	e.root = root
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err: err} })
	pf := root.PersistentFlags()
	pf.StringVar(&e.socket, "socket", client.DefaultSocket(), "pcpd agent socket ($PCP_SOCKET)")
	pf.StringVar(&e.controlSocket, "control-socket", client.DefaultControlSocket(), "pcpd control socket, for what only the user may do ($PCP_CONTROL_SOCKET)")
	pf.BoolVar(&e.json, "json", false, "print the method's result as indented JSON")
	pf.BoolVar(&e.framed, "framed", false, "speak spec 001's framed stream instead of JSON-RPC (caps, invoke, health, apps, capture --no-wait)")
	pf.DurationVar(&e.timeout, "timeout", DefaultTimeout, "bound on each call to pcpd (0 for none)")

	root.AddCommand(
		e.capsCommand(),
		e.invokeCommand(),
		e.captureCommand(),
		e.elementsCommand(),
		e.surfaceCommand(),
		e.actionCommand(),
		e.contextCommand(),
		e.eventsCommand(),
		e.revokeCommand(),
		e.appsCommand(),
		e.confirmCommand(),
		e.jobsCommand(),
		e.policyCommand(),
		e.healthCommand(),
		e.auditCommand(),
		e.manifestCommand(),
		e.serveCommand(),
		e.agentCommand(),
		e.mcpCommand(),
		e.scompCommand(),
		e.doctorCommand(),
		e.installCommand(),
		e.uninstallCommand(),
		e.dashboardCommand(),
		e.versionCommand(),
	)
	e.addCompletions(root)
	return root
}

// run adapts a command body to cobra, marking that parsing is over.
func (e *env) run(f func(ctx context.Context, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		e.started = true
		return f(cmd.Context(), cmd, args)
	}
}

// connect dials the agent socket, or the control socket when control is
// set, within the call timeout.
func (e *env) connect(ctx context.Context, control bool, opts client.Options) (*client.Client, error) {
	if e.framed {
		return nil, usagef("--framed serves caps, invoke, health, apps and capture --no-wait; this command speaks JSON-RPC only")
	}
	path := e.socket
	if control {
		path = e.controlSocket
		// The control socket lives beside the agent socket: --socket alone
		// moves both, unless the control socket was named too.
		if e.root != nil && e.root.PersistentFlags().Changed("socket") && !e.root.PersistentFlags().Changed("control-socket") && os.Getenv("PCP_CONTROL_SOCKET") == "" {
			path = filepath.Join(filepath.Dir(e.socket), "control.sock")
		}
	}
	dctx, cancel := e.callContext(ctx)
	defer cancel()
	return client.Dial(dctx, path, opts)
}

func (e *env) callContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if e.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, e.timeout)
}

// call runs one request with the call timeout. A timeout becomes an error
// naming the method and the bound; daemon errors pass through unwrapped.
func call[R any](ctx context.Context, e *env, method string, f func(context.Context) (*R, error)) (*R, error) {
	cctx, cancel := e.callContext(ctx)
	defer cancel()
	r, err := f(cctx)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, fmt.Errorf("%s: no reply from pcpd within %s (see --timeout)", method, e.timeout)
	}
	return r, err
}

// once dials, makes one call and hangs up.
func once[R any](ctx context.Context, e *env, control bool, method string, f func(context.Context, *client.Client) (*R, error)) (*R, error) {
	cl, err := e.connect(ctx, control, client.Options{})
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	return call(ctx, e, method, func(ctx context.Context) (*R, error) { return f(ctx, cl) })
}

// printJSON writes v as indented JSON without HTML escaping.
func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// usageError is a command line pcpctl cannot run.
type usageError struct {
	err error
	// cmd is the command path, for the help hint.
	cmd string
}

func (u *usageError) Error() string {
	if u.cmd == "" {
		return u.err.Error()
	}
	return fmt.Sprintf("%v (see '%s --help')", u.err, u.cmd)
}

func (u *usageError) Unwrap() error { return u.err }

func usagef(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// IsUsage reports whether err says the command line was wrong.
func IsUsage(err error) bool {
	var ue *usageError
	return errors.As(err, &ue)
}

// framedOnce runs f on a framed connection to the agent socket.
func framedOnce[R any](ctx context.Context, e *env, what string, f func(context.Context, *client.Framed) (*R, error)) (*R, error) {
	dctx, cancel := e.callContext(ctx)
	defer cancel()
	fc, err := client.DialFramed(dctx, e.socket)
	if err != nil {
		return nil, err
	}
	defer fc.Close()
	return call(ctx, e, what, func(ctx context.Context) (*R, error) { return f(ctx, fc) })
}
