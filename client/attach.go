package client

import (
	"encoding/json"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/api"
)

// wireResult is an invoke.capability result as the JSON-RPC face sends
// it: the CapabilityResult and its attachments' descriptions.
type wireResult struct {
	api.CapabilityResult
	Attachments []api.AttachmentRef `json:"attachments"`
}

// decodeResult decodes an invoke.capability result and fills its
// Attachments, from the descriptors that came with its line (fds, which
// the caller still closes) or from the inline data. Every attachment must
// be whole: a descriptor that is missing (the kernel drops what a full
// descriptor table cannot take), a size that does not match, an
// attachment over api.MaxAttachmentSize is an error.
func decodeResult(raw json.RawMessage, fds []int) (*api.CapabilityResult, error) {
	var w wireResult
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, api.Errorf(api.CodeInternalError, nil, "decoding the invoke.capability result: %v", err)
	}
	return fromWire(&w, fds)
}

// fromWire is the result w describes, its Attachments filled as
// decodeResult says.
func fromWire(w *wireResult, fds []int) (*api.CapabilityResult, error) {
	res := w.CapabilityResult
	if len(w.Attachments) > api.MaxAttachments {
		return nil, api.Errorf(api.CodeInternalError, map[string]any{"count": len(w.Attachments), "limit": api.MaxAttachments},
			"the result has %d attachments, more than %d", len(w.Attachments), api.MaxAttachments)
	}
	var total int64
	for _, ref := range w.Attachments {
		a, err := attachment(ref, fds, &total)
		if err != nil {
			return nil, err
		}
		res.Attachments = append(res.Attachments, a)
	}
	return &res, nil
}

// maxTotalAttachments bounds what one result's attachments may hold in
// the client's memory.
const maxTotalAttachments = 4 * api.MaxAttachmentSize

func attachment(ref api.AttachmentRef, fds []int, total *int64) (api.Attachment, error) {
	a := api.Attachment{Name: ref.Name, MediaType: ref.MediaType}
	bad := func(format string, args ...any) (api.Attachment, error) {
		return api.Attachment{}, api.Errorf(api.CodeInternalError, map[string]any{"attachment": ref.Name},
			"attachment %q: %s", ref.Name, fmt.Sprintf(format, args...))
	}
	if ref.Size < 0 || ref.Size > api.MaxAttachmentSize {
		return bad("size %d is outside 0..%d", ref.Size, api.MaxAttachmentSize)
	}
	if *total += ref.Size; *total > maxTotalAttachments {
		return bad("the result's attachments exceed %d bytes", maxTotalAttachments)
	}
	if ref.FD == nil {
		if int64(len(ref.Data)) != ref.Size {
			return bad("%d bytes inline, but its size says %d", len(ref.Data), ref.Size)
		}
		a.Data = ref.Data
		return a, nil
	}
	i := *ref.FD
	if i < 0 || i >= len(fds) {
		return bad("file descriptor %d did not arrive (%d came with the reply)", i, len(fds))
	}
	data, err := readMemfd(fds[i], ref.Size)
	if err != nil {
		return bad("%v", err)
	}
	a.Data = data
	return a, nil
}

// readMemfd reads the size bytes of the sealed memfd fd, which must hold
// exactly that many.
func readMemfd(fd int, size int64) ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("the descriptor is not a memory file")
	}
	if st.Size != size {
		return nil, fmt.Errorf("the memory file holds %d bytes, its size says %d", st.Size, size)
	}
	// Sealed against shrinking, the file cannot end under the read.
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("the memory file is not sealed against shrinking")
	}
	data := make([]byte, size)
	for off := int64(0); off < size; {
		n, err := unix.Pread(fd, data[off:], off)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading: %w", err)
		}
		if n == 0 {
			return nil, fmt.Errorf("reading: %d of %d bytes: %w", off, size, os.ErrClosed)
		}
		off += int64(n)
	}
	return data, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
