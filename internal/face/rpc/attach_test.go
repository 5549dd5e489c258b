package rpc

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/facetest"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// imageService returns one 3 MB attachment.
type imageService struct{ data []byte }

func (imageService) AppID() string { return "pcp.test.image" }

func (imageService) Manifest() *api.Manifest {
	return &api.Manifest{Version: "1.0", Publisher: "pcpd", Description: "An image.",
		Capabilities: []api.CapabilityDecl{{Name: "get", Tier: 1, TrustLevel: api.TrustAuto, Description: "The image."}}}
}

func (s imageService) Invoke(context.Context, *api.Capability, api.InvocationSource, json.RawMessage) (*api.CapabilityResult, error) {
	return &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"image":"attachment"}`),
		Attachments: []api.Attachment{{Name: "image", MediaType: "image/png", Data: s.data}}}, nil
}

// attachEnv serves one socket pair with the face over a broker that has
// imageService; the test speaks on the client end, raw.
func attachEnv(t *testing.T, opts Options) (c *net.UnixConn, data []byte) {
	t.Helper()
	testkit.CheckGoroutines(t)
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), LivenessInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	data = bytes.Repeat([]byte("0123456789"), imageSize/10)
	if err := b.AddService(imageService{data}); err != nil {
		t.Fatal(err)
	}
	client, server := testkit.SocketPair(t)
	done := make(chan struct{})
	go func() {
		NewServer(b, opts).ServeConn(server, facetest.Agent)
		close(done)
	}()
	t.Cleanup(func() {
		client.Close()
		<-done
		b.Close()
		st.Close()
	})
	return client, data
}

const imageSize = 3_000_000

const invokeImage = `{"jsonrpc":"2.0","id":%ID%,"method":"invoke.capability","params":{"capability_id":"pcp.test.image.get","app_id":"pcp.test.image","source":"SystemIntelligence"%MORE%}}`

func request(id, more string) string {
	return strings.NewReplacer("%ID%", id, "%MORE%", more).Replace(invokeImage)
}

// readLines reads n lines with recvmsg and returns them with the
// descriptors that came with them, all of which it closes.
func readLines(t *testing.T, c *net.UnixConn, n int) (lines []string, fds int) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var buf []byte
	oob := make([]byte, syscall.CmsgSpace(4*32))
	for bytes.Count(buf, []byte{'\n'}) < n {
		p := make([]byte, 1<<20)
		m, oobn, _, _, err := c.ReadMsgUnix(p, oob)
		if err != nil {
			t.Fatalf("reading: %v", err)
		}
		if oobn > 0 {
			msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
			for i := range msgs {
				got, _ := syscall.ParseUnixRights(&msgs[i])
				fds += len(got)
				for _, fd := range got {
					syscall.Close(fd)
				}
			}
		}
		buf = append(buf, p[:m]...)
	}
	return strings.Split(strings.TrimSuffix(string(buf), "\n"), "\n"), fds
}

func TestBatchGetsAttachmentsInline(t *testing.T) {
	c, data := attachEnv(t, Options{})
	c.Write([]byte("[" + request("1", "") + "]\n"))
	lines, fds := readLines(t, c, 1)
	var replies []struct {
		Result struct {
			Attachments []api.AttachmentRef `json:"attachments"`
		} `json:"result"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &replies); err != nil || len(replies) != 1 || fds != 0 {
		t.Fatalf("batch reply %.200s (%d descriptors): %v", lines[0], fds, err)
	}
	if a := replies[0].Result.Attachments; len(a) != 1 || a[0].FD != nil || !bytes.Equal(a[0].Data, data) {
		t.Errorf("attachments in a batch: want the image inline")
	}
	if want := `"data":"` + base64.StdEncoding.EncodeToString(data[:30]); !strings.Contains(lines[0], want) {
		t.Errorf("inline data is not base64 of the bytes")
	}
	c.Write([]byte("[" + request("2", `,"attachments":"fd"`) + "]\n"))
	lines, _ = readLines(t, c, 1)
	if !strings.Contains(lines[0], `"code":-32602`) || !strings.Contains(lines[0], `"field":"attachments"`) {
		t.Errorf("fd in a batch: %s, want INVALID_PARAMS on attachments", lines[0])
	}
}

// waitQueued waits until more than n bytes wait in c's receive queue
// (SIOCINQ), reading none. An edge-triggered epoll on the socket reports
// each arrival even while earlier bytes sit unread, so it checks the
// queue again on each, never on a timer.
func waitQueued(t *testing.T, c *net.UnixConn, n int) {
	t.Helper()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ep)
	var sock int
	rc.Control(func(fd uintptr) { sock = int(fd) })
	// Armed before the first look: no arrival between the look and the
	// wait goes unseen.
	if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, sock, &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(sock)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	events := make([]unix.EpollEvent, 1)
	for {
		var queued int
		rc.Control(func(fd uintptr) { queued, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) })
		if queued > n {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("%d bytes queued after 10s, want more than %d", queued, n)
		}
		if _, err := unix.EpollWait(ep, events, int(left/time.Millisecond)+1); err != nil && err != unix.EINTR {
			t.Fatal(err)
		}
	}
}

func TestUnreadAttachmentsAreBounded(t *testing.T) {
	c, _ := attachEnv(t, Options{MaxUnreadAttachments: imageSize + 1000})
	first := `{"jsonrpc":"2.0","id":1,"result":{"status":"success","data":{"image":"attachment"},"attachments":[{"name":"image","media_type":"image/png","size":3000000,"fd":0}]}}` + "\n"
	c.Write([]byte(request("1", "") + "\n"))
	waitQueued(t, c, 0) // the first reply, and its memfd, sit unread
	c.Write([]byte(request("2", "") + "\n"))
	waitQueued(t, c, len(first)) // and so does the second
	lines, fds := readLines(t, c, 2)
	if fds != 1 || !strings.Contains(lines[0], `"fd":0`) {
		t.Errorf("first reply %.200s with %d descriptors, want the image by fd", lines[0], fds)
	}
	if !strings.Contains(lines[1], `"code":-32018`) || !strings.Contains(lines[1], `"scope":"attachment_memory"`) {
		t.Errorf("second reply %s, want RATE_LIMITED on attachment_memory", lines[1])
	}
	// Everything read: the count starts again.
	c.Write([]byte(request("3", "") + "\n"))
	lines, fds = readLines(t, c, 1)
	if fds != 1 || !strings.Contains(lines[0], `"fd":0`) {
		t.Errorf("third reply %.200s with %d descriptors, want the image by fd", lines[0], fds)
	}
}
