package daemon

// Benchmarks of the agent face as a client sees it: pcpd runs in a child
// process (this test binary re-executed with PCP_BENCH_ROLE=daemon) and
// the benchmark dials its socket, so every op pays the real costs of a
// Unix socket round trip between two processes. The baseline, measured in
// the same run, is a line echo server in a child process
// (PCP_BENCH_ROLE=echo) answering a line of the same size as the invoke
// request: the difference between the two is what the daemon adds.
//
// Allocation figures count the client side only; the daemon's cost shows
// in the latency. Each benchmark reports p50-µs and p99-µs (per-op round
// trip, from the client's clock), the concurrent and pipelined ones ops/s.
//
// Setting PCP_BENCH_DAEMON_PROFILE to a directory makes every daemon and
// Tier 1 app child write a CPU profile there (<role>-<pid>.pprof), for
// `go tool pprof -top daemon.test <dir>/daemon-*.pprof`.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
	"github.com/pcp-dev/pcp/sdk"
)

// Environment of a benchmark child process.
const (
	benchRoleEnv    = "PCP_BENCH_ROLE" // "daemon" or "echo"
	benchDirEnv     = "PCP_BENCH_DIR"  // holds the socket (and the daemon's state)
	benchProfileEnv = "PCP_BENCH_DAEMON_PROFILE"
)

// benchPipelineWindow is how many requests BenchmarkInvokePipelined keeps
// in flight: the daemon's per-connection limit on requests being handled.
const benchPipelineWindow = 256

// benchClients is the connection count of BenchmarkInvoke/clients=8.
const benchClients = 8

// benchPayload is the ping payload; it makes the request line about the
// size of a typical invocation (~150 bytes).
const benchPayload = `{"payload":"the quick brown fox jumps over"}`

var benchInvoke = api.InvokeCapabilityParams{
	CapabilityID: "pcp.inspection.ping",
	AppID:        "pcp.inspection",
	Source:       api.SourceSystemIntelligence,
	Params:       json.RawMessage(benchPayload),
}

// benchInvokeParams is benchInvoke encoded as client.InvokeCapability
// encodes it.
var benchInvokeParams = func() []byte {
	b, err := jsonrpc.Marshal(&benchInvoke)
	if err != nil {
		panic(err)
	}
	return b
}()

// benchRequestLine appends the invoke.capability line with the given id,
// without the newline, to buf: what client.InvokeCapability writes.
func benchRequestLine(buf []byte, id int64) []byte {
	var idb [20]byte
	return jsonrpc.AppendRequest(buf, strconv.AppendInt(idb[:0], id, 10), api.MethodInvokeCapability, benchInvokeParams)
}

// runBenchChild serves the role named by PCP_BENCH_ROLE, if any, and
// exits; TestMain calls it first. A child stops when its standard input
// reaches EOF, which is when the parent closes it or dies.
func runBenchChild() {
	role := os.Getenv(benchRoleEnv)
	if role == "" {
		return
	}
	ctx, cancel := childContext()
	defer cancel()
	dir := os.Getenv(benchDirEnv)
	var err error
	if pdir := os.Getenv(benchProfileEnv); pdir != "" && role != "echo" {
		f, err := os.Create(filepath.Join(pdir, fmt.Sprintf("%s-%d.pprof", role, os.Getpid())))
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
			os.Exit(1)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	switch role {
	case "daemon":
		err = benchDaemon(ctx, dir)
	case "echo":
		err = benchEcho(ctx, filepath.Join(dir, "pcp.sock"))
	case "tier1app":
		err = benchTier1App(ctx, filepath.Join(dir, "pcp.sock"))
	default:
		err = fmt.Errorf("unknown %s %q", benchRoleEnv, role)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench %s: %v\n", role, err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
	pprof.StopCPUProfile()
	os.Exit(0)
}

// benchDaemon runs pcpd in dir until ctx is cancelled.
func benchDaemon(ctx context.Context, dir string) error {
	return Run(ctx, Config{
		Socket:   filepath.Join(dir, "pcp.sock"),
		StateDir: filepath.Join(dir, "state"),
		TrustDir: filepath.Join(dir, "trust"),
		Logger:   slog.New(slog.DiscardHandler),
		// The Tier 1 benchmark app's manifest is unsigned.
		AllowUnsigned: true,
		// Limits far above any rate reached: the checks run, none trips.
		RateLimits: &core.RateLimits{PerApp: 1e9, PerAppBurst: 1e9, PerConnection: 1e9, PerConnectionBurst: 1e9},
	})
}

// benchEcho serves a line echo on a Unix socket until ctx is cancelled.
// Replies are flushed when no further request is buffered, so pipelined
// lines share write calls as the daemon's replies do.
func benchEcho(ctx context.Context, path string) error {
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
		go func() {
			defer c.Close()
			r := bufio.NewReaderSize(c, 64<<10)
			w := bufio.NewWriterSize(c, 32<<10)
			for {
				line, err := r.ReadSlice('\n')
				if err != nil {
					return
				}
				w.Write(line)
				if r.Buffered() == 0 {
					if w.Flush() != nil {
						return
					}
				}
			}
		}()
	}
}

// benchTier1AppID is the Tier 1 app of BenchmarkTier1Execute; its one
// capability, echo, returns its params.
const benchTier1AppID = "org.pcp.bench"

var benchTier1Manifest = json.RawMessage(`{"version":"1.0","capabilities":[{"name":"echo","tier":1,"trust_level":"auto",` +
	`"parameters":[{"name":"payload","type":"object","required":false}]}],"signature":""}`)

// benchTier1App serves benchTier1AppID through the SDK until ctx ends.
func benchTier1App(ctx context.Context, agentSocket string) error {
	app := &sdk.App{
		AppID:          benchTier1AppID,
		SignedManifest: benchTier1Manifest,
		Capabilities: map[string]sdk.CapabilityFunc{
			"echo": func(_ context.Context, params json.RawMessage) (any, error) { return params, nil },
		},
	}
	return app.Serve(ctx, &sdk.Options{AgentSocket: agentSocket})
}

// startBenchChild starts this test binary in role with a fresh directory
// and returns the socket path once it accepts connections. The child is
// stopped in b.Cleanup.
func startBenchChild(b *testing.B, role string) string {
	b.Helper()
	// A short directory: socket paths are limited to about 100 bytes.
	dir, err := os.MkdirTemp("", "pcpbench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "pcp.sock")
	exited := spawnBenchChild(b, role, dir)
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
			return sock
		}
		select {
		case err := <-exited:
			exited <- err
			b.Fatalf("%s child exited before serving %s: %v", role, sock, err)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s child not accepting on %s after 20s: %v", role, sock, err)
		}
	}
}

