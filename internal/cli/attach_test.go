package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/daemon"
)

// shotService returns a fake screenshot as an attachment.
type shotService struct{ png []byte }

func (shotService) AppID() string { return "pcp.test.shot" }

func (shotService) Manifest() *api.Manifest {
	return &api.Manifest{Version: "1.0", Publisher: "pcpd", Description: "A screenshot.",
		Capabilities: []api.CapabilityDecl{{Name: "take", Tier: 1, TrustLevel: api.TrustAuto, Description: "Takes one."}}}
}

func (s shotService) Invoke(context.Context, *api.Capability, api.InvocationSource, json.RawMessage) (*api.CapabilityResult, error) {
	return &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"width":640}`),
		Attachments: []api.Attachment{{Name: "../shot", MediaType: "image/png", Data: s.png}}}, nil
}

func TestInvokeSavesAttachments(t *testing.T) {
	t.Parallel()
	png := bytes.Repeat([]byte("\x89PNG"), 500_000)
	d := startDaemon(t, func(c *daemon.Config) { c.Services = []core.Service{shotService{png}} })
	for _, inline := range []bool{false, true} {
		dir := t.TempDir()
		args := []string{"invoke", "pcp.test.shot.take", "--attachments", dir}
		if inline {
			args = append(args, "--inline")
		}
		out := d.mustRun(t, args...)
		path := filepath.Join(dir, "_shot.png")
		if !strings.Contains(out, "attachment ../shot (image/png, 2000000 bytes) → "+path) {
			t.Errorf("inline %v: output %q, want the attachment saved to %s", inline, out, path)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, png) {
			t.Errorf("inline %v: %s holds %d bytes (%v), want the %d of the attachment", inline, path, len(got), err, len(png))
		}
		if _, _, err := d.run(t, args...); err == nil || !strings.Contains(err.Error(), "exists") {
			t.Errorf("inline %v: saving again: %v, want a refusal to overwrite", inline, err)
		}
	}
	if out := d.mustRun(t, "invoke", "pcp.test.shot.take"); !strings.Contains(out, "(--attachments DIR saves it)") {
		t.Errorf("without --attachments: %q, want a hint", out)
	}
}
