package api

// Attachment is a binary payload a capability returns beside its JSON
// result: a frame capture, an encoded image. It is Go-only: the result's
// Data describes it in JSON, and each face carries the bytes its own way
// (on the Unix sockets, as a sealed memfd passed with the JSON-RPC reply
// line or the framed ExecuteResponse; elsewhere inline, in base64, under
// InlineAttachmentLimit; in an scomp eval, in base64 under its own limit).
type Attachment struct {
	// Name identifies the attachment within its result ("image").
	Name string
	// MediaType is its IANA media type ("image/png").
	MediaType string
	// Data is the payload. A provider must not change it once returned.
	Data []byte
}

// AttachmentRef is an attachment on the wire, in the "attachments"
// member of a JSON-RPC invoke.capability result or of a framed
// ExecuteResponse's result. At most one of FD and Data is set (neither
// for an empty attachment inline): FD is the index of its memfd among the
// file descriptors that came with the reply line or frame; Data is the
// bytes, in base64.
type AttachmentRef struct {
	Name      string `json:"name"`
	MediaType string `json:"media_type"`
	Size      int64  `json:"size"`
	FD        *int   `json:"fd,omitempty"`
	Data      []byte `json:"data,omitempty"`
}

// Attachment delivery modes: InvokeCapabilityParams.Attachments.
const (
	// AttachmentsAuto passes memfds where the connection can (a Unix
	// socket, a request outside a batch) and inlines otherwise.
	AttachmentsAuto = ""
	// AttachmentsFD asks for memfds; refused where they cannot be passed.
	AttachmentsFD = "fd"
	// AttachmentsInline asks for base64 in the JSON, under
	// InlineAttachmentLimit.
	AttachmentsInline = "inline"
)

// Limits on attachments.
const (
	// InlineAttachmentLimit bounds the attachments of one result sent
	// inline, in bytes before base64: 8 MiB.
	InlineAttachmentLimit = 8 << 20
	// MaxAttachments bounds the attachments of one result (and so the
	// descriptors passed with one line).
	MaxAttachments = 16
	// MaxAttachmentSize bounds one attachment passed as a memfd: 256 MiB.
	MaxAttachmentSize = 256 << 20
)
