package sdk

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// A per-app socket served by another user is refused before anything is
// read from or written to it: that user would see every invocation and
// forge the results.
func TestCheckServerRefusesAnotherUser(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test switches users and must run as root (CI does)")
	}
	// Not t.TempDir: the listener's user must reach it.
	dir, err := os.MkdirTemp("", "pcp-sdk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "org.example.app.sock")
	// A listener of uid 65534 (nobody), in a process of its own.
	py := `import socket,sys,os
s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); os.chmod(sys.argv[1],0o777); s.listen(1)
print("ready",flush=True)
c,_=s.accept(); sys.stdin.read()`
	cmd := exec.Command("/usr/bin/python3", "-c", py, sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("impostor did not start: %q, %v", line, err)
	}
	nc, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := checkServer(nc, sock); err == nil || !strings.Contains(err.Error(), "served by uid 65534") {
		t.Errorf("checkServer of another user's socket: %v, want a refusal naming uid 65534", err)
	}

	// Our own listener passes.
	own := filepath.Join(dir, "own.sock")
	l, err := net.Listen("unix", own)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Close()
		}
	}()
	oc, err := net.Dial("unix", own)
	if err != nil {
		t.Fatal(err)
	}
	defer oc.Close()
	if err := checkServer(oc, own); err != nil {
		t.Errorf("checkServer of our own socket: %v", err)
	}
}
