package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/testkit"
)

// Child processes of this test binary for the tests that need another
// process: PCP_TEST_CHILD names the role, PCP_TEST_DIR its directory. A
// child prints "ready" when it serves and stops when its standard input
// reaches EOF.
const (
	testChildEnv = "PCP_TEST_CHILD"
	testDirEnv   = "PCP_TEST_DIR"
	testNofile   = "PCP_TEST_NOFILE"
	// testEatFDs, set to N, makes the nofile child take every free
	// descriptor but N once it serves, as if something other than
	// connections had used them up.
	testEatFDs = "PCP_TEST_EAT_FDS"
)

// eaten holds the descriptors the nofile child took, so that the
// collector does not close them.
var eaten []*os.File

// eatDescriptors opens /dev/null until descriptors run out, then gives
// back the last leave of them.
func eatDescriptors(leave int) {
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		eaten = append(eaten, f)
	}
	for range min(leave, len(eaten)) {
		eaten[len(eaten)-1].Close()
		eaten = eaten[:len(eaten)-1]
	}
}

// runTestChild serves the role named by PCP_TEST_CHILD, if any, and
// exits; TestMain calls it first.
func runTestChild() {
	role := os.Getenv(testChildEnv)
	if role == "" {
		return
	}
	ctx, cancel := childContext()
	defer cancel()
	dir := os.Getenv(testDirEnv)
	var err error
	switch role {
	case "nofile":
		err = nofileDaemon(ctx, dir)
	case "impostor":
		err = impostor(ctx, filepath.Join(dir, "impostor.sock"))
	default:
		err = fmt.Errorf("unknown %s %q", testChildEnv, role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "child %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// childContext is a child process's lifetime: it ends on SIGINT or
// SIGTERM, or when standard input reaches EOF (the parent closed it or
// died).
func childContext() (context.Context, context.CancelFunc) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	return ctx, cancel
}

// nofileDaemon runs pcpd with RLIMIT_NOFILE lowered to $PCP_TEST_NOFILE,
// logging to stderr.
func nofileDaemon(ctx context.Context, dir string) error {
	n, err := strconv.Atoi(os.Getenv(testNofile))
	if err != nil {
		return err
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: uint64(n), Max: uint64(n)}); err != nil {
		return err
	}
	leave := -1
	if v := os.Getenv(testEatFDs); v != "" {
		if leave, err = strconv.Atoi(v); err != nil {
			return err
		}
	}
	ready := make(chan struct{})
	s, err := New(Config{
		Socket:   filepath.Join(dir, "pcp.sock"),
		StateDir: filepath.Join(dir, "state"),
		TrustDir: filepath.Join(dir, "trust"),
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, nil)),
		Limits:   Limits{FirstByte: 500 * time.Millisecond},
		Ready: func() {
			if leave >= 0 {
				eatDescriptors(leave)
			}
			fmt.Println("ready")
			close(ready)
		},
	})
	if err != nil {
		return err
	}
	// After "ready", a line "conns N" each time the tracked connections
	// change, so that the parent waits on them instead of polling.
	go func() {
		select {
		case <-ready:
		case <-ctx.Done():
			return
		}
		last := -1
		s.watchConns(ctx, func() bool {
			if n := len(s.conns); n != last {
				last = n
				fmt.Println("conns", n)
			}
			return false
		})
	}()
	return s.serveUntil(ctx)
}

// impostor listens on path, as whichever user runs it, and answers every
// line with a forged health reply.
func impostor(ctx context.Context, path string) error {
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	os.Chmod(path, 0o777)
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	fmt.Println("ready")
	for {
		c, err := l.Accept()
		if err != nil {
			return nil
		}
		go func() {
			defer c.Close()
			sc := bufio.NewScanner(c)
			for sc.Scan() {
				fmt.Fprintln(c, `{"jsonrpc":"2.0","id":1,"result":{"status":"ok","version":"forged"}}`)
			}
		}()
	}
}

type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan error
	// lines are what the child printed after "ready".
	lines chan string
}

// stop closes the child's standard input and waits for it to exit.
func (c *child) stop() {
	if c.stdin != nil {
		c.stdin.Close()
		c.stdin = nil
		<-c.done
	}
}

// startChild runs this test binary as role in dir, optionally as another
// user, and waits for it to be ready.
func startChild(t *testing.T, role, dir string, env []string, cred *syscall.Credential) (*child, *testkit.SyncBuffer) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		// The other user must be able to run the binary.
		data, err := os.ReadFile(exe)
		if err != nil {
			t.Fatal(err)
		}
		exe = filepath.Join(dir, "child")
		if err := os.WriteFile(exe, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), testChildEnv+"="+role, testDirEnv+"="+dir), env...)
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	stderr := &testkit.SyncBuffer{}
	cmd.Stderr = stderr
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
	c := &child{cmd: cmd, stdin: stdin, done: make(chan error, 1), lines: make(chan string, 1024)}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		ready <- sc.Scan() && sc.Text() == "ready"
		for sc.Scan() {
			select {
			case c.lines <- sc.Text():
			default: // nobody reads them: drop
			}
		}
	}()
	go func() { c.done <- cmd.Wait() }()
	t.Cleanup(c.stop)
	select {
	case ok := <-ready:
		if !ok {
			c.stop()
			t.Fatalf("child %s did not start: %s", role, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("child %s not ready after 20s: %s", role, stderr.String())
	}
	return c, stderr
}

// startNofileChild runs pcpd in a child with RLIMIT_NOFILE at nofile;
// with eat >= 0, the child then takes every free descriptor but eat.
func startNofileChild(t *testing.T, dir string, nofile, eat int) (*child, *testkit.SyncBuffer) {
	env := []string{testNofile + "=" + strconv.Itoa(nofile)}
	if eat >= 0 {
		env = append(env, testEatFDs+"="+strconv.Itoa(eat))
	}
	return startChild(t, "nofile", dir, env, nil)
}

func startImpostor(t *testing.T, sock string) func() {
	c, _ := startChild(t, "impostor", filepath.Dir(sock), nil, &syscall.Credential{Uid: 65534, Gid: 65534})
	return c.stop
}
