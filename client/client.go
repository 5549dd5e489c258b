// Package client is PCP's Go client for the JSON-RPC face (spec 000). It
// is what pcpctl, the example apps and any Go agent use to talk to pcpd:
// typed calls for every method, event notifications, and App for serving
// capabilities over the same connection.
package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// DefaultSocket is the agent socket path: $PCP_SOCKET, else
// $XDG_RUNTIME_DIR/pcp/pcp.sock.
func DefaultSocket() string {
	if s := os.Getenv("PCP_SOCKET"); s != "" {
		return s
	}
	return filepath.Join(runtimeDir(), "pcp", "pcp.sock")
}

// DefaultControlSocket is the user's control socket: $PCP_CONTROL_SOCKET,
// else control.sock beside the agent socket.
func DefaultControlSocket() string {
	if s := os.Getenv("PCP_CONTROL_SOCKET"); s != "" {
		return s
	}
	return filepath.Join(filepath.Dir(DefaultSocket()), "control.sock")
}

func runtimeDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return d
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("pcp-%d", os.Getuid()))
}

// Notification is an event or notice the daemon pushed.
type Notification struct {
	Method string
	Params json.RawMessage
}

// Options configure a Client.
type Options struct {
	// Handler serves requests the daemon sends (invoke.capability for an
	// app, query.* for an adapter). Nil answers METHOD_NOT_FOUND.
	Handler func(ctx context.Context, method string, params json.RawMessage) (any, error)
	// OnNotify receives the daemon's notifications in order of arrival.
	// It must not block for long. Nil queues them for Notifications.
	OnNotify func(Notification)
	// MaxLine bounds one incoming line; 0 means 16 MiB.
	MaxLine int
}

// Client is a connection to pcpd. Its methods are safe for concurrent use.
type Client struct {
	conn *jsonrpc.Conn
	done chan struct{}
	err  error

	notifs chan Notification
}

// Dial connects to the daemon's Unix socket at path ("" means
// DefaultSocket()).
func Dial(ctx context.Context, path string, opts Options) (*Client, error) {
	c, err := dialUnix(ctx, path)
	if err != nil {
		return nil, err
	}
	return New(c, opts), nil
}

// dialUnix connects to the socket at path ("" means DefaultSocket()).
func dialUnix(ctx context.Context, path string) (net.Conn, error) {
	if path == "" {
		path = DefaultSocket()
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("pcp: connecting to %s: %w (is pcpd running?)", path, err)
	}
	if err := checkServer(c.(*net.UnixConn), path); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// checkServer refuses a socket that is not served by the caller's own
// user: SO_PEERCRED on a dialled socket names the process that listened.
// Another user who got to the socket path first (a directory they
// created, a socket they swapped in) would otherwise read our requests
// and forge the replies.
func checkServer(c *net.UnixConn, path string) error {
	uid, pid, err := unixsock.PeerCred(c)
	if err != nil {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"socket": path},
			"pcp: %s: cannot read the server's credentials: %v", path, err)
	}
	if self := os.Getuid(); !unixsock.AllowPeer(uid, self) {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"socket": path, "uid": uid, "pid": pid},
			"pcp: %s is served by uid %d (pid %d), not by this user (uid %d); refusing to talk to it", path, uid, pid, self)
	}
	return nil
}

// DialTCP connects to the daemon's loopback TCP listener and presents the
// bearer token.
func DialTCP(ctx context.Context, addr, token string, opts Options) (*Client, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("pcp: connecting to %s: %w", addr, err)
	}
	cl := New(c, opts)
	var res api.SessionAuthenticateResult
	if err := cl.Call(ctx, api.MethodSessionAuthenticate, &api.SessionAuthenticateParams{Token: strings.TrimSpace(token)}, &res); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// New runs a client over an established connection.
