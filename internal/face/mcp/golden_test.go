package mcp

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/golden"
	"github.com/pcp-dev/pcp/internal/policy"
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
	clk   *testkit.Clock
	face  *Server
	rpc   *rpc.Server
	conns *golden.Lines
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
	var pol *policy.Policy
	if text := ar.Section("policy"); text != nil {
		var err error
		if pol, err = policy.Parse("policy.toml", text); err != nil {
			t.Fatalf("%s: the policy section: %v", file, err)
		}
	}
	env := newGoldenEnv(t, maxLine, pol)
	defer env.close()

	ar.Play(t, golden.Script{Conns: mcpConns{env.conns}, Clock: env.clk})
}

// mcpConns reads "NAME> @N" as a request of N bytes; every other line
// goes on the wire as written.
type mcpConns struct{ *golden.Lines }

func (c mcpConns) Send(name, text string) error {
	if n, ok := strings.CutPrefix(text, "@"); ok {
		size, err := strconv.Atoi(n)
		if err != nil {
			return fmt.Errorf("bad size %q", n)
		}
		text = paddedRequest(size)
	}
	return c.Lines.Send(name, text)
}

// paddedRequest is a tools/call line of exactly size bytes.
func paddedRequest(size int) string {
	head := `{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"pcp_search","arguments":{"query":"`
	tail := `"}}}`
	return head + strings.Repeat("x", max(size-len(head)-len(tail), 0)) + tail
}

// newBroker is a broker with a fixed clock, deterministic ids, unsigned
// manifests allowed and pcp.inspection served.
func newBroker(t testing.TB, clk *testkit.Clock) *core.Broker { return newBrokerWith(t, clk, nil) }

// newBrokerWith is newBroker with the user's policy pol (nil: the
// built-in defaults).
func newBrokerWith(t testing.TB, clk *testkit.Clock, pol *policy.Policy) *core.Broker {
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg := core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), AllowUnsigned: true,
		SessionID: "session-1", RateLimits: &core.RateLimits{}, LivenessInterval: -1, Policy: pol}
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

func newGoldenEnv(t *testing.T, maxLine int, pol *policy.Policy) *goldenEnv {
	clk := testkit.NewClock(testkit.GoldenTime)
	b := newBrokerWith(t, clk, pol)
	e := &goldenEnv{clk: clk,
		// Progress after the first notification would depend on the
		// wall clock; transcripts see only the first.
		face: New(b, Options{MaxLine: maxLine, ProgressInterval: time.Hour}),
		rpc:  rpc.NewServer(b, rpc.Options{})}
	e.conns = golden.NewLines(t, e.serve)
	return e
}

// serve serves connection name: names starting with "mcp" on the MCP
// face, the others on the JSON-RPC face, those starting with "user" as
// the user's control socket.
func (e *goldenEnv) serve(name string, c net.Conn) {
	info := core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 4242}
	if strings.HasPrefix(name, "user") {
		info.Role = core.RoleUser
	}
	if strings.HasPrefix(name, "mcp") {
		e.face.ServeConn(c, info)
	} else {
		e.rpc.ServeConn(c, info)
	}
}

// close lets go of every connection, then of the face.
func (e *goldenEnv) close() {
	e.conns.CloseAll()
	e.face.Close()
}
