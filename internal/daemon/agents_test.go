package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/testkit"
)

func ping(ctx context.Context, c *client.Client) error {
	_, err := c.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "pcp.inspection.ping", AppID: "pcp.inspection"})
	return err
}

// An agent's own socket: the user opens it on the control socket, every
// request on it is the named agent's in the audit log and the policy,
// and it closes with agents.close or with the control connection.
func TestAgentSockets(t *testing.T) {
	testkit.CheckGoroutines(t)
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte("[agents.banned]\ntrust_level = \"deny\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := start(t, Config{PolicyFile: pol})
	ctx := context.Background()
	user, err := client.Dial(ctx, r.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	agent, err := client.Dial(ctx, r.cfg.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()

	// Only the user opens or closes one.
	for _, call := range []func() error{
		func() error { _, err := agent.OpenAgent(ctx, "probe"); return err },
		func() error { _, err := agent.CloseAgent(ctx, "probe"); return err },
	} {
		if err := call(); !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("from the agent socket: %v, want PERMISSION_DENIED", err)
		}
	}
	for _, bad := range []string{"", "../x", ".hidden", "a/b", string(make([]byte, 65))} {
		if _, err := user.OpenAgent(ctx, bad); !errors.Is(err, api.ErrInvalidParams) {
			t.Errorf("OpenAgent(%q) = %v, want INVALID_PARAMS", bad, err)
		}
	}

	res, err := user.OpenAgent(ctx, "probe")
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(filepath.Dir(r.cfg.Socket), "agents", "probe", "pcp.sock"); res.Socket != want {
		t.Errorf("socket %s, want %s", res.Socket, want)
	}
	st, err := os.Stat(filepath.Dir(res.Socket))
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("agent socket dir: %v, %v; want mode 0700", st, err)
	}
	for _, d := range []string{filepath.Dir(r.cfg.ControlSocket), r.cfg.StateDir, r.cfg.TrustDir, filepath.Dir(pol)} {
		if !slices.Contains(res.Hide, d) {
			t.Errorf("hide %v lacks %s", res.Hide, d)
		}
	}
	if _, err := user.OpenAgent(ctx, "probe"); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("opening a running agent again: %v, want INVALID_PARAMS", err)
	}

	probe, err := client.Dial(ctx, res.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(ctx, probe); err != nil {
		t.Fatalf("ping from the agent's socket: %v", err)
	}
	if _, err := probe.OpenAgent(ctx, "other"); !errors.Is(err, api.ErrPermissionDenied) {
		t.Errorf("agents.open from an agent's socket: %v, want PERMISSION_DENIED", err)
	}
	tail, err := user.AuditTail(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var actors []string
	for _, e := range tail.Entries {
		if e.Kind == api.AuditInvoke {
			actors = append(actors, e.Actor)
		}
		if e.Kind == api.AuditAgent {
			var d api.AuditAgentDetail
			if err := json.Unmarshal(e.Detail, &d); err != nil || d.Agent != "probe" || e.Outcome != api.AuditAgentOpened {
				t.Errorf("agent entry %+v (%v), want probe opened", e, err)
			}
		}
	}
	if !slices.Equal(actors, []string{"agent:probe"}) {
		t.Errorf("invoke actors %v, want [agent:probe]", actors)
	}

	// The policy's rules for another agent's name.
	banned, err := user.OpenAgent(ctx, "banned")
	if err != nil {
		t.Fatal(err)
	}
	bc, err := client.Dial(ctx, banned.Socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	if err := ping(ctx, bc); !errors.Is(err, api.ErrPermissionDenied) {
		t.Errorf("ping by the banned agent: %v, want PERMISSION_DENIED", err)
	}
	// policy.show says so, to the agent itself and to the user asking for it.
	for who, c := range map[string]*client.Client{"the agent": bc, "the user": user} {
		var v api.PolicyView
		p := &api.PolicyShowParams{}
		if c == user {
			p.Agent = "banned"
		}
		if err := c.Call(ctx, api.MethodPolicyShow, p, &v); err != nil {
			t.Fatal(err)
		}
		found := false
		for _, pc := range v.Capabilities {
			found = found || pc.CapabilityID == "pcp.inspection.ping"
			if pc.CapabilityID == "pcp.inspection.ping" && (v.Agent != "banned" || pc.TrustLevel.Value != "deny" || pc.TrustLevel.From != "policy.toml: agents.banned") {
				t.Errorf("policy.show for %s: agent %q, ping %+v", who, v.Agent, pc.TrustLevel)
			}
		}
		if !found {
			t.Errorf("policy.show for %s lists no pcp.inspection.ping", who)
		}
	}

	// agents.close ends the socket and its connections.
	cr, err := user.CloseAgent(ctx, "probe")
	if err != nil || cr.Connections != 1 {
		t.Fatalf("CloseAgent = %+v, %v; want 1 connection", cr, err)
	}
	<-probe.Done()
	probe.Close()
	if _, err := os.Stat(res.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left after agents.close: %v", err)
	}
	if _, err := user.CloseAgent(ctx, "probe"); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("closing it again: %v, want INVALID_PARAMS", err)
	}

	// The control connection that opened an agent closing closes it.
	user.Close()
	<-bc.Done()
	user2, err := client.Dial(ctx, r.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user2.Close()
	if _, err := user2.OpenAgent(ctx, "banned"); err != nil {
		t.Errorf("reopening banned after its owner left: %v", err)
	}
}

// The control connection that opened an agent's socket is not idle: the
// idle timeout that closes a silent connection spares it, so the agent
// keeps its socket while it runs.
func TestAgentOwnerIsNotIdle(t *testing.T) {
	testkit.CheckGoroutines(t)
	r := start(t, Config{Limits: Limits{Idle: 200 * time.Millisecond}})
	ctx := context.Background()
	owner, err := client.Dial(ctx, r.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	if _, err := owner.OpenAgent(ctx, "long"); err != nil {
		t.Fatal(err)
	}
	plain, err := client.Dial(ctx, r.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := plain.Health(ctx); err != nil {
		t.Fatal(err)
	}
	<-plain.Done() // closed as idle; the owner has been silent longer
	if _, err := owner.Health(ctx); err != nil {
		t.Errorf("the owner's connection: %v, want it open", err)
	}
}
