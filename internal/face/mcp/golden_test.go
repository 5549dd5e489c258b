package mcp

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/golden"
	"github.com/pcp-dev/pcp/internal/services/inspection"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// A golden transcript is a txtar file with a "transcript" section of
// lines, each addressed to a named connection:
//
//	NAME> {...}     send this line on NAME
//	NAME> @N        send a line of N bytes (a request whose params pad it)
//	NAME< {...}     the next line NAME receives is exactly this
//	NAME! close     close NAME
//	NAME! closed    NAME reads EOF: the face has hung up
//	clock! advance D  move the broker's clock by D, firing the timers
//	                  that come due (confirmation expiries)
//	# ...           a comment
//
// Names starting with "mcp" are MCP connections on the face under test
// (an agent: uid 1000, pid 4242). The others speak PCP's JSON-RPC face
// on the same broker, as the apps and the user do: names starting with
// "user" are the user's control socket, every other name the agent
// socket. An optional "config" section sets "max_line N" for the MCP
// face.
//
// The broker runs with a fixed clock and deterministic ids, so replies
// are compared byte for byte; consecutive lines one connection receives
// may come in any order. Run with -update to regenerate the expected
// lines after an intended change, and review the diff.
func TestGolden(t *testing.T) { golden.ForEach(t, "testdata/*.txtar", runGolden) }

type goldenEnv struct {
	t     *testing.T
	clk   *testkit.Clock
	face  *Server
	rpc   *rpc.Server
	conns map[string]*goldenConn
	wg    sync.WaitGroup
}

type goldenConn struct {
	c      net.Conn
	rd     *bufio.Reader
	served chan struct{}
}

func runGolden(t *testing.T, file string) {
	testkit.CheckGoroutines(t)
	ar := golden.Load(t, file)
	maxLine := 0
	for _, line := range ar.Lines("config") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case fields[0] == "max_line" && len(fields) == 2:
			maxLine, _ = strconv.Atoi(fields[1])
		default:
			t.Fatalf("unknown config line %q", line)
		}
	}
	for _, k := range []string{"XDG_SESSION_TYPE", "XDG_CURRENT_DESKTOP", "DISPLAY", "WAYLAND_DISPLAY"} {
		t.Setenv(k, "")
	}
	env := newGoldenEnv(t, maxLine)
	defer env.close()

	var out bytes.Buffer
	lines := ar.Lines("transcript")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		name, op, rest, ok := parseLine(line)
		if !ok {
			out.WriteString(line + "\n")
			continue
		}
		switch op {
		case '>':
			if n, ok := strings.CutPrefix(rest, "@"); ok {
				size, err := strconv.Atoi(n)
				if err != nil {
					t.Fatalf("%s:%d: bad size %q", file, i+1, n)
				}
				rest = paddedRequest(size)
				env.conn(name).send(t, rest)
				out.WriteString(line + "\n")
				continue
			}
			env.conn(name).send(t, rest)
			out.WriteString(line + "\n")
		case '<':
			want := []string{rest}
			for i+1 < len(lines) {
				n2, op2, rest2, ok2 := parseLine(lines[i+1])
				if !ok2 || n2 != name || op2 != '<' {
					break
				}
				want = append(want, rest2)
				i++
			}
			var got []string
			for range want {
				g, err := env.conn(name).recv()
				if err != nil {
					t.Errorf("%s:%d: %s: reading reply: %v (want %s)", file, i+1, name, err, want[len(got)])
					if !*golden.Update {
						return
					}
					g = "?"
				}
				got = append(got, g)
			}
			if !sameLines(got, want) {
				if !*golden.Update {
					t.Errorf("%s:%d: %s received\n got: %s\nwant: %s", file, i+1, name, strings.Join(got, "\n      "), strings.Join(want, "\n      "))
					return
				}
				want = got
			}
			for _, w := range want {
				out.WriteString(name + "< " + w + "\n")
			}
		case '!':
			if name == "clock" {
				d, err := time.ParseDuration(strings.TrimPrefix(rest, "advance "))
				if err != nil || !strings.HasPrefix(rest, "advance ") {
					t.Fatalf("%s:%d: clock directive %q, want 'advance DURATION'", file, i+1, rest)
				}
				env.clk.Advance(d)
				out.WriteString(line + "\n")
				continue
			}
			switch rest {
			case "close":
				gc := env.conn(name)
				gc.c.Close()
				delete(env.conns, name)
				select {
				case <-gc.served:
				case <-time.After(5 * time.Second):
					t.Fatalf("%s:%d: the face still serves %s 5s after it closed", file, i+1, name)
				}
			case "closed":
				gc := env.conn(name)
				gc.c.SetReadDeadline(time.Now().Add(5 * time.Second))
				if extra, err := gc.rd.ReadString('\n'); err != io.EOF {
					t.Fatalf("%s:%d: %s: got %q, %v; want the face to have closed the connection", file, i+1, name, extra, err)
				}
				gc.c.Close()
				delete(env.conns, name)
			default:
				t.Fatalf("%s:%d: unknown directive %q", file, i+1, rest)
			}
			out.WriteString(line + "\n")
		}
	}
	if *golden.Update {
		ar.Save(t, "transcript", out.Bytes())
	}
}

