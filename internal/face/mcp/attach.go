package mcp

import (
	"encoding/json"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// attachedResult is a CapabilityResult as structured content, its attachments
// attachedResult (name, media type, size) and their bytes in content blocks.
type attachedResult struct {
	*api.CapabilityResult
	Attachments []api.AttachmentRef `json:"attachments"`
}

// attachmentsResult is the tool result of a capability result with
// attachments. MCP carries no descriptors, so the bytes go inline, at
// most api.InlineAttachmentLimit of them: after the text block (the
// structured content's JSON), one block per attachment, in order, an
// image block for image/* and an embedded resource (a blob, its URI
// pcp-attachment:NAME) for anything else.
func attachmentsResult(res *api.CapabilityResult) *sdk.CallToolResult {
	var total int64
	for _, a := range res.Attachments {
		total += int64(len(a.Data))
	}
	if total > api.InlineAttachmentLimit || len(res.Attachments) > api.MaxAttachments {
		return errorResult(api.Errorf(api.CodeInvalidParams, map[string]any{"field": "attachments", "limit": api.InlineAttachmentLimit, "size": total, "count": len(res.Attachments)},
			"attachments: %d bytes in %d exceed what MCP carries inline (%d bytes, %d attachments); use the JSON-RPC face on the Unix socket, which passes them as file descriptors",
			total, len(res.Attachments), api.InlineAttachmentLimit, api.MaxAttachments))
	}
	d := attachedResult{CapabilityResult: res, Attachments: make([]api.AttachmentRef, len(res.Attachments))}
	blocks := make([]sdk.Content, 0, 1+len(res.Attachments))
	for i, a := range res.Attachments {
		d.Attachments[i] = api.AttachmentRef{Name: a.Name, MediaType: a.MediaType, Size: int64(len(a.Data))}
		if strings.HasPrefix(a.MediaType, "image/") {
			blocks = append(blocks, &sdk.ImageContent{Data: a.Data, MIMEType: a.MediaType})
		} else {
			blocks = append(blocks, &sdk.EmbeddedResource{Resource: &sdk.ResourceContents{URI: "pcp-attachment:" + a.Name, MIMEType: a.MediaType, Blob: a.Data}})
		}
	}
	raw, err := jsonrpc.Marshal(d)
	if err != nil {
		return errorResult(api.Errorf(api.CodeInternalError, nil, "encoding the result: %v", err))
	}
	return &sdk.CallToolResult{Content: append([]sdk.Content{&sdk.TextContent{Text: string(raw)}}, blocks...), StructuredContent: json.RawMessage(raw)}
}
