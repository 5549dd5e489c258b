package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// Environment of a benchmark child process (this test binary re-executed).
const (
	benchRoleEnv = "PCP_BENCH_ROLE" // "echo" or "mcp"
	benchSockEnv = "PCP_BENCH_SOCKET"
)

// benchPayload is the ping payload of every benchmark here, the same as
// in internal/daemon's benchmarks: it makes a PCP invoke request line
// about 150 bytes long.
const benchPayload = `{"payload":"the quick brown fox jumps over"}`

var benchInvoke = api.InvokeCapabilityParams{
	CapabilityID: "pcp.inspection.ping",
	AppID:        "pcp.inspection",
	Source:       api.SourceSystemIntelligence,
	Params:       json.RawMessage(benchPayload),
}

func TestMain(m *testing.M) {
	runBenchChild()
	code := m.Run()
	pcpdBuild.cleanup()
	os.Exit(code)
}

// runBenchChild serves the role named by PCP_BENCH_ROLE, if any, and
// exits. A child stops when its standard input reaches EOF, which is when
// the parent closes it or dies.
func runBenchChild() {
	role := os.Getenv(benchRoleEnv)
	if role == "" {
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	var err error
	switch sock := os.Getenv(benchSockEnv); role {
	case "echo":
		err = benchEcho(ctx, sock)
	case "mcp":
		err = benchMCPServer(ctx, sock)
	default:
		err = fmt.Errorf("unknown %s %q", benchRoleEnv, role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveUnix accepts connections on a Unix socket at path until ctx is
// cancelled, running serve on each in its own goroutine.
func serveUnix(ctx context.Context, path string, serve func(net.Conn)) error {
	l, err := net.Listen("unix", path)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		l.Close()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		go serve(c)
	}
}

// benchEcho serves a line echo: the floor under both protocols. Replies
// are flushed when no further request is buffered.
func benchEcho(ctx context.Context, path string) error {
	return serveUnix(ctx, path, func(c net.Conn) {
		defer c.Close()
		r := bufio.NewReaderSize(c, 64<<10)
		w := bufio.NewWriterSize(c, 32<<10)
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			w.Write(line)
			if r.Buffered() == 0 && w.Flush() != nil {
				return
			}
		}
	})
}

type pingIn struct {
	Payload any `json:"payload,omitempty" jsonschema:"any JSON value, returned as is"`
}

type pingOut struct {
	Pong    bool `json:"pong"`
	Payload any  `json:"payload,omitempty"`
}

// benchMCPServer serves an MCP server with one tool, ping, the
// counterpart of pcp.inspection.ping, written the way the SDK documents
// tools: typed input and output, which the SDK validates against the
// schemas it derives. Each accepted connection is one MCP session over
// the SDK's newline-delimited JSON transport.
func benchMCPServer(ctx context.Context, path string) error {
	srv := sdk.NewServer(&sdk.Implementation{Name: "bench", Version: "1.0"}, nil)
	sdk.AddTool(srv, &sdk.Tool{
		Name:        "ping",
		Description: "Echoes payload.",
	}, func(_ context.Context, _ *sdk.CallToolRequest, in pingIn) (*sdk.CallToolResult, pingOut, error) {
		return nil, pingOut{Pong: true, Payload: in.Payload}, nil
	})
	return serveUnix(ctx, path, func(c net.Conn) {
		defer c.Close()
		ss, err := srv.Connect(ctx, &sdk.IOTransport{Reader: c, Writer: c}, nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench mcp: connect:", err)
			return
		}
		ss.Wait()
	})
}

// benchDir returns a fresh short directory, removed in b.Cleanup: socket
// paths are limited to about 100 bytes.
func benchDir(b *testing.B) string {
	b.Helper()
	dir, err := os.MkdirTemp("", "pcpbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startChild starts cmd, waits until sock accepts connections, and stops
// cmd in b.Cleanup with stop (then SIGKILL after 10s).
func startChild(b *testing.B, cmd *exec.Cmd, sock string, stop func()) {
	b.Helper()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		stop()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return
		}
		select {
		case err := <-exited:
			exited <- err
			b.Fatalf("%s exited before serving %s: %v", cmd.Path, sock, err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not accepting on %s after 20s: %v", cmd.Path, sock, err)
		}
	}
}

// startBenchChild runs this test binary in role and returns its socket.
func startBenchChild(b *testing.B, role string) string {
	b.Helper()
	sock := filepath.Join(benchDir(b), "bench.sock")
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchRoleEnv+"="+role, benchSockEnv+"="+sock)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	startChild(b, cmd, sock, func() { stdin.Close() })
	return sock
}

// builtPCPD is the pcpd binary, built once per test process from the
// enclosing module.
type builtPCPD struct {
	once sync.Once
	dir  string
	path string
	err  error
}

var pcpdBuild builtPCPD

func (p *builtPCPD) cleanup() {
	if p.dir != "" {
		os.RemoveAll(p.dir)
	}
}

func pcpdBinary(b *testing.B) string {
	b.Helper()
	p := &pcpdBuild
	p.once.Do(func() {
		goCmd, err := exec.LookPath("go")
		if err != nil {
			p.err = fmt.Errorf("building pcpd: %w", err)
			return
		}
		if p.dir, p.err = os.MkdirTemp("", "pcpd-bin"); p.err != nil {
			return
		}
		p.path = filepath.Join(p.dir, "pcpd")
		cmd := exec.Command(goCmd, "build", "-o", p.path, "./cmd/pcpd")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			p.err = fmt.Errorf("go build ./cmd/pcpd: %v\n%s", err, out)
		}
	})
	if p.err != nil {
		b.Fatal(p.err)
	}
	return p.path
}

// startPCPD runs the real pcpd with fresh state and returns its agent
// socket.
func startPCPD(b *testing.B) string {
	b.Helper()
	bin := pcpdBinary(b)
	dir := benchDir(b)
	sock := filepath.Join(dir, "run", "pcp.sock")
	cmd := exec.Command(bin,
		"--socket", sock,
		"--state-dir", filepath.Join(dir, "state"),
		"--trust-dir", filepath.Join(dir, "trust"),
		"--log-level", "error",
		// Limits far above any rate reached: the checks run, none trips.
		"--rate-per-app", "1e9", "--rate-per-connection", "1e9")
	setParentDeathSignal(cmd)
	startChild(b, cmd, sock, func() { cmd.Process.Signal(syscall.SIGTERM) })
	return sock
}

// reportLatency reports the p50 and p99 of the per-op round trips.
func reportLatency(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	at := func(q int) float64 {
		return float64(d[min(len(d)*q/100, len(d)-1)]) / float64(time.Microsecond)
	}
	b.ReportMetric(at(50), "p50-µs")
	b.ReportMetric(at(99), "p99-µs")
}

// measure runs op b.N times, timing each call, and reports latencies.
func measure(b *testing.B, op func() error) {
	b.Helper()
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		err := op()
		lat[i] = time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkRawEcho is the floor: a line the size of a PCP invoke request
// written to a line echo server in another process, read back.
func BenchmarkRawEcho(b *testing.B) {
	c, err := net.Dial("unix", startBenchChild(b, "echo"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	params, err := json.Marshal(&benchInvoke)
	if err != nil {
		b.Fatal(err)
	}
	line := fmt.Appendf(nil, `{"jsonrpc":"2.0","id":1,"method":%q,"params":%s}`+"\n", api.MethodInvokeCapability, params)
	r := bufio.NewReader(c)
	measure(b, func() error {
		if _, err := c.Write(line); err != nil {
			return err
		}
		got, err := r.ReadSlice('\n')
		if err == nil && len(got) != len(line) {
			err = fmt.Errorf("echo of %d bytes came back as %d", len(line), len(got))
		}
		return err
	})
}

// BenchmarkMCPCallTool is one MCP client session calling the ping tool
// with ClientSession.CallTool, one call at a time.
func BenchmarkMCPCallTool(b *testing.B) {
	ctx := context.Background()
	conn, err := net.Dial("unix", startBenchChild(b, "mcp"))
	if err != nil {
		b.Fatal(err)
	}
	cl := sdk.NewClient(&sdk.Implementation{Name: "bench", Version: "1.0"}, nil)
	cs, err := cl.Connect(ctx, &sdk.IOTransport{Reader: conn, Writer: conn}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cs.Close() })
	params := &sdk.CallToolParams{Name: "ping", Arguments: json.RawMessage(benchPayload)}
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := json.Marshal(res.StructuredContent)
	if res.IsError || !bytes.Contains(out, []byte(`"pong":true`)) {
		b.Fatalf("unexpected ping result: error %v, structured content %s", res.IsError, out)
	}
	measure(b, func() error {
		res, err := cs.CallTool(ctx, params)
		if err == nil && res.IsError {
			err = fmt.Errorf("ping tool failed: %+v", res.Content)
		}
		return err
	})
}

// BenchmarkPCPInvoke is invoke.capability of pcp.inspection.ping on a
// real pcpd through client.Client, one call at a time: the full
// invocation pipeline, including an audit entry committed before each
// reply.
func BenchmarkPCPInvoke(b *testing.B) {
	ctx := context.Background()
	c, err := client.Dial(ctx, startPCPD(b), client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	p := benchInvoke
	res, err := c.InvokeCapability(ctx, &p)
	if err != nil {
		b.Fatal(err)
	}
	if res.Status != api.StatusSuccess || !bytes.Contains(res.Data, []byte(`"pong":true`)) {
		b.Fatalf("unexpected ping result %+v (data %s)", res, res.Data)
	}
	measure(b, func() error {
		p := benchInvoke
		res, err := c.InvokeCapability(ctx, &p)
		if err == nil && res.Status != api.StatusSuccess {
			err = fmt.Errorf("ping status %q", res.Status)
		}
		return err
	})
}
