package rpc

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
	"github.com/pcp-dev/pcp/internal/golden"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// A golden transcript is a txtar file with a "transcript" section of
// lines, each addressed to a named connection:
//
//	NAME> {...}     send this line on NAME
//	NAME< {...}     the next line NAME receives is exactly this
//	NAME! close     close NAME
//	NAME! closed    NAME reads EOF: the face has hung up
//	clock! advance D  move the broker's clock by D (a Go duration), firing
//	                  the timers that come due (undo windows, expiries)
//	# ...           a comment
//
// Connections open at first use. Names starting with "user" are the
// user's control socket; names starting with "tcp" need the bearer token
// "test-token"; every other name is an agent-socket connection. An
// optional "config" section sets "allow_unsigned", "max_line N",
// "rate_per_app RATE BURST" and "rate_per_connection RATE BURST" (without
// them, no rate limit applies). The clock does not move, so a spent burst
// stays spent.
//
// The broker runs with a fixed clock and deterministic ids, so replies
// are compared byte for byte. Run with -update to regenerate the expected
// lines after an intended change, and review the diff.
func TestGolden(t *testing.T) { golden.ForEach(t, "testdata/*.txtar", runGolden) }

type goldenEnv struct {
	t     *testing.T
	clk   *testkit.Clock
	srv   *Server
	conns map[string]*goldenConn
	wg    sync.WaitGroup
}

type goldenConn struct {
	c  net.Conn
	rd *bufio.Reader
	// served is closed when the face has finished with the connection
	// (its session closed).
	served chan struct{}
}

func runGolden(t *testing.T, file string) {
	// Every goroutine a transcript starts (connections, their handlers,
	// subscription pumps, the broker's and the store's) ends with it.
	testkit.CheckGoroutines(t)
	ar := golden.Load(t, file)
	allowUnsigned, maxLine := false, 0
	limits := core.RateLimits{}
	for _, line := range ar.Lines("config") {
		fields := strings.Fields(line)
		switch {
		case len(fields) == 0:
		case fields[0] == "allow_unsigned":
			allowUnsigned = true
		case fields[0] == "max_line" && len(fields) == 2:
			maxLine, _ = strconv.Atoi(fields[1])
		case fields[0] == "rate_per_app" && len(fields) == 3:
			limits.PerApp, _ = strconv.ParseFloat(fields[1], 64)
			limits.PerAppBurst, _ = strconv.Atoi(fields[2])
		case fields[0] == "rate_per_connection" && len(fields) == 3:
			limits.PerConnection, _ = strconv.ParseFloat(fields[1], 64)
			limits.PerConnectionBurst, _ = strconv.Atoi(fields[2])
		default:
			t.Fatalf("unknown config line %q", line)
		}
	}
	for _, k := range []string{"XDG_SESSION_TYPE", "XDG_CURRENT_DESKTOP", "DISPLAY", "WAYLAND_DISPLAY"} {
		t.Setenv(k, "")
	}
	env := newGoldenEnv(t, allowUnsigned, maxLine, limits)
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
			env.conn(name).send(t, rest)
			out.WriteString(line + "\n")
		case '<':
			// Consecutive lines a connection receives form a block whose
			// order is not fixed: JSON-RPC orders neither replies nor
			// notifications relative to each other.
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
				// The next line may depend on the daemon having let go
				// of the connection (an adapter's surfaces gone).
				select {
				case <-gc.served:
				case <-time.After(5 * time.Second):
					t.Fatalf("%s:%d: the face still serves %s 5s after it closed", file, i+1, name)
				}
			case "closed":
				// The face must have hung up: NAME reads EOF.
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

// sameLines reports whether got and want hold the same lines, in any order.
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

func newGoldenEnv(t *testing.T, allowUnsigned bool, maxLine int, limits core.RateLimits) *goldenEnv {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clk := testkit.NewClock(testkit.GoldenTime)
	b, err := core.New(context.Background(), core.Config{
		Apps: st, Audit: st, Journal: st, Jobs: st,
		TrustDir:      t.TempDir(),
		AllowUnsigned: allowUnsigned,
		SessionID:     "session-1",
		RateLimits:    &limits,
		// Transcripts are exact; a liveness check would interleave.
		LivenessInterval: -1,
		Now:              clk.Now,
		AfterFunc:        clk.AfterFunc,
		NewID:            testkit.SeqIDs(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := addTestService(b); err != nil {
		t.Fatal(err)
	}
	b.SetAgentEndpoints(goldenAgents{})
	return &goldenEnv{t: t, clk: clk, srv: NewServer(b, Options{MaxLine: maxLine, Token: "test-token"}), conns: map[string]*goldenConn{}}
}

func (e *goldenEnv) conn(name string) *goldenConn {
	if c, ok := e.conns[name]; ok {
		return c
	}
	client, server := testkit.SocketPair(e.t)
	info := core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 4242}
	switch {
	case strings.HasPrefix(name, "user"):
		info.Role = core.RoleUser
	case strings.HasPrefix(name, "agent."):
		// A session accepted on a contained agent's own socket.
		info.Agent = strings.TrimPrefix(name, "agent.")
	case strings.HasPrefix(name, "tcp"):
		info = core.SessionInfo{Role: core.RoleAgent, Transport: "tcp", Remote: "127.0.0.1:50000", NeedsAuth: true, UID: -1, PID: -1}
	}
	gc := &goldenConn{c: client, rd: bufio.NewReaderSize(client, 1<<20), served: make(chan struct{})}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		defer close(gc.served)
		e.srv.ServeConn(server, info)
	}()
	e.conns[name] = gc
	return gc
}

// goldenAgents stands in for the daemon's agent sockets: the transcript
// plays the agent's connections itself (connections named agent.NAME).
type goldenAgents struct{}

func (goldenAgents) OpenAgent(name string) (string, []string, []string, error) {
	return "/run/user/1000/pcp/agents/" + name + "/pcp.sock", []string{"/home/u/.config/pcp", "/home/u/.local/state/pcp", "/run/user/1000/pcp"}, []string{"/usr/bin/pcpd"}, nil
}

func (goldenAgents) CloseAgent(string) int { return 1 }

func (e *goldenEnv) close() {
	for _, c := range e.conns {
		c.c.Close()
	}
	e.wg.Wait()
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
