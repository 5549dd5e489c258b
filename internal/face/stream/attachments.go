package stream

import (
	"context"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/attach"
)

// Attachments on this face (docs/framed.md, "Attachments"): a result's
// api.Attachments travel as sealed memfds passed with the ExecuteResponse
// frame on a Unix socket, or inline in base64 where descriptors cannot go
// or the request asked for it. The choices are the JSON-RPC face's.

// executeReply is an ExecuteResponse payload whose result describes its
// attachments, and the descriptors to pass with the frame.
type executeReply struct {
	Result *attachedResult `json:"result"`
	fds    []int
}

// attachedResult is a CapabilityResult with its attachments described in
// JSON; a result without attachments has no attachments member.
type attachedResult struct {
	*api.CapabilityResult
	Attachments []api.AttachmentRef `json:"attachments,omitempty"`
}

type budgetKey struct{}

// withBudget records in ctx the connection's memfd budget (nil: it
// cannot pass descriptors).
func withBudget(ctx context.Context, b *attach.Budget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

func budgetOf(ctx context.Context) *attach.Budget {
	b, _ := ctx.Value(budgetKey{}).(*attach.Budget)
	return b
}

// checkMode refuses, before anything runs, an attachments mode that is
// not one of the three, and "fd" where descriptors cannot be passed.
func checkMode(mode string, canPass bool) error {
	switch mode {
	case api.AttachmentsAuto, api.AttachmentsInline:
		return nil
	case api.AttachmentsFD:
		if !canPass {
			return api.InvalidParam("attachments", "%q needs a Unix socket; ask for %q", api.AttachmentsFD, api.AttachmentsInline)
		}
		return nil
	}
	return api.InvalidParam("attachments", "must be %q or %q, got %q", api.AttachmentsFD, api.AttachmentsInline, mode)
}

// encodeAttachments is res as an ExecuteResponse: its attachments passed
// as memfds when budget is set (a Unix socket) and mode is not inline,
// else inline.
func encodeAttachments(res *api.CapabilityResult, mode string, budget *attach.Budget) (*executeReply, error) {
	if res == nil {
		return &executeReply{}, nil
	}
	r := &executeReply{Result: &attachedResult{CapabilityResult: res}}
	if len(res.Attachments) == 0 {
		return r, nil
	}
	var err error
	if budget != nil && mode != api.AttachmentsInline {
		r.Result.Attachments, r.fds, err = attach.Pass(budget, res.Attachments)
	} else {
		r.Result.Attachments, err = attach.Inline(res.Attachments)
	}
	if err != nil {
		return nil, err
	}
	return r, nil
}