// spawnBenchChild starts this test binary in role on dir; the channel
// delivers its exit. The child is stopped (its stdin closed) in b.Cleanup.
func spawnBenchChild(b *testing.B, role, dir string) chan error {
	b.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), benchRoleEnv+"="+role, benchDirEnv+"="+dir)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	b.Cleanup(func() {
		stdin.Close()
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	})
	return exited
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

// reportRate reports n ops over elapsed as ops/s.
func reportRate(b *testing.B, n int, elapsed time.Duration) {
	b.ReportMetric(float64(n)/elapsed.Seconds(), "ops/s")
}

func dialBenchClient(b *testing.B, sock string) *client.Client {
	b.Helper()
	c, err := client.Dial(context.Background(), sock, client.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// pingOnce invokes the ping capability and checks its answer.
func pingOnce(ctx context.Context, c *client.Client) error {
	p := benchInvoke
	res, err := c.InvokeCapability(ctx, &p)
	if err != nil {
		return err
	}
	if res.Status != api.StatusSuccess || !bytes.Contains(res.Data, []byte(`"pong":true`)) {
		return fmt.Errorf("unexpected ping result %+v (data %s)", res, res.Data)
	}
	return nil
}

// BenchmarkRawEcho is the baseline of the invoke benchmarks: one client
// writes a line the size of an invoke request to a line echo server in
// another process and waits for it to come back.
func BenchmarkRawEcho(b *testing.B) {
	sock := startBenchChild(b, "echo")
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	line := append(benchRequestLine(nil, 1), '\n')
	r := bufio.NewReader(c)
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		if _, err := c.Write(line); err != nil {
			b.Fatal(err)
		}
		got, err := r.ReadSlice('\n')
		if err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
		if len(got) != len(line) {
			b.Fatalf("echo of %d bytes came back as %d", len(line), len(got))
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkInvoke is invoke.capability of pcp.inspection.ping through
// client.Client: the full pipeline, including an audit entry committed
// before each reply. With several clients each uses its own connection;
// ns/op is then wall time per op over all of them, and ops/s their sum.
func BenchmarkInvoke(b *testing.B) {
	for _, n := range []int{1, benchClients} {
		b.Run(fmt.Sprintf("clients=%d", n), func(b *testing.B) {
			sock := startBenchChild(b, "daemon")
			ctx := context.Background()
			clients := make([]*client.Client, n)
			for i := range clients {
				clients[i] = dialBenchClient(b, sock)
				if err := pingOnce(ctx, clients[i]); err != nil {
					b.Fatal(err)
				}
			}
			lat := make([]time.Duration, b.N)
			var (
				next   atomic.Int64
				failed atomic.Pointer[error]
				wg     sync.WaitGroup
			)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for _, c := range clients {
				wg.Go(func() {
					for {
						i := next.Add(1) - 1
						if i >= int64(b.N) {
							return
						}
						p := benchInvoke
						t0 := time.Now()
						res, err := c.InvokeCapability(ctx, &p)
						lat[i] = time.Since(t0)
						if err == nil && res.Status != api.StatusSuccess {
							err = fmt.Errorf("status %q", res.Status)
						}
						if err != nil {
							failed.CompareAndSwap(nil, &err)
							return
						}
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if err := failed.Load(); err != nil {
				b.Fatal(*err)
			}
			reportLatency(b, lat)
			if n > 1 {
				reportRate(b, b.N, elapsed)
			}
		})
	}
}

// BenchmarkInvokePipelined keeps benchPipelineWindow invocations in flight
// on one connection: one goroutine writes request lines with distinct ids,
// another reads the replies. It measures throughput, not latency.
func BenchmarkInvokePipelined(b *testing.B) {
	sock := startBenchChild(b, "daemon")
	if err := pingOnce(context.Background(), dialBenchClient(b, sock)); err != nil {
		b.Fatal(err)
	}
	benchPipelined(b, sock, func(reply []byte) error {
		if !bytes.Contains(reply, []byte(`"pong":true`)) {
			return fmt.Errorf("unexpected reply %s", reply)
		}
		return nil
	})
}

// BenchmarkRawEchoPipelined is the baseline of BenchmarkInvokePipelined:
// the same lines and window, against the echo server.
func BenchmarkRawEchoPipelined(b *testing.B) {
	sock := startBenchChild(b, "echo")
	benchPipelined(b, sock, func(reply []byte) error {
		if !bytes.HasPrefix(reply, []byte(`{"jsonrpc":"2.0","id":`)) {
			return fmt.Errorf("unexpected echo %s", reply)
		}
		return nil
	})
}

// benchPipelined runs b.N request lines through one connection to sock
// with benchPipelineWindow of them in flight, checking each reply with
// check, and reports ops/s.
func benchPipelined(b *testing.B, sock string, check func(reply []byte) error) {
	c, err := net.Dial("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	window := make(chan struct{}, benchPipelineWindow)
	readErr := make(chan error, 1)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	go func() {
		r := bufio.NewReaderSize(c, 64<<10)
		for range b.N {
			reply, err := r.ReadSlice('\n')
			if err == nil {
				err = check(reply)
			}
			if err != nil {
				readErr <- err
				c.Close() // unblocks the writer
				return
			}
			<-window
		}
		readErr <- nil
	}()
	w := bufio.NewWriterSize(c, 32<<10)
	var line []byte
send:
	for i := range b.N {
		select {
		case window <- struct{}{}:
		default:
			// The window is full: send what is buffered, then wait.
			if w.Flush() != nil {
				break send // the reader has failed and closed c
			}
			window <- struct{}{}
		}
		line = append(benchRequestLine(line[:0], int64(i)+1), '\n')
		if _, err := w.Write(line); err != nil {
			break
		}
	}
	w.Flush()
	if err := <-readErr; err != nil {
		b.Fatal(err)
	}
	elapsed := time.Since(start)
	b.StopTimer()
	reportRate(b, b.N, elapsed)
}

// BenchmarkFramedExecute is spec 001's ExecuteRequest of
// pcp.inspection.ping over the framed face, one client in this process
// and pcpd in another: the framed counterpart of BenchmarkInvoke, beside
// BenchmarkRawEcho in the same run.
func BenchmarkFramedExecute(b *testing.B) {
	sock := startBenchChild(b, "daemon")
	fc, err := client.DialFramed(context.Background(), sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fc.Close() })
	ctx := context.Background()
	params := json.RawMessage(`{"payload":{"n":1}}`)
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		res, err := fc.Execute(ctx, "pcp.inspection.ping", params, false)
		if err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
		if res.Status != api.StatusSuccess {
			b.Fatalf("status %q", res.Status)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}

// BenchmarkTier1Execute is a Tier 1 invocation end to end: a framed
// ExecuteRequest from this process to pcpd, InvokeCapability from pcpd to
// a Tier 1 app (the SDK, in a third process) over its per-app socket, and
// the CapabilityResultMsg and ExecuteResponse back, audit included. Each
// round trip crosses two process boundaries twice; the baseline is
// BenchmarkRawEcho, which crosses one twice.
func BenchmarkTier1Execute(b *testing.B) {
	sock := startBenchChild(b, "daemon")
	exited := spawnBenchChild(b, "tier1app", filepath.Dir(sock))
	fc, err := client.DialFramed(context.Background(), sock)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fc.Close() })
	ctx := context.Background()
	capID := benchTier1AppID + ".echo"
	params := json.RawMessage(`{"payload":{"n":1}}`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := fc.Execute(ctx, capID, params, false)
		if err == nil {
			break
		}
		select {
		case err := <-exited:
			b.Fatalf("the Tier 1 app exited: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.Fatalf("the Tier 1 app never served: %v", err)
		}
	}
	lat := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		res, err := fc.Execute(ctx, capID, params, false)
		if err != nil {
			b.Fatal(err)
		}
		lat[i] = time.Since(t0)
		if res.Status != api.StatusSuccess || string(res.Data) != string(params) {
			b.Fatalf("result %+v (data %s)", res, res.Data)
		}
	}
	b.StopTimer()
	reportLatency(b, lat)
}
