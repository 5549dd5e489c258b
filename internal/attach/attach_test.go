package attach

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

func TestSealedMemfd(t *testing.T) {
	data := bytes.Repeat([]byte("pcp"), 1000)
	fd, err := SealedMemfd("image", data)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals != Seals {
		t.Fatalf("seals %#x, %v; want %#x", seals, err, Seals)
	}
	got := make([]byte, len(data)+1)
	n, _ := unix.Pread(fd, got, 0)
	if !bytes.Equal(got[:n], data) {
		t.Fatalf("read %d bytes, want the %d written", n, len(data))
	}
	if _, err := unix.Pwrite(fd, []byte("x"), 0); err == nil {
		t.Fatal("a sealed memfd took a write")
	}
	if link, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); link != "/memfd:pcp-attachment-image (deleted)" {
		t.Errorf("named %q", link)
	}
}

// TestPassLeavesNothingOpenOnError: a refusal past a bound, found after
// some memfds were made or before any, leaves no descriptor open.
func TestPassLeavesNothingOpenOnError(t *testing.T) {
	a, _ := testkit.SocketPair(t)
	before := testkit.OpenFDs(t)
	b := NewBudget(a, 0)
	many := make([]api.Attachment, api.MaxAttachments+1)
	if _, fds, err := Pass(b, many); err == nil || fds != nil {
		t.Fatalf("%d attachments: %v, %v", len(many), fds, err)
	}
	small := NewBudget(a, 10)
	_, fds, err := Pass(small, []api.Attachment{{Name: "a", Data: make([]byte, 6)}, {Name: "b", Data: make([]byte, 6)}})
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodeRateLimited || fds != nil {
		t.Fatalf("over the budget: %v, %v; want RATE_LIMITED", fds, err)
	}
	if after := testkit.OpenFDs(t); after != before {
		t.Fatalf("%d descriptors open after, %d before", after, before)
	}
	refs, fds, err := Pass(small, []api.Attachment{{Name: "a", MediaType: "x/y", Data: []byte("12345")}, {Name: "b", Data: nil}})
	if err != nil || len(fds) != 2 || *refs[0].FD != 0 || *refs[1].FD != 1 || refs[0].Size != 5 || refs[1].Size != 0 {
		t.Fatalf("within the budget: %+v %v %v", refs, fds, err)
	}
	CloseFDs(fds)
}

// TestBudgetRestartsOnceRead: the budget counts what the peer has not
// read and starts again once the socket's send queue is empty.
func TestBudgetRestartsOnceRead(t *testing.T) {
	a, b := testkit.SocketPair(t)
	bud := NewBudget(a, 100)
	if err := bud.Reserve(80); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Write([]byte("x")); err != nil { // unread by the peer
		t.Fatal(err)
	}
	if err := bud.Reserve(30); err == nil {
		t.Fatal("110 bytes unread taken under a bound of 100")
	}
	buf := make([]byte, 1)
	if _, err := b.Read(buf); err != nil {
		t.Fatal(err)
	}
	if err := bud.Reserve(30); err != nil {
		t.Fatalf("after the peer read everything: %v", err)
	}
}

func TestInlineBound(t *testing.T) {
	refs, err := Inline([]api.Attachment{{Name: "a", MediaType: "x/y", Data: []byte("hi")}, {Name: "e"}})
	if err != nil || string(refs[0].Data) != "hi" || refs[0].FD != nil || refs[1].Size != 0 {
		t.Fatalf("%+v %v", refs, err)
	}
	_, err = Inline([]api.Attachment{{Name: "big", Data: make([]byte, api.InlineAttachmentLimit+1)}})
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodeInvalidParams {
		t.Fatalf("over the inline limit: %v, want INVALID_PARAMS", err)
	}
}
