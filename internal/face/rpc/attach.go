package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// Attachments on this face (docs/jsonrpc.md, "Attachments"): a result's
// api.Attachments travel as sealed memfds passed with the reply line on a
// Unix socket, or inline in base64 where descriptors cannot go (TCP, a
// batch) or the caller asked for it.

// DefaultMaxUnreadAttachments bounds, per connection, the attachment
// bytes passed as memfds since the peer was last seen to have read
// everything sent to it: memfds in a socket's queue hold their memory,
// which the socket's buffer does not count, until the peer reads them.
const DefaultMaxUnreadAttachments = 512 << 20

// fdPassing is a connection's state for passing memfds. mu guards held.
type fdPassing struct {
	conn syscall.Conn
	max  int64
	mu   sync.Mutex
	// held is the attachment bytes passed since the send queue was last
	// seen empty.
	held int64
}

// newFDPassing returns the state of a connection that can pass
// descriptors (c is a Unix socket), else nil.
func newFDPassing(conn *jsonrpc.Conn, rwc io.ReadWriteCloser, max int64) *fdPassing {
	sc, ok := rwc.(syscall.Conn)
	if !ok || !conn.CanPassFDs() {
		return nil
	}
	return &fdPassing{conn: sc, max: max}
}

// reserve counts n more bytes passed, refusing them when the peer has
// left more than its bound unread. The count starts again whenever
// the socket's send queue is empty (SIOCOUTQ): the peer has read every
// line and descriptor sent so far.
func (p *fdPassing) reserve(n int64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held > 0 && p.unread() == 0 {
		p.held = 0
	}
	if p.held+n > p.max {
		return api.Errorf(api.CodeRateLimited, map[string]any{"scope": "attachment_memory", "limit": p.max, "unread": p.held, "size": n},
			"attachments of %d bytes refused: %d bytes passed earlier may still be unread, and at most %d may be; read the replies", n, p.held, p.max)
	}
	p.held += n
	return nil
}

// unread is the size of the socket's send queue, or -1 if unknown.
func (p *fdPassing) unread() int {
	rc, err := p.conn.SyscallConn()
	if err != nil {
		return -1
	}
	n := -1
	rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil {
			n = v
		}
	})
	return n
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

func checkCount(res *api.CapabilityResult) error {
	if n := len(res.Attachments); n > api.MaxAttachments {
		return api.Errorf(api.CodeInternalError, map[string]any{"limit": api.MaxAttachments, "count": n},
			"the result has %d attachments; at most %d can be sent", n, api.MaxAttachments)
	}
	return nil
}

// inlined encodes the attachments in base64, at most
// api.InlineAttachmentLimit bytes in all.
func inlined(res *api.CapabilityResult) (*attachedResult, error) {
	if err := checkCount(res); err != nil {
		return nil, err
	}
	var total int64
	for _, a := range res.Attachments {
		total += int64(len(a.Data))
	}
	if total > api.InlineAttachmentLimit {
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "attachments", "limit": api.InlineAttachmentLimit, "size": total},
			"attachments: %d bytes exceed the inline limit of %d bytes; on the Unix socket, ask for %q (the default) to receive them as file descriptors",
			total, api.InlineAttachmentLimit, api.AttachmentsFD)
	}
	r := &attachedResult{CapabilityResult: res, Attachments: make([]api.AttachmentRef, len(res.Attachments))}
	for i, a := range res.Attachments {
		r.Attachments[i] = api.AttachmentRef{Name: a.Name, MediaType: a.MediaType, Size: int64(len(a.Data)), Data: nonNil(a.Data)}
	}
	return r, nil
}

// nonNil keeps an empty attachment's data in the JSON ("data":"").
func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// passed copies each attachment into a sealed memfd. On error, none is
// left open.
func passed(fp *fdPassing, res *api.CapabilityResult) (_ *attachedResult, err error) {
	if err := checkCount(res); err != nil {
		return nil, err
	}
	var total int64
	for _, a := range res.Attachments {
		total += int64(len(a.Data))
	}
	if err := fp.reserve(total); err != nil {
		return nil, err
	}
	r := &attachedResult{CapabilityResult: res, Attachments: make([]api.AttachmentRef, len(res.Attachments))}
	defer func() {
		if err != nil {
			for _, fd := range r.fds {
				unix.Close(fd)
			}
		}
	}()
	for i, a := range res.Attachments {
		if len(a.Data) > api.MaxAttachmentSize {
			return nil, api.Errorf(api.CodeInternalError, map[string]any{"attachment": a.Name, "limit": api.MaxAttachmentSize, "size": len(a.Data)},
				"attachment %s of %d bytes exceeds the limit of %d bytes", a.Name, len(a.Data), api.MaxAttachmentSize)
		}
		fd, err := sealedMemfd(a.Name, a.Data)
		if err != nil {
			return nil, api.Errorf(api.CodeInternalError, map[string]any{"attachment": a.Name}, "attachment %s: %v", a.Name, err)
		}
		idx := len(r.fds)
		r.fds = append(r.fds, fd)
		r.Attachments[i] = api.AttachmentRef{Name: a.Name, MediaType: a.MediaType, Size: int64(len(a.Data)), FD: &idx}
	}
	return r, nil
}

// seals is what every passed memfd is sealed with: its size and
// contents are fixed, and so are its seals.
const seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL

// sealedMemfd returns a memfd holding data, sealed with seals.
func sealedMemfd(name string, data []byte) (fd int, err error) {
	fd, err = unix.MemfdCreate("pcp-attachment-"+name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	defer func() {
		if err != nil {
			unix.Close(fd)
		}
	}()
	for off := 0; off < len(data); {
		n, err := unix.Pwrite(fd, data[off:], int64(off))
		if err != nil {
			if err == unix.EINTR {
				continue
			}
			return -1, fmt.Errorf("writing the memfd: %w", err)
		}
		off += n
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		return -1, fmt.Errorf("sealing the memfd: %w", err)
	}
	return fd, nil
}
