// Package attach encodes a capability result's attachments (api.Attachment)
// for the faces that carry them: as sealed memfds passed beside the
// message on a Unix socket, or inline in base64 (docs/jsonrpc.md,
// "Attachments"; docs/framed.md, "Attachments"). The faces share its
// bounds and its memfds, so a client sees the same attachments whichever
// face it speaks.
package attach

import (
	"fmt"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/api"
)

// DefaultMaxUnread bounds, per connection, the attachment bytes passed
// as memfds since the peer was last seen to have read everything sent to
// it: memfds in a socket's queue hold their memory, which the socket's
// buffer does not count, until the peer reads them.
const DefaultMaxUnread = 512 << 20

// Seals is what every passed memfd is sealed with: its size and contents
// are fixed, and so are its seals.
const Seals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL

// Budget bounds the memfd bytes one connection may have in flight. mu
// guards held.
type Budget struct {
	conn syscall.Conn
	max  int64
	mu   sync.Mutex
	// held is the attachment bytes passed since the send queue was last
	// seen empty.
	held int64
}

// NewBudget returns the budget of conn, at most max bytes unread (max <=
// 0 means DefaultMaxUnread).
func NewBudget(conn syscall.Conn, max int64) *Budget {
	if max <= 0 {
		max = DefaultMaxUnread
	}
	return &Budget{conn: conn, max: max}
}

// Reserve counts n more bytes passed, refusing them (RATE_LIMITED, scope
// attachment_memory) when the peer has left more than the bound unread.
// The count starts again whenever the socket's send queue is empty
// (SIOCOUTQ): the peer has read every byte and descriptor sent so far.
func (p *Budget) Reserve(n int64) error {
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
func (p *Budget) unread() int {
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

// CheckCount refuses (INTERNAL_ERROR) more than api.MaxAttachments.
func CheckCount(atts []api.Attachment) error {
	if n := len(atts); n > api.MaxAttachments {
		return api.Errorf(api.CodeInternalError, map[string]any{"limit": api.MaxAttachments, "count": n},
			"the result has %d attachments; at most %d can be sent", n, api.MaxAttachments)
	}
	return nil
}

// Total is the bytes of atts.
func Total(atts []api.Attachment) int64 {
	var total int64
	for _, a := range atts {
		total += int64(len(a.Data))
	}
	return total
}

// Inline describes atts with their bytes inline, at most
// api.InlineAttachmentLimit bytes in all; past it, INVALID_PARAMS
// (field attachments) naming fd passing as the way.
func Inline(atts []api.Attachment) ([]api.AttachmentRef, error) {
	if err := CheckCount(atts); err != nil {
		return nil, err
	}
	if total := Total(atts); total > api.InlineAttachmentLimit {
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "attachments", "limit": api.InlineAttachmentLimit, "size": total},
			"attachments: %d bytes exceed the inline limit of %d bytes; on the Unix socket, ask for %q (the default) to receive them as file descriptors",
			total, api.InlineAttachmentLimit, api.AttachmentsFD)
	}
	refs := make([]api.AttachmentRef, len(atts))
	for i, a := range atts {
		// An empty attachment has no data member (omitempty): its size
		// 0 says it all.
		refs[i] = api.AttachmentRef{Name: a.Name, MediaType: a.MediaType, Size: int64(len(a.Data)), Data: a.Data}
	}
	return refs, nil
}

// Pass copies each attachment into a sealed memfd, counted against b.
// It returns their descriptions, whose FD indexes fds, and the
// descriptors, which the caller owns. On error none is left open.
func Pass(b *Budget, atts []api.Attachment) (refs []api.AttachmentRef, fds []int, err error) {
	if err := CheckCount(atts); err != nil {
		return nil, nil, err
	}
	for _, a := range atts {
		if len(a.Data) > api.MaxAttachmentSize {
			return nil, nil, api.Errorf(api.CodeInternalError, map[string]any{"attachment": a.Name, "limit": api.MaxAttachmentSize, "size": len(a.Data)},
				"attachment %s of %d bytes exceeds the limit of %d bytes", a.Name, len(a.Data), api.MaxAttachmentSize)
		}
	}
	if err := b.Reserve(Total(atts)); err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			CloseFDs(fds)
			fds = nil
		}
	}()
	refs = make([]api.AttachmentRef, len(atts))
	for i, a := range atts {
		fd, err := SealedMemfd(a.Name, a.Data)
		if err != nil {
			return nil, fds, api.Errorf(api.CodeInternalError, map[string]any{"attachment": a.Name}, "attachment %s: %v", a.Name, err)
		}
		idx := len(fds)
		fds = append(fds, fd)
		refs[i] = api.AttachmentRef{Name: a.Name, MediaType: a.MediaType, Size: int64(len(a.Data)), FD: &idx}
	}
	return refs, fds, nil
}

// CloseFDs closes every descriptor of fds.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// SealedMemfd returns a memfd holding data, sealed with Seals, named
// pcp-attachment-NAME.
func SealedMemfd(name string, data []byte) (fd int, err error) {
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
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, Seals); err != nil {
		return -1, fmt.Errorf("sealing the memfd: %w", err)
	}
	return fd, nil
}
