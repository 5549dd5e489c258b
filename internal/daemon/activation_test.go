package daemon

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/client"
)

func TestParseListenEnv(t *testing.T) {
	const self = 4242
	tests := []struct {
		fds, pid, names string
		want            []string
		err             string
	}{
		{"", "", "", nil, ""},
		{"0", "4242", "", nil, ""},
		{"2", "4242", "", []string{"", ""}, ""},
		{"2", "4242", "agent:control", []string{"agent", "control"}, ""},
		{"1", "4242", "pcpd.socket", []string{"pcpd.socket"}, ""},
		{"", "4242", "", nil, "LISTEN_PID or LISTEN_FDNAMES is set without LISTEN_FDS"},
		{"", "", "agent", nil, "LISTEN_PID or LISTEN_FDNAMES is set without LISTEN_FDS"},
		{"two", "4242", "", nil, `LISTEN_FDS="two" is not a count of descriptors (0 to 64)`},
		{"-1", "4242", "", nil, `LISTEN_FDS="-1" is not a count`},
		{"65", "4242", "", nil, `LISTEN_FDS="65" is not a count`},
		{"1", "", "", nil, "LISTEN_FDS is set without LISTEN_PID"},
		{"1", "x", "", nil, `LISTEN_PID="x" is not a process id`},
		{"1", "0", "", nil, `LISTEN_PID="0" is not a process id`},
		{"1", "1", "", nil, "LISTEN_PID=1 is not this process (pid 4242): the sockets were passed to another process"},
		{"0", "4242", "agent", nil, `LISTEN_FDNAMES="agent" names descriptors but LISTEN_FDS is 0`},
		{"2", "4242", "agent", nil, `LISTEN_FDNAMES="agent" names 1 descriptors, LISTEN_FDS passes 2`},
		{"2", "4242", "agent::", nil, `LISTEN_FDNAMES="agent::" names 3 descriptors`},
		{"2", "4242", "agent:", nil, `LISTEN_FDNAMES entry 2 (fd 4): name "" must be 1 to 255 characters`},
		{"1", "4242", "a b", nil, `LISTEN_FDNAMES entry 1 (fd 3): name "a b" holds a character that is not printable ASCII`},
		{"1", "4242", strings.Repeat("n", 256), nil, "must be 1 to 255 characters"},
	}
	for _, tt := range tests {
		got, err := parseListenEnv(tt.fds, tt.pid, tt.names, self)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), "socket activation: ") {
				t.Errorf("parseListenEnv(%q, %q, %q): error %v, want one containing %q", tt.fds, tt.pid, tt.names, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("parseListenEnv(%q, %q, %q): %v", tt.fds, tt.pid, tt.names, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("parseListenEnv(%q, %q, %q) (-want +got):\n%s", tt.fds, tt.pid, tt.names, diff)
		}
	}
}

// Whatever the variables hold, parseListenEnv gives one valid name (or
// none) per descriptor, within the bound, or an error.
func FuzzParseListenEnv(f *testing.F) {
	f.Add("2", "7", "agent:control")
	f.Add("1", "7", "")
	f.Add("", "7", "x")
	f.Add("64", "7", strings.Repeat("a:", 63)+"a")
	f.Add("3", "-7", "::")
	f.Fuzz(func(t *testing.T, fds, pid, names string) {
		got, err := parseListenEnv(fds, pid, names, 7)
		if err != nil {
			if got != nil {
				t.Fatalf("names %q beside error %v", got, err)
			}
			return
		}
		if len(got) > maxListenFDs {
			t.Fatalf("%d descriptors, over the bound %d", len(got), maxListenFDs)
		}
		if p, _ := strconv.Atoi(pid); len(got) > 0 && p != 7 {
			t.Fatalf("descriptors taken for LISTEN_PID=%q", pid)
		}
		for _, n := range got {
			if n != "" && checkFDName(n) != nil {
				t.Fatalf("invalid name %q accepted", n)
			}
			if names == "" && n != "" {
				t.Fatalf("name %q without LISTEN_FDNAMES", n)
			}
		}
	})
}

// fdOf duplicates the descriptor of a socket or file, as a manager passes
// one (the original stays with its owner).
func fdOf(t *testing.T, c syscall.Conn) int {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	var derr error
	raw.Control(func(f uintptr) { fd, derr = syscall.Dup(int(f)) })
	if derr != nil {
		t.Fatal(derr)
	}
	return fd
}

func shortDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pcpact")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// inherit takes only listening Unix stream sockets bound to a path, and
// says what each other descriptor is.
func TestInherit(t *testing.T) {
	dir := shortDir(t)
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, "l.sock"), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	a, err := inherit(fdOf(t, ul), "agent")
	if err != nil {
		t.Fatal(err)
	}
	if a.Path != filepath.Join(dir, "l.sock") || a.Name != "agent" {
		t.Errorf("inherit: path %q name %q, want %q agent", a.Path, a.Name, filepath.Join(dir, "l.sock"))
	}
	a.l.Close()
	if _, err := os.Lstat(a.Path); err != nil {
		t.Errorf("closing an inherited listener removed its file: %v", err)
	}

	gram, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "g.sock"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer gram.Close()
	conn, err := net.Dial("unix", filepath.Join(dir, "l.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	abstract, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@pcp-activation-test-" + filepath.Base(dir), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer abstract.Close()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, tt := range []struct {
		name string
		fd   int
		want string
	}{
		{"datagram", fdOf(t, gram), "not a stream socket"},
		{"connected", fdOf(t, conn.(*net.UnixConn)), "not listening"},
		{"tcp", fdOf(t, tcp.(*net.TCPListener)), "not a Unix socket"},
		{"abstract", fdOf(t, abstract), "not bound to a file path"},
		{"file", fdOf(t, f), "not a socket"},
	} {
		var before syscall.Stat_t
		if err := syscall.Fstat(tt.fd, &before); err != nil {
			t.Fatal(err)
		}
		_, err := inherit(tt.fd, "")
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: inherit: %v, want an error saying %q", tt.name, err, tt.want)
		}
		// The descriptor refused is closed (its number may have been
		// reused since, for another file).
		var st syscall.Stat_t
		if err := syscall.Fstat(tt.fd, &st); err == nil && st.Dev == before.Dev && st.Ino == before.Ino {
			t.Errorf("%s: fd %d still open after the refusal", tt.name, tt.fd)
		}
	}
}

// activated binds path as a service manager would and passes a copy.
func activated(t *testing.T, path, name string) *Activated {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	ul, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ul.SetUnlinkOnClose(false)
	t.Cleanup(func() { ul.Close() })
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	a, err := inherit(fdOf(t, ul), name)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A daemon given activated sockets serves them as its own, and leaves
// their files on Close; one open to other users, or matching none of its
// sockets, is refused.
func TestActivatedSockets(t *testing.T) {
	dir := shortDir(t)
	run := filepath.Join(dir, "run")
	cfg := Config{Socket: filepath.Join(run, "pcp.sock"), StateDir: filepath.Join(dir, "state"), TrustDir: filepath.Join(dir, "trust"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.Activated = []*Activated{activated(t, filepath.Join(run, "control.sock"), ""), activated(t, cfg.Socket, FDNameAgent)}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	for _, p := range []string{cfg.Socket, filepath.Join(run, "control.sock")} {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := client.Dial(dctx, p, client.Options{})
		if err != nil {
			dcancel()
			t.Fatal(err)
		}
		if _, err := c.Health(dctx); err != nil {
			t.Errorf("health.check on %s: %v", p, err)
		}
		c.Close()
		dcancel()
	}
	cancel()
	<-served
	for _, p := range []string{cfg.Socket, filepath.Join(run, "control.sock")} {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s after Close: %v, want the manager's file kept", p, err)
		}
	}
	// pcpd made the sockets not passed (mcp.sock) and removed them again.
	if _, err := os.Lstat(filepath.Join(run, "mcp.sock")); !os.IsNotExist(err) {
		t.Errorf("mcp.sock after Close: %v, want it removed", err)
	}

	open := cfg
	open.StateDir = filepath.Join(dir, "state2")
	a := activated(t, filepath.Join(dir, "run2", "pcp.sock"), "")
	open.Socket = a.Path
	if err := os.Chmod(a.Path, 0o666); err != nil {
		t.Fatal(err)
	}
	open.Activated = []*Activated{a}
	if _, err := New(open); err == nil || !strings.Contains(err.Error(), "is mode 0666: other users may connect (SocketMode=0600") {
		t.Errorf("New with a socket open to others: %v, want it refused", err)
	}

	stray := cfg
	stray.StateDir = filepath.Join(dir, "state3")
	stray.Socket = filepath.Join(dir, "run3", "pcp.sock")
	stray.Activated = []*Activated{activated(t, filepath.Join(dir, "run3", "other.sock"), "")}
	if _, err := New(stray); err == nil || !strings.Contains(err.Error(), "other.sock) matches none of pcpd's sockets") {
		t.Errorf("New with a socket of no role: %v, want it refused", err)
	}
}

// A process of another user that reaches an activated socket (its
// directory and file opened up on purpose, after the daemon took it) is
// refused by the same peer-credential check as on pcpd's own sockets.
func TestActivatedOtherUserRefused(t *testing.T) {
	if os.Getuid() != 0 {
		t.Fatal("this test switches users and must run as root (CI does)")
	}
	dir := shortDir(t)
	run := filepath.Join(dir, "run")
	cfg := Config{Socket: filepath.Join(run, "pcp.sock"), StateDir: filepath.Join(dir, "state"), TrustDir: filepath.Join(dir, "trust"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.Activated = []*Activated{activated(t, cfg.Socket, FDNameAgent)}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.Serve(ctx) }()
	defer func() { cancel(); <-served }()
	os.Chmod(dir, 0o755)
	os.Chmod(run, 0o755)
	os.Chmod(cfg.Socket, 0o777)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(run, "child")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "PCP_TEST_DIAL="+cfg.Socket)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v: %s", err, out)
	}
	if !strings.Contains(string(out), `"code":-32004`) || !strings.Contains(string(out), "uid 65534") {
		t.Errorf("other user got %q, want a PERMISSION_DENIED refusal naming uid 65534", out)
	}
}
