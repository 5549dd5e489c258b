package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// memfd returns a memfd holding data, sealed when sealed is set.
func memfd(t testing.TB, data []byte, sealed bool) int {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, data, 0); err != nil && len(data) > 0 {
		t.Fatal(err)
	}
	if sealed {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE|unix.F_SEAL_SEAL); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

// memfdsOpen counts this process's open memfds.
func memfdsOpen(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); strings.HasPrefix(target, "/memfd:") {
			n++
		}
	}
	return n
}

// fakeDaemon answers each request read on c with the next of replies,
// under the request's id: the reply's JSON result (with %s for the id)
// and the descriptors to pass with its first byte. Extra lines, sent
// before the reply, carry descriptors nobody asked for.
type fakeReply struct {
	extra  []string
	result string
	fds    []int
}

func fakeDaemon(t *testing.T, c *net.UnixConn, replies []fakeReply) {
	r := bufio.NewReader(c)
	send := func(line string, fds []int) {
		b := []byte(line + "\n")
		if len(fds) > 0 {
			_, _, err := c.WriteMsgUnix(b[:1], syscall.UnixRights(fds...), nil)
			for _, fd := range fds {
				unix.Close(fd)
			}
			if err != nil {
				t.Error(err)
				return
			}
			b = b[1:]
		}
		c.Write(b)
	}
	for _, rep := range replies {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		var req struct {
			ID     json.RawMessage
			Method string
		}
		json.Unmarshal([]byte(line), &req)
		for req.Method == "" { // the client's answer to a request of ours
			if line, err = r.ReadString('\n'); err != nil {
				return
			}
			json.Unmarshal([]byte(line), &req)
		}
		for _, x := range rep.extra {
			send(x, []int{memfd(t, []byte("unasked"), true)})
		}
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, req.ID, rep.result), rep.fds)
	}
}

func TestInvokeCapabilityReadsAttachmentsAndClosesEveryDescriptor(t *testing.T) {
	png := bytes.Repeat([]byte("PNG!"), 100_000)
	before := memfdsOpen(t)
	sc, cc := testkit.SocketPair(t)
	replies := []fakeReply{
		{result: `{"status":"success","data":{"w":1},"attachments":[{"name":"image","media_type":"image/png","size":400000,"fd":0}]}`,
			fds: []int{memfd(t, png, true)}},
		// Unasked descriptors on a notification, a request, another
		// id's response, then two for a reply that names one.
		{extra: []string{`{"jsonrpc":"2.0","method":"surface.created","params":{}}`, `{"jsonrpc":"2.0","id":"x","method":"nope"}`, `{"jsonrpc":"2.0","id":12345,"result":{}}`},
			result: `{"status":"success","attachments":[{"name":"a","media_type":"text/plain","size":3,"fd":1}]}`,
			fds:    []int{memfd(t, []byte("one"), true), memfd(t, []byte("two"), true)}},
		{result: `{"status":"success","attachments":[{"name":"a","media_type":"text/plain","size":2,"data":"aGk="}]}`},
		{result: `{"status":"success","attachments":[{"name":"a","media_type":"text/plain","size":3,"fd":1}]}`, fds: []int{memfd(t, []byte("abc"), true)}},
		{result: `{"status":"success","attachments":[{"name":"a","media_type":"text/plain","size":3,"fd":0}]}`, fds: []int{memfd(t, []byte("abc"), false)}},
		{result: `{"status":"success","attachments":[{"name":"a","media_type":"text/plain","size":4,"fd":0}]}`, fds: []int{memfd(t, []byte("abc"), true)}},
		{result: `{"status":"success","attachments":[{"name":"a","media_type":"text/plain","size":-1,"fd":0}]}`, fds: []int{memfd(t, []byte("abc"), true)}},
		{result: `{"status":"success","attachments":[{"name":"a","media_type":"text/plain","size":3,"data":"aGk="}]}`},
	}
	go fakeDaemon(t, sc, replies)
	cl := New(cc, Options{})
	ctx := context.Background()
	invoke := func() (*api.CapabilityResult, error) {
		return cl.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "org.example.x.y", AppID: "org.example.x"})
	}
	res, err := invoke()
	if err != nil || len(res.Attachments) != 1 || !bytes.Equal(res.Attachments[0].Data, png) || res.Attachments[0].MediaType != "image/png" || string(res.Data) != `{"w":1}` {
		t.Fatalf("image by fd: %+v, %v", res, err)
	}
	res, err = invoke()
	if err != nil || string(res.Attachments[0].Data) != "two" {
		t.Fatalf("fd 1 of two: %+v, %v; want two", res, err)
	}
	res, err = invoke()
	if err != nil || string(res.Attachments[0].Data) != "hi" {
		t.Fatalf("inline: %+v, %v", res, err)
	}
	for _, want := range []string{"did not arrive", "not sealed", "holds 3 bytes", "outside", "2 bytes inline"} {
		_, err := invoke()
		if !errors.Is(err, api.ErrInternal) || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want INTERNAL_ERROR saying %q", err, want)
		}
	}
	cl.Close()
	<-cl.Done()
	if n := memfdsOpen(t); n != before {
		t.Errorf("%d memfds open after the calls, want %d", n, before)
	}
}

// FuzzDecodeResult decodes invoke.capability results with up to four
// descriptors beside them: it never panics, and what it returns is whole.
func FuzzDecodeResult(f *testing.F) {
	f.Add([]byte(`{"status":"success","attachments":[{"name":"image","media_type":"image/png","size":5,"fd":0}]}`), uint8(1), uint8(5))
	f.Add([]byte(`{"status":"success","attachments":[{"name":"a","size":5,"fd":3},{"name":"b","size":2,"data":"aGk="}]}`), uint8(4), uint8(5))
	f.Add([]byte(`{"status":"success","attachments":[{"name":"a","size":9999999999,"fd":0}]}`), uint8(1), uint8(0))
	f.Add([]byte(`{"status":"partial","data":{"x":1}}`), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, raw []byte, nfds, size uint8) {
		fds := make([]int, nfds%5)
		for i := range fds {
			fds[i] = memfd(t, bytes.Repeat([]byte{byte(i)}, int(size)), i%2 == 0)
		}
		defer closeFDs(fds)
		res, err := decodeResult(raw, fds)
		if err != nil {
			return
		}
		var w wireResult
		if err := json.Unmarshal(raw, &w); err != nil {
			t.Fatalf("decoded %q, which does not unmarshal: %v", raw, err)
		}
		if len(res.Attachments) != len(w.Attachments) {
			t.Fatalf("%d attachments, want %d", len(res.Attachments), len(w.Attachments))
		}
		for i, a := range res.Attachments {
			if int64(len(a.Data)) != w.Attachments[i].Size {
				t.Fatalf("attachment %d: %d bytes, its size says %d", i, len(a.Data), w.Attachments[i].Size)
			}
		}
	})
}