func New(rwc net.Conn, opts Options) *Client {
	cl := &Client{done: make(chan struct{})}
	if opts.OnNotify == nil {
		cl.notifs = make(chan Notification, 1024)
	}
	if opts.MaxLine == 0 {
		opts.MaxLine = 16 << 20
	}
	h := jsonrpc.HandlerFunc(func(ctx context.Context, m *jsonrpc.Message) (any, error) {
		if m.IsNotification() {
			n := Notification{Method: m.Method, Params: m.Params}
			if opts.OnNotify != nil {
				opts.OnNotify(n)
			} else {
				select {
				case cl.notifs <- n:
				default: // a client that never reads notifications drops them
				}
			}
			return nil, nil
		}
		if opts.Handler == nil {
			return nil, api.Errorf(api.CodeMethodNotFound, map[string]any{"method": m.Method}, "method not found: %s", m.Method)
		}
		return opts.Handler(ctx, m.Method, m.Params)
	})
	// On a Unix socket, the daemon passes attachments as descriptors
	// with the reply lines (docs/jsonrpc.md, "Attachments").
	_, unixSocket := rwc.(*net.UnixConn)
	// A client that serves nothing and has no notification callback
	// expects nothing unasked until it subscribes or asks for
	// Notifications or Done: until then each call reads its own answer
	// on its own goroutine (jsonrpc.Options.ReadOnDemand), which saves
	// a goroutine hand-off per call.
	onDemand := opts.Handler == nil && opts.OnNotify == nil
	cl.conn = jsonrpc.NewConn(rwc, jsonrpc.Options{Handler: h, MaxLine: opts.MaxLine, WriteTimeout: -1, ReceiveFDs: unixSocket, ReadOnDemand: onDemand})
	go func() {
		cl.err = cl.conn.Run()
		close(cl.done)
	}()
	return cl
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Done is closed when the connection has ended. From the first call of
// Done on, the connection is read in the background, so that it sees
// the daemon hang up.
func (c *Client) Done() <-chan struct{} {
	c.conn.StartReading()
	return c.done
}

// Notifications returns the queue of pushed notifications (when Options
// had no OnNotify). The channel is never closed; select on Done too.
// From the first call on, the connection is read in the background.
func (c *Client) Notifications() <-chan Notification {
	c.conn.StartReading()
	return c.notifs
}

// Call sends any method and decodes its result. Errors from the daemon
// are *api.Error.
func (c *Client) Call(ctx context.Context, method string, params, result any) error {
	readsAfter(c, method)
	return c.conn.Call(ctx, method, params, result)
}

// readsAfter starts reading the connection in the background before a
// method after which the daemon sends unasked: events for a
// subscription, requests to an app or an adapter.
func readsAfter(c *Client, method string) {
	switch method {
	case api.MethodSubscribeEvents, api.MethodRegisterCapability, api.MethodRegisterAdapter:
		c.conn.StartReading()
	}
}

func call[R any](ctx context.Context, c *Client, method string, params any) (*R, error) {
	readsAfter(c, method)
	r := new(R)
	if err := c.conn.Call(ctx, method, params, r); err != nil {
		return nil, err
	}
	return r, nil
}

// RegisterCapability registers a manifest; this connection serves it.
func (c *Client) RegisterCapability(ctx context.Context, p *api.RegisterCapabilityParams) (*api.RegisterCapabilityResult, error) {
	return call[api.RegisterCapabilityResult](ctx, c, api.MethodRegisterCapability, p)
}

// RegisterAdapter binds this connection as an adapter.
func (c *Client) RegisterAdapter(ctx context.Context, p *api.RegisterAdapterParams) (*api.RegisterAdapterResult, error) {
	return call[api.RegisterAdapterResult](ctx, c, api.MethodRegisterAdapter, p)
}

// QueryCapabilities lists capabilities.
func (c *Client) QueryCapabilities(ctx context.Context, p *api.QueryCapabilitiesParams) (*api.QueryCapabilitiesResult, error) {
	return call[api.QueryCapabilitiesResult](ctx, c, api.MethodQueryCapabilities, p)
}

// QueryElements returns a surface's element tree.
func (c *Client) QueryElements(ctx context.Context, p *api.QueryElementsParams) (*api.QueryElementsResult, error) {
	return call[api.QueryElementsResult](ctx, c, api.MethodQueryElements, p)
}

// QuerySurface returns a surface's metadata.
func (c *Client) QuerySurface(ctx context.Context, p *api.QuerySurfaceParams) (*api.Surface, error) {
	return call[api.Surface](ctx, c, api.MethodQuerySurface, p)
}

// SessionContext returns the session context.
func (c *Client) SessionContext(ctx context.Context) (*api.SessionContext, error) {
	return call[api.SessionContext](ctx, c, api.MethodQuerySessionContext, nil)
}

// InvokeCapability invokes a capability. The result's Attachments hold
// the attachments' bytes, read from the memfds passed with the reply on
// a Unix socket (closed once read) or decoded from the inline base64;
// p.Attachments chooses (api.AttachmentsAuto by default).
func (c *Client) InvokeCapability(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	if p.Source == "" {
		p.Source = api.SourceSystemIntelligence
	}
	var raw json.RawMessage
	fds, err := c.conn.CallFDs(ctx, api.MethodInvokeCapability, p, &raw)
	if err != nil {
		return nil, err
	}
	defer closeFDs(fds)
	return decodeResult(raw, fds)
}

// InvokeAction performs an action on an element.
func (c *Client) InvokeAction(ctx context.Context, p *api.InvokeActionParams) (*api.InvokeActionResult, error) {
	return call[api.InvokeActionResult](ctx, c, api.MethodInvokeAction, p)
}

// Subscribe starts an event subscription; events arrive as notifications.
func (c *Client) Subscribe(ctx context.Context, p *api.SubscribeEventsParams) (*api.SubscribeEventsResult, error) {
	return call[api.SubscribeEventsResult](ctx, c, api.MethodSubscribeEvents, p)
}

// Unsubscribe cancels a subscription.
func (c *Client) Unsubscribe(ctx context.Context, id string) (*api.UnsubscribeEventsResult, error) {
	return call[api.UnsubscribeEventsResult](ctx, c, api.MethodUnsubscribeEvents, &api.UnsubscribeEventsParams{SubscriptionID: id})
}

// RevokeApp revokes an app.
func (c *Client) RevokeApp(ctx context.Context, p *api.RevokeAppParams) (*api.RevokeAppResult, error) {
	return call[api.RevokeAppResult](ctx, c, api.MethodRevokeApp, p)
}

// Health checks the daemon's health.
func (c *Client) Health(ctx context.Context) (*api.HealthResult, error) {
	return call[api.HealthResult](ctx, c, api.MethodHealthCheck, nil)
}

// Apps lists apps.
func (c *Client) Apps(ctx context.Context) (*api.AppsListResult, error) {
	return call[api.AppsListResult](ctx, c, api.MethodAppsList, nil)
}

// AllowApp lifts a revocation (control socket only).
func (c *Client) AllowApp(ctx context.Context, appID string) (*api.AppsAllowResult, error) {
	return call[api.AppsAllowResult](ctx, c, api.MethodAppsAllow, &api.AppsAllowParams{AppID: appID})
}

// AppSocket asks for the Tier 1 per-app socket of an app (apps.socket).
func (c *Client) AppSocket(ctx context.Context, p *api.AppsSocketParams) (*api.AppsSocketResult, error) {
	return call[api.AppsSocketResult](ctx, c, api.MethodAppsSocket, p)
}

// AppState asks a Tier 1 app for its dynamic state (apps.state).
func (c *Client) AppState(ctx context.Context, p *api.AppsStateParams) (*api.AppsStateResult, error) {
	return call[api.AppsStateResult](ctx, c, api.MethodAppsState, p)
}

// AuditTail returns the newest limit audit entries, oldest first; limit 0
// means the daemon's default. The daemon answers a page at a time (at
// most 1000 entries, cut to fit a frame); AuditTail follows the pages'
// cursors until it has limit entries or the log's first. Next is the
// cursor of what is older still, if the last page had one.
func (c *Client) AuditTail(ctx context.Context, limit int) (*api.AuditTailResult, error) {
	entries, next, err := follow(limit, true, func(n int, before int64) ([]api.AuditEntry, int64, error) {
		r, err := call[api.AuditTailResult](ctx, c, api.MethodAuditTail, &api.AuditTailParams{Limit: n, Before: before})
		if err != nil {
			return nil, 0, err
		}
		return r.Entries, r.Next, nil
	})
	if err != nil {
		return nil, err
	}
	return &api.AuditTailResult{Entries: entries, Next: next}, nil
}

// AuditVerify verifies the audit chain.
func (c *Client) AuditVerify(ctx context.Context) (*api.AuditVerifyResult, error) {
	return call[api.AuditVerifyResult](ctx, c, api.MethodAuditVerify, nil)
}

// AuditCheckpoint returns a signed checkpoint of the audit log.
func (c *Client) AuditCheckpoint(ctx context.Context) (*api.AuditCheckpointResult, error) {
	return call[api.AuditCheckpointResult](ctx, c, api.MethodAuditCheckpoint, nil)
}

// AuditProve returns the inclusion proof of audit entry seq.
func (c *Client) AuditProve(ctx context.Context, seq int64) (*api.AuditProveResult, error) {
	return call[api.AuditProveResult](ctx, c, api.MethodAuditProve, &api.AuditProveParams{Seq: seq})
}

// AuditConsistency asks the daemon to prove that its audit log extends
// the signed checkpoint; the caller should check the proof itself.
func (c *Client) AuditConsistency(ctx context.Context, checkpoint string) (*api.AuditConsistencyResult, error) {
	return call[api.AuditConsistencyResult](ctx, c, api.MethodAuditConsistency, &api.AuditConsistencyParams{Checkpoint: checkpoint})
}

// EventHistory returns the newest limit events of the journal, oldest
// first, following the daemon's pages as AuditTail does.
func (c *Client) EventHistory(ctx context.Context, limit int) (*api.EventsHistoryResult, error) {
	events, next, err := follow(limit, true, func(n int, before int64) ([]api.Event, int64, error) {
		r, err := call[api.EventsHistoryResult](ctx, c, api.MethodEventsHistory, &api.EventsHistoryParams{Limit: n, Before: before})
		if err != nil {
			return nil, 0, err
		}
		return r.Events, r.Next, nil
	})
	if err != nil {
		return nil, err
	}
	return &api.EventsHistoryResult{Events: events, Next: next}, nil
}

// ConfirmList lists confirmations: every one over the control socket, the
// caller's own over the agent socket.
func (c *Client) ConfirmList(ctx context.Context) (*api.ConfirmListResult, error) {
	return call[api.ConfirmListResult](ctx, c, api.MethodConfirmList, nil)
}

// ConfirmApprove approves a pending confirmation (control socket only).
func (c *Client) ConfirmApprove(ctx context.Context, id, reason string) (*api.ConfirmDecisionResult, error) {
	return call[api.ConfirmDecisionResult](ctx, c, api.MethodConfirmApprove, &api.ConfirmDecisionParams{ConfirmationID: id, Reason: reason})
}

// ConfirmDeny denies a pending confirmation (control socket only).
func (c *Client) ConfirmDeny(ctx context.Context, id, reason string) (*api.ConfirmDecisionResult, error) {
	return call[api.ConfirmDecisionResult](ctx, c, api.MethodConfirmDeny, &api.ConfirmDecisionParams{ConfirmationID: id, Reason: reason})
}

// JobsList lists deferred jobs, newest first; limit 0 means the daemon's
// default. It follows the daemon's pages as AuditTail does.
func (c *Client) JobsList(ctx context.Context, limit int) (*api.JobsListResult, error) {
	jobs, next, err := follow(limit, false, func(n int, before string) ([]api.Job, string, error) {
		r, err := call[api.JobsListResult](ctx, c, api.MethodJobsList, &api.JobsListParams{Limit: n, Before: before})
		if err != nil {
			return nil, "", err
		}
		return r.Jobs, r.Next, nil
	})
	if err != nil {
		return nil, err
	}
	return &api.JobsListResult{Jobs: jobs, Next: next}, nil
}

// follow reads a paged list of at most limit items (0: one page of the
// daemon's default), each page older than the one before, until it has
// limit items or a page carries no cursor. oldestFirst says how the
// daemon orders a page, and so where an older page goes.
func follow[T any, C comparable](limit int, oldestFirst bool, page func(n int, before C) ([]T, C, error)) ([]T, C, error) {
	var (
		zero, before C
		items        []T
	)
	for {
		got, next, err := page(limit-len(items), before)
		if err != nil {
			return nil, zero, err
		}
		if oldestFirst {
			items = append(got, items...)
		} else {
			items = append(items, got...)
		}
		if limit <= 0 || next == zero || len(got) == 0 || len(items) >= limit {
			return items, next, nil
		}
		before = next
	}
}

// JobsUndo undoes a queued job before it runs (control socket only).
func (c *Client) JobsUndo(ctx context.Context, id string) (*api.JobsUndoResult, error) {
	return call[api.JobsUndoResult](ctx, c, api.MethodJobsUndo, &api.JobsUndoParams{JobID: id})
}
