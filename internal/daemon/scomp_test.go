package daemon

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/testkit"
)

// debianPython is the interpreter python3-websockets installs for.
const debianPython = "/usr/bin/python3"

// TestScompPythonClient drives pcpd's scomp face with a client this
// project did not write, Python's websockets (Debian python3-websockets,
// which scripts/test installs), on both transports: --scomp on TCP with
// the token file, and scomp.sock. Each session does handshake, eval
// 1 + 1, an eval calling a capability of a live app, a batch and a
// binary frame.
func TestScompPythonClient(t *testing.T) {
	testkit.CheckGoroutines(t)
	if out, err := exec.Command(debianPython, "-c", "import websockets").CombinedOutput(); err != nil {
		t.Fatalf("Python's websockets is missing (apt-get install python3-websockets; scripts/test installs it): %v\n%s", err, out)
	}
	s := serve(t, Config{AllowUnsigned: true, Scomp: ScompConfig{Addr: "127.0.0.1:0"}})
	serveNotes(t, s.cfg.Socket)
	st, err := os.Stat(s.cfg.Scomp.TokenFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, %v; want mode 0600", st, err)
	}
	tok, _ := os.ReadFile(s.cfg.Scomp.TokenFile)
	script, _ := filepath.Abs("testdata/scomp/client.py")
	for _, args := range [][]string{
		{"tcp", "ws://" + s.ScompAddr() + "/", strings.TrimSpace(string(tok))},
		{"unix", s.cfg.Scomp.Socket},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, debianPython, append([]string{script}, args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", args[0], err, out.String())
		}
		if n := strings.Count(out.String(), "ok "); n < 6 {
			t.Fatalf("%s: %d checks passed, want 6 or more:\n%s", args[0], n, out.String())
		}
		t.Logf("%s:\n%s", args[0], out.String())
	}
}

// TestScompNodeClient drives pcpd's scomp face with Node's ws (npm, in
// testdata/scomp/node, installed by scripts/test with npm ci) on both
// transports, as TestScompPythonClient does, a foreign Origin refused
// on TCP, and an eval calling the client's binding mid-eval (reverse
// invoke), its ids colliding on purpose with the client's, a function
// reference the client invokes mid-eval and releases, one of the
// client's own the eval calls and releases, and nextEvent.
func TestScompNodeClient(t *testing.T) {
	testkit.CheckGoroutines(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node is missing (scripts/test installs nodejs): %v", err)
	}
	if _, err := os.Stat("testdata/scomp/node/node_modules/ws"); err != nil {
		t.Fatalf("the ws client is not installed: run npm ci in testdata/scomp/node (scripts/test does): %v", err)
	}
	s := serve(t, Config{AllowUnsigned: true, Scomp: ScompConfig{Addr: "127.0.0.1:0"}})
	serveNotes(t, s.cfg.Socket)
	tok, _ := os.ReadFile(s.cfg.Scomp.TokenFile)
	script, _ := filepath.Abs("testdata/scomp/node/client.mjs")
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"tcp", "ws://" + s.ScompAddr() + "/", strings.TrimSpace(string(tok))}, 12},
		{[]string{"unix", s.cfg.Scomp.Socket}, 10},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, node, append([]string{script}, c.args...)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", c.args[0], err, out.String())
		}
		if n := strings.Count(out.String(), "ok "); n != c.want {
			t.Fatalf("%s: %d checks passed, want %d:\n%s", c.args[0], n, c.want, out.String())
		}
	}
}
