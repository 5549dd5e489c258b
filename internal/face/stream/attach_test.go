package stream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/facetest"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

func sum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// attachBroker is a broker with blobService; runs counts its
// invocations.
func attachBroker(t testing.TB) (b *core.Broker, runs *atomic.Int64) {
	t.Helper()
	return attachBrokerRan(t, nil)
}

// attachBrokerRan is attachBroker with blobService telling ran of each
// invocation.
func attachBrokerRan(t testing.TB, ran chan struct{}) (b *core.Broker, runs *atomic.Int64) {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err = core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), LivenessInterval: -1, RateLimits: &core.RateLimits{}})
	if err != nil {
		t.Fatal(err)
	}
	runs = new(atomic.Int64)
	if err := b.AddService(facetest.BlobService{Runs: runs, Ran: ran}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close(); st.Close() })
	return b, runs
}

// serve serves server with the face until the test ends.
func serve(t testing.TB, s *Server, server net.Conn) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		s.ServeConn(server, facetest.Agent)
		close(done)
	}()
	t.Cleanup(func() { server.Close(); <-done })
}

// checkFDs fails the test if it ends with more descriptors open than it
// started with (registered before anything it opens, so it runs last).
func checkFDs(t *testing.T) {
	t.Helper()
	before := testkit.OpenFDs(t)
	t.Cleanup(func() {
		if after := testkit.OpenFDs(t); after != before {
			t.Errorf("%d descriptors open at the end, %d at the start", after, before)
		}
	})
}

func execReq(c string, mode string) *api.ExecuteRequest {
	return &api.ExecuteRequest{Capability: facetest.BlobApp + "." + c, Params: json.RawMessage(`{}`), Attachments: mode}
}

// TestGoFramedClientReceivesAttachments: the Go framed client, on a Unix
// socket pair, gets each result's attachments whole, passed as memfds by
// default and inline when it asks; neither side keeps a descriptor.
func TestGoFramedClientReceivesAttachments(t *testing.T) {
	checkFDs(t)
	testkit.CheckGoroutines(t)
	b, _ := attachBroker(t)
	cc, sc := testkit.SocketPair(t)
	serve(t, NewServer(b, Options{}), sc)
	fc := client.NewFramed(cc)
	defer fc.Close()
	ctx := context.Background()
	for _, c := range []struct {
		cap, mode string
		want      []api.Attachment
	}{
		{"image", "", []api.Attachment{{Name: "image", MediaType: "image/png", Data: facetest.ImageBytes}}},
		{"pair", api.AttachmentsFD, []api.Attachment{{Name: "small", MediaType: "text/plain", Data: facetest.SmallBytes}, {Name: "image", MediaType: "image/png", Data: facetest.ImageBytes}}},
		{"pair", api.AttachmentsInline, []api.Attachment{{Name: "small", MediaType: "text/plain", Data: facetest.SmallBytes}, {Name: "image", MediaType: "image/png", Data: facetest.ImageBytes}}},
		{"none", "", nil},
		{"huge", "", []api.Attachment{{Name: "raw", MediaType: "application/octet-stream", Data: facetest.HugeBytes}}},
	} {
		res, err := fc.ExecuteRequest(ctx, execReq(c.cap, c.mode))
		if err != nil {
			t.Fatalf("%s %q: %v", c.cap, c.mode, err)
		}
		if len(res.Attachments) != len(c.want) {
			t.Fatalf("%s %q: %d attachments, want %d", c.cap, c.mode, len(res.Attachments), len(c.want))
		}
		for i, a := range res.Attachments {
			w := c.want[i]
			if a.Name != w.Name || a.MediaType != w.MediaType || sum(a.Data) != sum(w.Data) {
				t.Errorf("%s %q: attachment %d is %s %s %d bytes, want %s %s %d bytes", c.cap, c.mode, i, a.Name, a.MediaType, len(a.Data), w.Name, w.MediaType, len(w.Data))
			}
		}
	}
	// The connection still serves plain requests after them.
	if _, err := fc.Ping(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestAttachmentsWireShape reads the ExecuteResponse frame raw: the
// descriptors come with the frame's tag byte alone, the payload
// describes them by index, and each is a sealed memfd of the right size.
func TestAttachmentsWireShape(t *testing.T) {
	checkFDs(t)
	b, _ := attachBroker(t)
	cc, sc := testkit.SocketPair(t)
	serve(t, NewServer(b, Options{}), sc)
	body, _ := json.Marshal(execReq("pair", ""))
	if err := frame.Write(cc, frame.Frame{Type: frame.ExecuteRequest, Payload: body}); err != nil {
		t.Fatal(err)
	}
	cc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*frame.MaxFDsPerFrame))
	n, oobn, flags, _, err := cc.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	fds := unixsock.ParseRights(oob[:oobn])
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if n != 1 || buf[0] != byte(frame.ExecuteResponse) || len(fds) != 2 || flags&unix.MSG_CTRUNC != 0 {
		t.Fatalf("first read: %d bytes (% x), %d descriptors, flags %#x; want the tag 04 alone with 2", n, buf[:n], len(fds), flags)
	}
	rest := make([]byte, frame.HeaderLen-1)
	if _, err := io.ReadFull(cc, rest); err != nil {
		t.Fatal(err)
	}
	length := int(rest[0])<<24 | int(rest[1])<<16 | int(rest[2])<<8 | int(rest[3])
	payload := make([]byte, length)
	if _, err := io.ReadFull(cc, payload); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf(`{"result":{"status":"success","data":{"attachments":2},"attachments":[{"name":"small","media_type":"text/plain","size":%d,"fd":0},{"name":"image","media_type":"image/png","size":%d,"fd":1}]}}`, len(facetest.SmallBytes), len(facetest.ImageBytes))
	if string(payload) != want {
		t.Fatalf("payload\n%s\nwant\n%s", payload, want)
	}
	for i, size := range []int{len(facetest.SmallBytes), len(facetest.ImageBytes)} {
		var st unix.Stat_t
		if err := unix.Fstat(fds[i], &st); err != nil {
			t.Fatal(err)
		}
		seals, err := unix.FcntlInt(uintptr(fds[i]), unix.F_GET_SEALS, 0)
		if err != nil {
			t.Fatal(err)
		}
		want := unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE | unix.F_SEAL_SEAL
		if st.Size != int64(size) || seals != want {
			t.Errorf("descriptor %d: %d bytes, seals %#x; want %d, %#x", i, st.Size, seals, size, want)
		}
		link, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fds[i]))
		if !strings.HasPrefix(link, "/memfd:pcp-attachment-") {
			t.Errorf("descriptor %d is %s, want a memfd named pcp-attachment-NAME", i, link)
		}
	}
}

