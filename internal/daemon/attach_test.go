package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/facetest"
	"github.com/pcp-dev/pcp/internal/testkit"
)

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// peerReport is what testdata/attach_peer.py prints.
type peerReport struct {
	FDsReceived int        `json:"fds_received"`
	Status      string     `json:"status"`
	Error       *api.Error `json:"error"`
	Attachments []struct {
		Name        string   `json:"name"`
		MediaType   string   `json:"media_type"`
		Size        int64    `json:"size"`
		FD          *int     `json:"fd"`
		Inline      bool     `json:"inline"`
		RegularFile bool     `json:"regular_file"`
		FileSize    int64    `json:"file_size"`
		Seals       []string `json:"seals"`
		Writable    bool     `json:"writable"`
		Read        int64    `json:"read"`
		SHA256      string   `json:"sha256"`
	} `json:"attachments"`
}

// runPeer runs the Python peer against the daemon's agent socket.
func runPeer(t *testing.T, socket, capability, mode string) peerReport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "python3", filepath.Join("testdata", "attach_peer.py"), socket, facetest.BlobApp+"."+capability, mode).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("attach_peer.py %s %s: %v\n%s", capability, mode, err, ee.Stderr)
		}
		t.Fatalf("attach_peer.py: %v", err)
	}
	var r peerReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("attach_peer.py printed %q: %v", out, err)
	}
	return r
}

// waitFDs waits until the daemon serves no connection (each closes its
// descriptor before it is untracked, after its peer hangs up) and then
// checks that the process holds at most want descriptors and no memfd.
func waitFDs(t *testing.T, s *Server, want int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if !s.watchConns(ctx, func() bool { return len(s.conns) == 0 }) {
		t.Fatal("the daemon's connections did not close after their peers hung up")
	}
	if all, memfds := testkit.FDs(t); all > want || memfds != 0 {
		t.Fatalf("descriptors leaked: %d open (%d memfds), want at most %d and no memfd", all, memfds, want)
	}
}

