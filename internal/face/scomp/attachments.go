package scomp

import (
	"encoding/base64"
	"fmt"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/attach"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// attachmentHeapShare is the share of a session's heap one result's
// attachments may take, before base64: a sixteenth, 4 MiB of the default
// 64 MiB heap. The heap holds the answer's base64 about three times over
// (the answer, its parse, a result that returns it).
const attachmentHeapShare = 16

// evalAttachment is an attachment as an eval sees it, in a binding
// call's result.attachments (docs/scomp.md, "Attachments"). Data is the
// bytes in base64; an attachment over the limit has none, and
// Truncated and Reason say why.
type evalAttachment struct {
	Name      string  `json:"name"`
	MediaType string  `json:"media_type"`
	Size      int64   `json:"size"`
	Data      *string `json:"data,omitempty"`
	Truncated bool    `json:"truncated,omitempty"`
	Reason    string  `json:"reason,omitempty"`
}

// evalAttachments encodes atts for an eval, in order: each with its
// bytes while the bytes given so far and its own stay within limit, the
// others listed with truncated. More than api.MaxAttachments is an
// INTERNAL_ERROR, as on the other faces.
func evalAttachments(atts []api.Attachment, limit int64) ([]byte, error) {
	if err := attach.CheckCount(atts); err != nil {
		return nil, err
	}
	out := make([]evalAttachment, len(atts))
	var given int64
	for i, a := range atts {
		n := int64(len(a.Data))
		out[i] = evalAttachment{Name: a.Name, MediaType: a.MediaType, Size: n}
		if given+n > limit {
			out[i].Truncated = true
			out[i].Reason = fmt.Sprintf("%d bytes: an eval receives at most %d bytes of one result's attachments", n, limit)
			continue
		}
		given += n
		d := base64.StdEncoding.EncodeToString(a.Data)
		out[i].Data = &d
	}
	return jsonrpc.Marshal(out)
}

// attachmentLimit is the attachment bytes of one result the next binding
// call's answer may carry: a sixteenth of the session's heap, and at most
// Options.AttachmentLimit when set.
func (b *sandbox) attachmentLimit() int64 {
	limit := int64(b.c.limits().MemoryLimit) / attachmentHeapShare
	if l := b.c.s.opts.AttachmentLimit; l > 0 && l < limit {
		limit = l
	}
	return limit
}