// paddedRequest is a tools/call line of exactly size bytes.
func paddedRequest(size int) string {
	head := `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"pcp_search","arguments":{"query":"`
	tail := `"}}}`
	return head + strings.Repeat("x", max(size-len(head)-len(tail), 0)) + tail
}

func sameLines(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	a, b := slices.Clone(got), slices.Clone(want)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func parseLine(line string) (name string, op byte, rest string, ok bool) {
	if line == "" || line[0] == '#' {
		return "", 0, "", false
	}
	i := strings.IndexAny(line, "<>!")
	if i <= 0 || i+1 >= len(line) || line[i+1] != ' ' {
		return "", 0, "", false
	}
	return line[:i], line[i], line[i+2:], true
}

// newBroker is a broker with a fixed clock, deterministic ids, unsigned
// manifests allowed and pcp.inspection served.
func newBroker(t testing.TB, clk *testkit.Clock) *core.Broker {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), AllowUnsigned: true,
		SessionID: "session-1", RateLimits: &core.RateLimits{}, LivenessInterval: -1}
	if clk != nil {
		cfg.Now, cfg.AfterFunc, cfg.NewID = clk.Now, clk.AfterFunc, testkit.SeqIDs()
	}
	b, err := core.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.AddService(inspection.New(b)); err != nil {
		t.Fatal(err)
	}
	return b
}

func newGoldenEnv(t *testing.T, maxLine int) *goldenEnv {
	clk := testkit.NewClock(testkit.GoldenTime)
	b := newBroker(t, clk)
	return &goldenEnv{t: t, clk: clk,
		// Progress after the first notification would depend on the
		// wall clock; transcripts see only the first.
		face:  New(b, Options{MaxLine: maxLine, ProgressInterval: time.Hour}),
		rpc:   rpc.NewServer(b, rpc.Options{}),
		conns: map[string]*goldenConn{}}
}

func (e *goldenEnv) conn(name string) *goldenConn {
	if c, ok := e.conns[name]; ok {
		return c
	}
	client, server := testkit.SocketPair(e.t)
	info := core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 4242}
	if strings.HasPrefix(name, "user") {
		info.Role = core.RoleUser
	}
	gc := &goldenConn{c: client, rd: bufio.NewReaderSize(client, 1<<20), served: make(chan struct{})}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(gc.served)
		if strings.HasPrefix(name, "mcp") {
			e.face.ServeConn(server, info)
		} else {
			e.rpc.ServeConn(server, info)
		}
	}()
	e.conns[name] = gc
	return gc
}

func (e *goldenEnv) close() {
	for _, c := range e.conns {
		c.c.Close()
	}
	e.wg.Wait()
	e.face.Close()
}

func (c *goldenConn) send(t *testing.T, line string) {
	c.c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.c.Write([]byte(line + "\n")); err != nil {
		t.Fatalf("send: %v", err)
	}
}

func (c *goldenConn) recv() (string, error) {
	c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	line, err := c.rd.ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimSuffix(line, "\n"), nil
}
