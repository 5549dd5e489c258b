package pavo

import (
	"context"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// Driver answers the ops. Its fields are set before Serve and not changed
// afterwards.
type Driver struct {
	// Daemon reaches pcpd. The driver expects the user's role (the
	// control socket): approving, denying, undoing and re-allowing are
	// the user's. Nil answers every op that needs pcpd with an error.
	Daemon Caller
	// Version is reported in the manifest.
	Version string
	// CallTimeout bounds each call to pcpd; 0 means no bound.
	CallTimeout time.Duration
	// MaxLine bounds one request line; 0 means DefaultMaxLine.
	MaxLine int
	// OnPanic, when set, is told of a panic Handle recovered from, with
	// the op and the stack. The host only sees an ok:false line.
	OnPanic func(op string, v any, stack []byte)
}

type opFunc func(d *Driver, ctx context.Context, r *Request) (any, error)

// opTable maps each op to its handler, sorted by op; a test keeps it
// equal to Ops.
var opTable = []struct {
	op string
	fn opFunc
}{
	{OpJobs, (*Driver).jobsOp},
	{OpManifest, (*Driver).manifestOp},
	{OpNotifications, (*Driver).notificationsOp},
	{OpQuery, (*Driver).queryOp},
	{OpRender, (*Driver).renderOp},
	{OpSubmit, (*Driver).submitOp},
	{OpView, (*Driver).viewOp},
	{OpViews, (*Driver).viewsOp},
}

// Handle answers one request line (without its newline) with one reply
// line (without its newline). It never panics: a malformed line, a
// failing op, a panic in a handler and a result that does not encode all
// become an ok:false line.
func (d *Driver) Handle(ctx context.Context, line []byte) (reply []byte) {
	op := "request"
	defer func() {
		if v := recover(); v != nil {
			reply = errLine(fmt.Sprintf("internal error in %s: %v", op, v))
			if d.OnPanic != nil {
				d.OnPanic(op, v, debug.Stack())
			}
		}
	}()
	r, err := Decode(line)
	if err != nil {
		return errLine(err.Error())
	}
	op = r.Op
	for _, e := range opTable {
		if e.op == r.Op {
			res, err := e.fn(d, ctx, r)
			if err != nil {
				return errLine(err.Error())
			}
			return okLine(res)
		}
	}
	return errLine(fmt.Sprintf("op %q has no handler", r.Op))
}

// The surfaces this driver renders for.
var surfaces = []string{"cli", "tui", "web"}

// Render kinds of this driver's own nodes.
const (
	KindElementTree = "pcp.element-tree"
	KindAuditLog    = "pcp.audit-log"
	KindAuditChain  = "pcp.audit-chain"
)

// renderKinds are the node kinds this driver renders, on every surface,
// sorted.
var renderKinds = []string{KindAuditChain, KindAuditLog, KindElementTree}

// Manifest is the driver's manifest. It needs no daemon.
func (d *Driver) Manifest() *DriverManifest {
	render := map[string][]string{}
	for _, s := range surfaces {
		render[s] = append([]string(nil), renderKinds...)
	}
	version := d.Version
	if version == "" {
		version = "devel"
	}
	return &DriverManifest{
		Name:    "pcp",
		Title:   "PCP",
		Version: version,
		Description: "The PCP capability broker (pcpd): apps and their capabilities, the event journal, " +
			"the audit chain, confirmations to approve or deny, deferred jobs to undo, and capabilities to invoke.",
		Verbs:        []string{"serve"},
		Capabilities: []string{"pavo"},
		Views:        summaries(),
		Render:       render,
		Contributes:  Contributes{Jobs: true, Notifications: true},
		Protocol:     ProtocolVersion,
	}
}

func (d *Driver) manifestOp(_ context.Context, _ *Request) (any, error) {
	return d.Manifest(), nil
}

func (d *Driver) viewsOp(_ context.Context, _ *Request) (any, error) {
	return summaries(), nil
}

func (d *Driver) viewOp(ctx context.Context, r *Request) (any, error) {
	v := findView(r.View)
	if v == nil {
		return nil, fmt.Errorf("view: unknown view %s (known: %s)", quote(r.View), strings.Join(viewIDs(), ", "))
	}
	return d.resolveView(ctx, v, r.Params), nil
}
