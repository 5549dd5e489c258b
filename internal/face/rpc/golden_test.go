package rpc

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/golden"
	"github.com/pcp-dev/pcp/internal/policy"
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
	clk   *testkit.Clock
	srv   *Server
	conns *golden.Lines
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
	var pol *policy.Policy
	if text := ar.Section("policy"); text != nil {
		var err error
		if pol, err = policy.Parse("policy.toml", text); err != nil {
			t.Fatalf("%s: the policy section: %v", file, err)
		}
	}
	env := newGoldenEnv(t, allowUnsigned, maxLine, limits, pol)
	defer env.conns.CloseAll()

	ar.Play(t, golden.Script{Conns: env.conns, Clock: env.clk})
}

func newGoldenEnv(t *testing.T, allowUnsigned bool, maxLine int, limits core.RateLimits, pol *policy.Policy) *goldenEnv {
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
		Policy:        pol,
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
	e := &goldenEnv{clk: clk, srv: NewServer(b, Options{MaxLine: maxLine, Token: "test-token"})}
	e.conns = golden.NewLines(t, e.serve)
	return e
}

// serve serves connection name: names starting with "user" on the
// user's control socket, "agent.NAME" on agent NAME's own socket, "tcp"
// on TCP with a bearer token, every other name on the agent socket.
func (e *goldenEnv) serve(name string, c net.Conn) {
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
	e.srv.ServeConn(c, info)
}

// goldenAgents stands in for the daemon's agent sockets: the transcript
// plays the agent's connections itself (connections named agent.NAME).
type goldenAgents struct{}

func (goldenAgents) OpenAgent(name string) (string, []string, []string, error) {
	return "/run/user/1000/pcp/agents/" + name + "/pcp.sock", []string{"/home/u/.config/pcp", "/home/u/.local/state/pcp", "/run/user/1000/pcp"}, []string{"/usr/bin/pcpd"}, nil
}

func (goldenAgents) CloseAgent(string) int { return 1 }
