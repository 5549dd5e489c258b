package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
)

// crashEnv names the database file the crash child appends to; the test
// binary is the child when it is set.
const crashEnv = "PCP_STORE_CRASH_CHILD_DB"

// TestMain runs the crash child instead of the tests when crashEnv is
// set: the child is no test of its own, so a run of the package skips
// nothing.
func TestMain(m *testing.M) {
	if path := os.Getenv(crashEnv); path != "" {
		crashChild(path)
	}
	os.Exit(m.Run())
}

// crashChild is the process TestCrash kills. It appends from several
// goroutines and prints "ack SEQ HASH" once AppendAudit has returned, that
// is, once the entry is committed. It never returns.
func crashChild(path string) {
	s, err := Open(context.Background(), path)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var mu sync.Mutex // serialises acknowledgements on stdout
	for w := range 8 {
		go func() {
			for i := 0; ; i++ {
				e, err := s.AppendAudit(context.Background(), record(w*1_000_000+i))
				if err != nil {
					fmt.Fprintln(os.Stderr, err)
					os.Exit(2)
				}
				s.AppendEvent(api.Event{Sequence: e.Seq, Type: api.EventCapabilityInvoked})
				mu.Lock()
				fmt.Fprintf(os.Stdout, "ack %d %s\n", e.Seq, e.Hash)
				mu.Unlock()
			}
		}()
	}
	// The parent kills this process long before; the limit only stops an
	// orphan.
	time.Sleep(time.Minute)
	os.Exit(3)
}

// TestCrash kills a process that is appending (SIGKILL, no chance to
// flush) and checks that every entry it acknowledged survived, with the
// hash it was acknowledged with, and that the chain verifies and goes on.
func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a child process")
	}
	path := filepath.Join(t.TempDir(), "pcp.db")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashEnv+"="+path)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[int64]string{}
	sc := bufio.NewScanner(out)
	killed := false
	for sc.Scan() {
		var seq int64
		var hash string
		if _, err := fmt.Sscanf(sc.Text(), "ack %d %s", &seq, &hash); err != nil {
			continue // test framework output
		}
		acked[seq] = hash
		if len(acked) == 500 && !killed {
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = true
		}
	}
	// Lines already in the pipe when the kill landed are acknowledgements
	// too; the scanner has read them all by now.
	err = cmd.Wait()
	if !killed {
		t.Fatalf("child exited before it was killed: %v", err)
	}
	t.Logf("child killed after %d acknowledged entries", len(acked))

	res, err := VerifyFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK || res.Entries < int64(len(acked)) {
		t.Fatalf("VerifyFile after the crash = %+v; want ok with at least %d entries", res, len(acked))
	}

	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, err := s.AuditTail(context.Background(), int(res.Entries))
	if err != nil {
		t.Fatal(err)
	}
	stored := make(map[int64]string, len(all))
	for _, e := range all {
		stored[e.Seq] = e.Hash
	}
	var missing []string
	for seq, hash := range acked {
		if stored[seq] != hash {
			missing = append(missing, fmt.Sprintf("%d (acknowledged %s, stored %q)", seq, hash, stored[seq]))
		}
	}
	if len(missing) > 0 {
		t.Errorf("%d acknowledged entries lost or changed: %s", len(missing), strings.Join(missing, ", "))
	}

	e, err := s.AppendAudit(context.Background(), record(0))
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != res.Entries+1 || e.PrevHash != res.Head {
		t.Errorf("entry after the crash: seq %d prev_hash %s; want seq %d prev_hash %s", e.Seq, e.PrevHash, res.Entries+1, res.Head)
	}
	if res, err := s.VerifyAudit(context.Background()); err != nil || !res.OK {
		t.Errorf("VerifyAudit after the crash = %+v, %v", res, err)
	}
}
