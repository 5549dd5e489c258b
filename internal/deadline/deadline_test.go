package deadline

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"testing/synctest"
	"time"
)

func TestReaderDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		r := NewReader(a, a, time.Minute, 10*time.Second)
		buf := make([]byte, 4)

		// Idle: a read with nothing coming times out after Idle.
		start := time.Now()
		r.Begin(false)
		if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) || r.InMessage() || time.Since(start) != time.Minute {
			t.Fatalf("idle read: %v after %v (in message %v), want a timeout at 1m, between messages", err, time.Since(start), r.InMessage())
		}

		// A message started must end within Message of its first byte,
		// however its bytes trickle in.
		r.Begin(false)
		go func() {
			b.Write([]byte("ab"))
			time.Sleep(6 * time.Second)
			b.Write([]byte("cd"))
		}()
		start = time.Now()
		io.ReadFull(r, buf[:2])
		io.ReadFull(r, buf[:2])
		if _, err := r.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) || !r.InMessage() || time.Since(start) != 10*time.Second {
			t.Fatalf("mid-message read: %v after %v (in message %v), want a timeout 10s after the first byte", err, time.Since(start), r.InMessage())
		}
	})
}

func TestBudget(t *testing.T) {
	b := NewBudget(100)
	if !b.Take(60) || b.Take(50) || !b.Take(40) || b.Used() != 100 {
		t.Fatalf("takes: used %d, want 60 and 40 granted, 50 refused", b.Used())
	}
	b.Release(60)
	if b.Used() != 40 || !b.Take(60) {
		t.Errorf("after release: used %d", b.Used())
	}
	var none *Budget
	if !none.Take(1 << 40) {
		t.Error("a nil budget refused")
	}
}
