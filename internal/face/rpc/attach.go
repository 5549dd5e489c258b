package rpc

import (
	"context"
	"encoding/json"
	"io"
	"syscall"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/attach"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// Attachments on this face (docs/jsonrpc.md, "Attachments"): a result's
// api.Attachments travel as sealed memfds passed with the reply line on a
// Unix socket, or inline in base64 where descriptors cannot go (TCP, a
// batch) or the caller asked for it.

// DefaultMaxUnreadAttachments bounds, per connection, the attachment
// bytes passed as memfds since the peer was last seen to have read
// everything sent to it (attach.Budget).
const DefaultMaxUnreadAttachments = attach.DefaultMaxUnread

// fdPassing is a connection's memfd budget.
type fdPassing = attach.Budget

// newFDPassing returns the state of a connection that can pass
// descriptors (c is a Unix socket), else nil.
func newFDPassing(conn *jsonrpc.Conn, rwc io.ReadWriteCloser, max int64) *fdPassing {
	sc, ok := rwc.(syscall.Conn)
	if !ok || !conn.CanPassFDs() {
		return nil
	}
	return attach.NewBudget(sc, max)
}

type fdsKey struct{}

// withFDPassing records in ctx the connection's fd passing state (nil:
// it cannot pass descriptors).
func withFDPassing(ctx context.Context, p *fdPassing) context.Context {
	return context.WithValue(ctx, fdsKey{}, p)
}

// fdPassingOf returns the fd passing state for a reply to the request of
// ctx, nil when it cannot carry descriptors: not a Unix socket, or a
// request in a batch.
func fdPassingOf(ctx context.Context) *fdPassing {
	p, _ := ctx.Value(fdsKey{}).(*fdPassing)
	if jsonrpc.InBatch(ctx) {
		return nil
	}
	return p
}

// invokeCapability is invoke.capability: the core's InvokeCapability,
// with the result's attachments encoded as the caller chose.
func invokeCapability(ctx context.Context, b *core.Broker, raw json.RawMessage) (any, error) {
	p := new(api.InvokeCapabilityParams)
	if err := decodeParams(raw, p); err != nil {
		return nil, err
	}
	fds := fdPassingOf(ctx)
	switch p.Attachments {
	case api.AttachmentsAuto, api.AttachmentsInline:
	case api.AttachmentsFD:
		if fds == nil {
			return nil, api.InvalidParam("attachments", "%q needs a Unix socket and a request outside a batch; ask for %q", api.AttachmentsFD, api.AttachmentsInline)
		}
	default:
		return nil, api.InvalidParam("attachments", "must be %q or %q, got %q", api.AttachmentsFD, api.AttachmentsInline, p.Attachments)
	}
	res, err := b.InvokeCapability(ctx, p)
	if err != nil || len(res.Attachments) == 0 {
		return res, err
	}
	if fds != nil && p.Attachments != api.AttachmentsInline {
		return passed(fds, res)
	}
	return inlined(res)
}

// attachedResult is a CapabilityResult with its attachments described in
// JSON and, when passed as memfds, the descriptors to send with it.
type attachedResult struct {
	*api.CapabilityResult
	Attachments []api.AttachmentRef `json:"attachments"`
	fds         []int
}

// FDs is jsonrpc.FDCarrier: the Conn owns them once Handle returns.
func (r *attachedResult) FDs() []int {
	if r == nil {
		return nil
	}
	return r.fds
}

// inlined encodes the attachments in base64, at most
// api.InlineAttachmentLimit bytes in all.
func inlined(res *api.CapabilityResult) (*attachedResult, error) {
	refs, err := attach.Inline(res.Attachments)
	if err != nil {
		return nil, err
	}
	return &attachedResult{CapabilityResult: res, Attachments: refs}, nil
}

// passed copies each attachment into a sealed memfd. On error, none is
// left open.
func passed(fp *fdPassing, res *api.CapabilityResult) (*attachedResult, error) {
	refs, fds, err := attach.Pass(fp, res.Attachments)
	if err != nil {
		return nil, err
	}
	return &attachedResult{CapabilityResult: res, Attachments: refs, fds: fds}, nil
}
