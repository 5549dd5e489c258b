package scomp

import (
	"encoding/base64"
	"fmt"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/attach"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// DefaultAttachmentLimit is Options.AttachmentLimit's default: the bytes
// of one result's attachments an eval receives, before base64 (4 MiB).
const DefaultAttachmentLimit = 4 << 20

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
// call's answer may carry: Options.AttachmentLimit, and at most an eighth
// of the session's heap, which holds each answer about three times over
// in base64 (the answer, its parse, a result that returns it).
func (b *sandbox) attachmentLimit() int64 {
	limit := b.c.s.opts.AttachmentLimit
	if heap := int64(b.c.limits().MemoryLimit) / 8; heap < limit {
		limit = heap
	}
	return limit
}