// TestAttachmentsRefusals: the mode is checked before anything runs; the
// bounds answer with their codes after.
func TestAttachmentsRefusals(t *testing.T) {
	checkFDs(t)
	b, runs := attachBroker(t)
	cc, sc := testkit.SocketPair(t)
	serve(t, NewServer(b, Options{}), sc)
	fc := client.NewFramed(cc)
	defer fc.Close()
	pc, ps := net.Pipe() // no descriptors pass on it
	serve(t, NewServer(b, Options{}), ps)
	pipe := client.NewFramed(pc)
	defer pipe.Close()
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		fc       *client.Framed
		req      *api.ExecuteRequest
		code     api.Code
		data     map[string]any
		runsMore int64
	}{
		{"unknown mode", fc, execReq("image", "base64"), api.CodeInvalidParams, map[string]any{"field": "attachments"}, 0},
		{"fd where none can pass", pipe, execReq("image", api.AttachmentsFD), api.CodeInvalidParams, map[string]any{"field": "attachments"}, 0},
		{"over the inline limit", fc, execReq("huge", api.AttachmentsInline), api.CodeInvalidParams,
			map[string]any{"field": "attachments", "limit": float64(api.InlineAttachmentLimit), "size": float64(len(facetest.HugeBytes))}, 1},
		{"over the inline limit where none can pass", pipe, execReq("huge", ""), api.CodeInvalidParams,
			map[string]any{"field": "attachments", "limit": float64(api.InlineAttachmentLimit), "size": float64(len(facetest.HugeBytes))}, 1},
		{"too many", fc, execReq("many", ""), api.CodeInternalError, map[string]any{"limit": float64(api.MaxAttachments), "count": float64(api.MaxAttachments + 1)}, 1},
	} {
		before := runs.Load()
		_, err := c.fc.ExecuteRequest(ctx, c.req)
		var fe *client.FrameError
		if !errors.As(err, &fe) || fe.Err.Code != c.code {
			t.Fatalf("%s: %v, want %s", c.name, err, c.code.Name())
		}
		got := map[string]any{}
		if m, ok := fe.Err.Data.(map[string]any); ok {
			for k := range c.data {
				got[k] = m[k]
			}
		}
		if diff := cmp.Diff(c.data, got); diff != "" {
			t.Errorf("%s: data (-want +got):\n%s", c.name, diff)
		}
		if n := runs.Load() - before; n != c.runsMore {
			t.Errorf("%s: the capability ran %d times, want %d", c.name, n, c.runsMore)
		}
	}
	// Auto where none can pass: inline.
	res, err := pipe.ExecuteRequest(ctx, execReq("image", ""))
	if err != nil || len(res.Attachments) != 1 || sum(res.Attachments[0].Data) != sum(facetest.ImageBytes) {
		t.Fatalf("auto on a pipe: %v, %+v", err, res)
	}
}

