package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// framedDaemon reads one request frame on c and answers it with replies,
// each frame with memfds of the given sizes passed beside it (sealed
// unless unsealed), then closes c.
type framedReply struct {
	f        frame.Frame
	sizes    []int
	unsealed bool
}

func framedDaemon(t testing.TB, replies []framedReply) *Framed {
	cc, sc := testkit.SocketPair(t)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer sc.Close()
		if _, err := frame.NewReader(sc, 1<<20).Next(); err != nil {
			return
		}
		for _, r := range replies {
			var fds []int
			for i, n := range r.sizes {
				fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
				if err != nil {
					return
				}
				unix.Ftruncate(fd, int64(n))
				if !r.unsealed || i > 0 {
					unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
				}
				fds = append(fds, fd)
			}
			err := frame.WriteFDs(sc, r.f, fds)
			closeFDs(fds)
			if err != nil {
				return
			}
		}
	}()
	fc := NewFramed(cc)
	t.Cleanup(func() { fc.Close(); <-done })
	return fc
}

func executeResponse(result string) frame.Frame {
	return frame.Frame{Type: frame.ExecuteResponse, Payload: []byte(`{"result":` + result + `}`)}
}

// TestFramedExecuteReadsMemfds: the framed client reads an
// ExecuteResponse's attachments from the memfds passed with it, closes
// those that came with other frames (a PushEvent before it), and refuses
// a descriptor that is missing or not sealed.
func TestFramedExecuteReadsMemfds(t *testing.T) {
	base := memfdsOpen(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	fc := framedDaemon(t, []framedReply{
		{f: frame.Frame{Type: frame.PushEvent, Payload: []byte(`{"subscription_id":"s","sequence":1,"event":{}}`)}, sizes: []int{3}},
		{f: executeResponse(`{"status":"success","attachments":[{"name":"b","media_type":"x/y","size":7,"fd":1},{"name":"a","media_type":"x/y","size":5,"fd":0},{"name":"c","media_type":"x/y","size":2,"data":"aGk="}]}`), sizes: []int{5, 7, 9}},
	})
	res, err := fc.ExecuteRequest(ctx, &api.ExecuteRequest{Capability: "x.y.z"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range res.Attachments {
		got = append(got, a.Name+":"+string(rune('0'+len(a.Data))))
	}
	if len(got) != 3 || got[0] != "b:7" || got[1] != "a:5" || got[2] != "c:2" || string(res.Attachments[2].Data) != "hi" {
		t.Fatalf("attachments %v", got)
	}
	if len(fc.Events()) != 1 {
		t.Error("the PushEvent was not kept")
	}
	fc.Close()
	if n := memfdsOpen(t); n != base {
		t.Fatalf("%d memfds open after, %d before", n, base)
	}

	for _, c := range []struct {
		name  string
		reply framedReply
		want  string
	}{
		{"missing", framedReply{f: executeResponse(`{"status":"success","attachments":[{"name":"a","media_type":"x/y","size":5,"fd":1}]}`), sizes: []int{5}}, "did not arrive"},
		{"unsealed", framedReply{f: executeResponse(`{"status":"success","attachments":[{"name":"a","media_type":"x/y","size":5,"fd":0}]}`), sizes: []int{5}, unsealed: true}, "not sealed"},
		{"wrong size", framedReply{f: executeResponse(`{"status":"success","attachments":[{"name":"a","media_type":"x/y","size":6,"fd":0}]}`), sizes: []int{5}}, "holds 5 bytes"},
	} {
		fc := framedDaemon(t, []framedReply{c.reply})
		_, err := fc.ExecuteRequest(ctx, &api.ExecuteRequest{Capability: "x.y.z"})
		var pe *api.Error
		if !errors.As(err, &pe) || pe.Code != api.CodeInternalError || !strings.Contains(pe.Message, c.want) {
			t.Errorf("%s: %v, want INTERNAL_ERROR %q", c.name, err, c.want)
		}
		fc.Close()
	}
	if n := memfdsOpen(t); n != base {
		t.Fatalf("%d memfds open after the refusals, %d before", n, base)
	}
}

// FuzzFramedExecute has a daemon answer an ExecuteRequest with
// arbitrary bytes, memfds passed at arbitrary points among them, and
// checks that the framed client never panics, that an ExecuteResponse
// it accepts has every attachment at its announced size, and that no
// descriptor is left open once it is closed.
func FuzzFramedExecute(f *testing.F) {
	ok := frame.Append(nil, executeResponse(`{"status":"success","attachments":[{"name":"a","media_type":"x/y","size":4,"fd":0}]}`))
	f.Add(ok, []byte{0}, uint8(4))
	f.Add(append(frame.Append(nil, frame.Frame{Type: frame.PushEvent, Payload: []byte(`{}`)}), ok...), []byte{0, 7}, uint8(4))
	f.Add(frame.Append(nil, executeResponse(`{"status":"success","attachments":[{"name":"a","size":4,"fd":3},{"name":"b","size":2,"data":"aGk="}]}`)), []byte{0, 0, 0}, uint8(4))
	f.Add(frame.Append(nil, frame.Frame{Type: frame.ErrorResponse, Payload: []byte(`{"code":500,"pcp_code":-32603,"message":"x"}`)}), []byte{0}, uint8(1))
	f.Add([]byte{byte(frame.ExecuteResponse), 0xff, 0xff, 0xff, 0xff}, []byte{0}, uint8(1))
	f.Fuzz(func(t *testing.T, stream, at []byte, size uint8) {
		base := memfdsOpen(t)
		cc, sc := testkit.SocketPair(t)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer sc.Close()
			if _, err := frame.NewReader(sc, 1<<20).Next(); err != nil {
				return
			}
			// Each byte of at is an offset (mod len+1) where one memfd
			// goes with the byte there; offsets in order.
			last := 0
			for i, a := range at {
				if i >= 8 {
					break
				}
				off := max(int(a)%(len(stream)+1), last)
				if off > last {
					if _, err := sc.Write(stream[last:off]); err != nil {
						return
					}
				}
				fd, err := sealedFD(int(size))
				if err != nil {
					return
				}
				if off < len(stream) {
					_, _, err = sc.WriteMsgUnix(stream[off:off+1], unix.UnixRights(fd), nil)
					off++
				} else {
					_, _, err = sc.WriteMsgUnix([]byte{0}, unix.UnixRights(fd), nil)
				}
				unix.Close(fd)
				if err != nil {
					return
				}
				last = off
			}
			if last < len(stream) {
				sc.Write(stream[last:])
			}
		}()
		fc := NewFramed(cc)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := fc.ExecuteRequest(ctx, &api.ExecuteRequest{Capability: "x.y.z"})
		cancel()
		if err == nil {
			var w struct{ Result wireResult }
			n, _ := frame.NewReader(bytes.NewReader(stream), 16<<20).Next()
			json.Unmarshal(n.Payload, &w)
			for i, a := range res.Attachments {
				if i < len(w.Result.Attachments) && int64(len(a.Data)) != w.Result.Attachments[i].Size {
					t.Fatalf("attachment %d: %d bytes, its size says %d", i, len(a.Data), w.Result.Attachments[i].Size)
				}
			}
		}
		fc.Close()
		<-done
		sc.Close()
		if n := memfdsOpen(t); n != base {
			t.Fatalf("%d memfds open after, %d before", n, base)
		}
	})
}

// sealedFD is a sealed memfd of n zero bytes.
func sealedFD(n int) (int, error) {
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, err
	}
	if err := unix.Ftruncate(fd, int64(n)); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