func TestAttachmentsPassedAsSealedMemfds(t *testing.T) {
	testkit.CheckGoroutines(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatalf("the peer needs python3: %v", err)
	}
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	r := serve(t, Config{Services: []core.Service{facetest.BlobService{}}, TCPAddr: addr})
	// Warm the daemon up (lazy files, the store), then take the baseline.
	runPeer(t, r.cfg.Socket, "image", "auto")
	waitFDs(t, r.Server, 1<<20)
	base, _ := testkit.FDs(t)

	t.Run("fd", func(t *testing.T) {
		for _, mode := range []string{"auto", api.AttachmentsFD} {
			got := runPeer(t, r.cfg.Socket, "image", mode)
			if got.Error != nil || got.FDsReceived != 1 || len(got.Attachments) != 1 {
				t.Fatalf("mode %s: %+v, want one attachment by fd", mode, got)
			}
			a := got.Attachments[0]
			if a.FD == nil || *a.FD != 0 || !a.RegularFile || a.Size != int64(len(facetest.ImageBytes)) || a.FileSize != a.Size || a.Read != a.Size {
				t.Errorf("mode %s: attachment %+v, want fd 0 holding %d bytes", mode, a, len(facetest.ImageBytes))
			}
			if diff := cmp.Diff([]string{"grow", "seal", "shrink", "write"}, a.Seals); diff != "" || a.Writable {
				t.Errorf("mode %s: seals (-want +got):\n%s writable: %v", mode, diff, a.Writable)
			}
			if a.SHA256 != sum(facetest.ImageBytes) || a.Name != "image" || a.MediaType != "image/png" {
				t.Errorf("mode %s: got %s %s sha256 %s, want image image/png %s", mode, a.Name, a.MediaType, a.SHA256, sum(facetest.ImageBytes))
			}
		}
		got := runPeer(t, r.cfg.Socket, "pair", "auto")
		if got.FDsReceived != 2 || len(got.Attachments) != 2 || *got.Attachments[0].FD != 0 || *got.Attachments[1].FD != 1 ||
			got.Attachments[0].SHA256 != sum(facetest.SmallBytes) || got.Attachments[1].SHA256 != sum(facetest.ImageBytes) {
			t.Errorf("pair: %+v, want small as fd 0 and image as fd 1", got)
		}
		// Over the inline limit, by fd: fine.
		if got := runPeer(t, r.cfg.Socket, "huge", "auto"); got.Error != nil || got.Attachments[0].SHA256 != sum(facetest.HugeBytes) {
			t.Errorf("huge by fd: %+v", got)
		}
	})

	t.Run("inline", func(t *testing.T) {
		got := runPeer(t, r.cfg.Socket, "image", api.AttachmentsInline)
		if got.Error != nil || got.FDsReceived != 0 || len(got.Attachments) != 1 {
			t.Fatalf("inline: %+v, want one attachment inline", got)
		}
		if a := got.Attachments[0]; !a.Inline || a.Size != int64(len(facetest.ImageBytes)) || a.SHA256 != sum(facetest.ImageBytes) {
			t.Errorf("inline: %+v, want the image's %d bytes", a, len(facetest.ImageBytes))
		}
		got = runPeer(t, r.cfg.Socket, "huge", api.AttachmentsInline)
		if got.Error == nil || got.Error.Code != api.CodeInvalidParams || got.FDsReceived != 0 {
			t.Fatalf("huge inline: %+v, want INVALID_PARAMS", got)
		}
		data, _ := got.Error.Data.(map[string]any)
		if data["field"] != "attachments" || data["limit"] != float64(api.InlineAttachmentLimit) || data["size"] != float64(len(facetest.HugeBytes)) {
			t.Errorf("huge inline: error data %v, want field attachments, limit %d, size %d", data, api.InlineAttachmentLimit, len(facetest.HugeBytes))
		}
		got = runPeer(t, r.cfg.Socket, "image", "carrier-pigeon")
		if got.Error == nil || got.Error.Code != api.CodeInvalidParams {
			t.Errorf("unknown mode: %+v, want INVALID_PARAMS", got)
		}
	})

	t.Run("hangup", func(t *testing.T) {
		for _, c := range []struct{ capability, mode string }{{"huge", "auto"}, {"image", api.AttachmentsInline}, {"pair", "auto"}} {
			for range 5 {
				runPeer(t, r.cfg.Socket, c.capability, "hangup")
			}
		}
		waitFDs(t, r.Server, base)
	})

	t.Run("go client", func(t *testing.T) {
		ctx := context.Background()
		cl, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		token, err := os.ReadFile(r.cfg.TokenFile)
		if err != nil {
			t.Fatal(err)
		}
		tcp, err := client.DialTCP(ctx, addr, string(token), client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer tcp.Close()
		for _, c := range []struct {
			name string
			cl   *client.Client
			mode string
		}{{"unix", cl, ""}, {"unix inline", cl, api.AttachmentsInline}, {"tcp", tcp, ""}} {
			res, err := c.cl.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: facetest.BlobApp + ".pair", AppID: facetest.BlobApp, Attachments: c.mode})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			want := []api.Attachment{{Name: "small", MediaType: "text/plain", Data: facetest.SmallBytes}, {Name: "image", MediaType: "image/png", Data: facetest.ImageBytes}}
			if len(res.Attachments) != len(want) {
				t.Fatalf("%s: %d attachments, want %d", c.name, len(res.Attachments), len(want))
			}
			for i, a := range res.Attachments {
				w := want[i]
				if a.Name != w.Name || a.MediaType != w.MediaType || !bytes.Equal(a.Data, w.Data) {
					t.Errorf("%s: attachment %d is %s %s of %d bytes (sha256 %s), want %s %s of %d bytes (sha256 %s)",
						c.name, i, a.Name, a.MediaType, len(a.Data), sum(a.Data), w.Name, w.MediaType, len(w.Data), sum(w.Data))
				}
			}
		}
		_, err = tcp.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: facetest.BlobApp + ".image", AppID: facetest.BlobApp, Attachments: api.AttachmentsFD})
		if !errors.Is(err, api.ErrInvalidParams) {
			t.Errorf("fd over tcp: %v, want INVALID_PARAMS", err)
		}
		_, err = tcp.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: facetest.BlobApp + ".huge", AppID: facetest.BlobApp})
		if !errors.Is(err, api.ErrInvalidParams) {
			t.Errorf("huge over tcp: %v, want INVALID_PARAMS (over the inline limit)", err)
		}
		cl.Close()
		tcp.Close()
		<-cl.Done()
		<-tcp.Done()
		waitFDs(t, r.Server, base)
	})

	t.Run("framed", func(t *testing.T) {
		// The framed face on the same socket (the first byte picks it):
		// a Python peer gets the memfds with the ExecuteResponse frame,
		// and the Go framed client reads them.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, "python3", filepath.Join("..", "face", "stream", "testdata", "framed_attach_peer.py"), r.cfg.Socket, facetest.BlobApp+".pair", "auto").Output()
		if err != nil {
			t.Fatalf("framed_attach_peer.py: %v", err)
		}
		var got peerReport
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("framed_attach_peer.py printed %q: %v", out, err)
		}
		if got.FDsReceived != 2 || len(got.Attachments) != 2 || got.Attachments[0].FD == nil || *got.Attachments[1].FD != 1 ||
			got.Attachments[0].SHA256 != sum(facetest.SmallBytes) || got.Attachments[1].SHA256 != sum(facetest.ImageBytes) ||
			!slices.Equal(got.Attachments[1].Seals, []string{"grow", "seal", "shrink", "write"}) {
			t.Errorf("framed pair: %+v, want small as fd 0 and image as fd 1, sealed", got)
		}
		fc, err := client.DialFramed(ctx, r.cfg.Socket)
		if err != nil {
			t.Fatal(err)
		}
		res, err := fc.ExecuteRequest(ctx, &api.ExecuteRequest{Capability: facetest.BlobApp + ".image", Attachments: api.AttachmentsFD})
		if err != nil || len(res.Attachments) != 1 || !bytes.Equal(res.Attachments[0].Data, facetest.ImageBytes) {
			t.Errorf("framed Go client: %v", err)
		}
		fc.Close()
		waitFDs(t, r.Server, base)
	})
	waitFDs(t, r.Server, base)
}