// plainConn hides a Unix socket's recvmsg, so a client reads it with
// read as one that knows nothing of descriptors would.
type plainConn struct{ net.Conn }

// TestClientWithoutRecvmsgLosesDescriptors: a client reading with plain
// read gets the frame and no descriptor (the kernel closes them), which
// the Go client reports as an INTERNAL_ERROR naming the attachment; the
// next request on the connection is served.
func TestClientWithoutRecvmsgLosesDescriptors(t *testing.T) {
	checkFDs(t)
	b, _ := attachBroker(t)
	cc, sc := testkit.SocketPair(t)
	serve(t, NewServer(b, Options{}), sc)
	fc := client.NewFramed(plainConn{cc})
	defer fc.Close()
	ctx := context.Background()
	_, err := fc.ExecuteRequest(ctx, execReq("image", ""))
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodeInternalError || !strings.Contains(pe.Message, "did not arrive") {
		t.Fatalf("ExecuteRequest read without recvmsg: %v, want INTERNAL_ERROR: descriptor did not arrive", err)
	}
	res, err := fc.ExecuteRequest(ctx, execReq("image", api.AttachmentsInline))
	if err != nil || sum(res.Attachments[0].Data) != sum(facetest.ImageBytes) {
		t.Fatalf("inline after: %v", err)
	}
}

