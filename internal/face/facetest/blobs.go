package facetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// BlobApp is BlobService's app id.
const BlobApp = "pcp.test.blob"

// The bytes BlobService's attachments carry: each differs from one offset
// to the next, so a shifted or truncated copy does not match.
var (
	ImageBytes = blob(3_000_000, 1)
	HugeBytes  = blob(api.InlineAttachmentLimit+1, 2)
	SmallBytes = blob(1000, 3)
)

func blob(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7+i>>9) ^ seed
	}
	return b
}

// BlobService is an in-process service whose capabilities return
// attachments, for the faces' and the daemon's attachment tests: "image"
// one of 3 MB (ImageBytes), "huge" one over the inline limit, "pair" two,
// "many" more than api.MaxAttachments, "none" none. It counts its
// invocations in Runs and tells Ran of each, when they are set.
type BlobService struct {
	Runs *atomic.Int64
	Ran  chan struct{}
}

var _ core.Service = BlobService{}

func (BlobService) AppID() string { return BlobApp }

func (BlobService) Manifest() *api.Manifest {
	var decls []api.CapabilityDecl
	for _, name := range []string{"huge", "image", "many", "none", "pair"} {
		decls = append(decls, api.CapabilityDecl{Name: name, Tier: 1, TrustLevel: api.TrustAuto, Description: "Returns attachments."})
	}
	return &api.Manifest{Version: "1.0", Publisher: "pcpd", Description: "Attachments for tests.", Capabilities: decls}
}

func (s BlobService) Invoke(_ context.Context, c *api.Capability, _ api.InvocationSource, _ json.RawMessage) (*api.CapabilityResult, error) {
	if s.Runs != nil {
		s.Runs.Add(1)
	}
	if s.Ran != nil {
		s.Ran <- struct{}{}
	}
	res := &api.CapabilityResult{Status: api.StatusSuccess}
	switch strings.TrimPrefix(c.ID, BlobApp+".") {
	case "image":
		res.Attachments = []api.Attachment{{Name: "image", MediaType: "image/png", Data: ImageBytes}}
	case "huge":
		res.Attachments = []api.Attachment{{Name: "raw", MediaType: "application/octet-stream", Data: HugeBytes}}
	case "pair":
		res.Attachments = []api.Attachment{{Name: "small", MediaType: "text/plain", Data: SmallBytes}, {Name: "image", MediaType: "image/png", Data: ImageBytes}}
	case "many":
		for i := range api.MaxAttachments + 1 {
			res.Attachments = append(res.Attachments, api.Attachment{Name: fmt.Sprint("a", i), MediaType: "text/plain", Data: SmallBytes})
		}
	}
	res.Data = json.RawMessage(fmt.Sprintf(`{"attachments":%d}`, len(res.Attachments)))
	return res, nil
}