// TestPeerThatDoesNotReadIsBounded: a peer that sends requests and
// reads nothing has at most MaxUnreadAttachments of memfds in flight;
// past it, RATE_LIMITED (scope attachment_memory). Once it has read
// everything, attachments pass again. Descriptors sent to the daemon
// are discarded by the kernel.
func TestPeerThatDoesNotReadIsBounded(t *testing.T) {
	checkFDs(t)
	ran := make(chan struct{}, 16)
	b, _ := attachBrokerRan(t, ran)
	cc, sc := testkit.SocketPair(t)
	serve(t, NewServer(b, Options{MaxUnreadAttachments: 10 << 20}), sc)
	body, _ := json.Marshal(execReq("image", ""))
	// A descriptor sent to the daemon with the requests.
	probe, err := unix.MemfdCreate("probe", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	for i := range n {
		fr := frame.Frame{Type: frame.ExecuteRequest, Payload: body}
		if i == 0 {
			err = frame.WriteFDs(cc, fr, []int{probe})
		} else {
			err = frame.Write(cc, fr)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	unix.Close(probe)
	// One more request, without attachments: the face serves requests in
	// order, so once it runs every earlier reply has been written, and the
	// peer has read nothing.
	last, _ := json.Marshal(execReq("none", ""))
	if err := frame.Write(cc, frame.Frame{Type: frame.ExecuteRequest, Payload: last}); err != nil {
		t.Fatal(err)
	}
	for i := range n + 1 {
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d requests ran", i, n+1)
		}
	}
	r := frame.NewFDReader(cc, 1<<20)
	defer r.Close()
	var got []string
	for range n + 1 {
		cc.SetReadDeadline(time.Now().Add(10 * time.Second))
		f, fds, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		for _, fd := range fds {
			unix.Close(fd)
		}
		s := f.Type.String()
		if f.Type == frame.ErrorResponse {
			var e api.ErrorResponse
			json.Unmarshal(f.Payload, &e)
			scope, _ := e.Data.(map[string]any)["scope"].(string)
			s += " " + e.Name + " " + scope
		} else {
			s += fmt.Sprintf(" %d", len(fds))
		}
		got = append(got, s)
	}
	// 3 MB each: three fit under 10 MiB, the others are refused.
	want := []string{"ExecuteResponse 1", "ExecuteResponse 1", "ExecuteResponse 1",
		"ErrorResponse RATE_LIMITED attachment_memory", "ErrorResponse RATE_LIMITED attachment_memory", "ErrorResponse RATE_LIMITED attachment_memory",
		"ExecuteResponse 0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("replies (-want +got):\n%s", diff)
	}
	// Everything read: the next passes.
	fc := client.NewFramed(cc)
	if _, err := fc.ExecuteRequest(context.Background(), execReq("image", "")); err != nil {
		t.Fatalf("after reading everything: %v", err)
	}
}

// peerReport is what testdata/framed_attach_peer.py prints.
type peerReport struct {
	Tag         int                `json:"tag"`
	FDs         int                `json:"fds_received"`
	Status      string             `json:"status"`
	Error       *api.ErrorResponse `json:"error"`
	Attachments []peerAttachment   `json:"attachments"`
}

type peerAttachment struct {
	Name      string   `json:"name"`
	MediaType string   `json:"media_type"`
	Size      int      `json:"size"`
	FD        *int     `json:"fd"`
	Regular   bool     `json:"regular_file"`
	FileSize  int      `json:"file_size"`
	Seals     []string `json:"seals"`
	Writable  bool     `json:"writable"`
	Inline    bool     `json:"inline"`
	Read      int      `json:"read"`
	SHA256    string   `json:"sha256"`
}

// TestPythonPeerReadsAttachments: a client in another process, written
// apart from PCP's (Python's socket.recvmsg), receives the memfds with
// the ExecuteResponse frame on a real Unix socket and reads the images
// from them; asked for inline, it gets base64.
func TestPythonPeerReadsAttachments(t *testing.T) {
	checkFDs(t)
	testkit.CheckGoroutines(t)
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Fatalf("python3 is needed for this test (Debian: apt-get install python3): %v", err)
	}
	b, _ := attachBroker(t)
	sock := filepath.Join(t.TempDir(), "pcp.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(b, Options{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() { defer wg.Done(); defer c.Close(); srv.ServeConn(c, facetest.Agent) }()
		}
	}()
	defer func() { ln.Close(); wg.Wait() }()
	run := func(capability, mode string) peerReport {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, python, filepath.Join("testdata", "framed_attach_peer.py"), sock, facetest.BlobApp+"."+capability, mode).Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("framed_attach_peer.py %s %s: %v\n%s", capability, mode, err, ee.Stderr)
			}
			t.Fatal(err)
		}
		var r peerReport
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("framed_attach_peer.py printed %q: %v", out, err)
		}
		return r
	}
	fd := func(i int) *int { return &i }
	sealed := []string{"grow", "seal", "shrink", "write"}
	passed := func(name, mt string, data []byte, i int) peerAttachment {
		return peerAttachment{Name: name, MediaType: mt, Size: len(data), FD: fd(i), Regular: true, FileSize: len(data), Seals: sealed, Read: len(data), SHA256: sum(data)}
	}
	inline := func(name, mt string, data []byte) peerAttachment {
		return peerAttachment{Name: name, MediaType: mt, Size: len(data), Inline: true, Read: len(data), SHA256: sum(data)}
	}
	for _, c := range []struct {
		cap, mode string
		want      peerReport
	}{
		{"image", "auto", peerReport{Tag: 4, FDs: 1, Status: "success", Attachments: []peerAttachment{passed("image", "image/png", facetest.ImageBytes, 0)}}},
		{"pair", "fd", peerReport{Tag: 4, FDs: 2, Status: "success", Attachments: []peerAttachment{passed("small", "text/plain", facetest.SmallBytes, 0), passed("image", "image/png", facetest.ImageBytes, 1)}}},
		{"pair", "inline", peerReport{Tag: 4, FDs: 0, Status: "success", Attachments: []peerAttachment{inline("small", "text/plain", facetest.SmallBytes), inline("image", "image/png", facetest.ImageBytes)}}},
		{"huge", "auto", peerReport{Tag: 4, FDs: 1, Status: "success", Attachments: []peerAttachment{passed("raw", "application/octet-stream", facetest.HugeBytes, 0)}}},
	} {
		if diff := cmp.Diff(c.want, run(c.cap, c.mode)); diff != "" {
			t.Errorf("%s %s (-want +got):\n%s", c.cap, c.mode, diff)
		}
	}
	r := run("huge", "inline")
	if r.Tag != 17 || r.Error == nil || r.Error.Name != "INVALID_PARAMS" || r.FDs != 0 {
		t.Errorf("huge inline: %+v, want ErrorResponse INVALID_PARAMS", r)
	}
}
