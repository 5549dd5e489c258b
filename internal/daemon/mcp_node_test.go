package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// nodeDir holds the node clients' package.json and package-lock.json;
// scripts/test runs npm ci there.
var nodeDir = filepath.Join("..", "face", "mcp", "testdata", "node")

// needNode fails the test, loudly, without node or the installed
// packages: the interop tests never skip.
func needNode(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node not found: install Debian's nodejs (scripts/test does)")
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the node clients are not installed: run npm ci in %s (scripts/test does): %v", nodeDir, err)
	}
}

var pcpctlBuild struct {
	once sync.Once
	path string
	err  error
}

// pcpctlBinary builds pcpctl once per test process.
func pcpctlBinary(t *testing.T) string {
	t.Helper()
	pcpctlBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "pcpctl-bin")
		if err != nil {
			pcpctlBuild.err = err
			return
		}
		pcpctlBuild.path = filepath.Join(dir, "pcpctl")
		cmd := exec.Command("go", "build", "-o", pcpctlBuild.path, "./cmd/pcpctl")
		cmd.Dir = filepath.Join("..", "..")
		if out, err := cmd.CombinedOutput(); err != nil {
			pcpctlBuild.err = err
			t.Logf("%s", out)
		}
	})
	if pcpctlBuild.err != nil {
		t.Fatalf("building pcpctl: %v", pcpctlBuild.err)
	}
	return pcpctlBuild.path
}

// confirmationIDs sends the id of every confirmation the user is asked
// for, until ctx ends.
func confirmationIDs(ctx context.Context, user *client.Client) <-chan string {
	ids := make(chan string, 16)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case n := <-user.Notifications():
				var ev struct {
					ConfirmationID string `json:"confirmation_id"`
				}
				json.Unmarshal(n.Params, &ev)
				ids <- ev.ConfirmationID
			}
		}
	}()
	return ids
}

// runNode runs a node client, deciding a confirmation each time the
// client reports "waiting" (its first progress notification): approve
// the first, deny the second. It returns the client's steps by name.
func runNode(ctx context.Context, t *testing.T, user *client.Client, ids <-chan string, args ...string) (map[string]string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Dir = nodeDir
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	steps := map[string]string{}
	var all strings.Builder
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	decided := 0
	for sc.Scan() {
		all.WriteString(sc.Text() + "\n")
		var st struct{ Step string }
		json.Unmarshal(sc.Bytes(), &st)
		steps[st.Step] = sc.Text()
		if st.Step != "waiting" {
			continue
		}
		var id string
		select {
		case id = <-ids:
		case <-ctx.Done():
			t.Fatal("no confirmation.requested for a waiting call")
		}
		if decided++; decided == 1 {
			_, err = user.ConfirmApprove(ctx, id, "")
		} else {
			_, err = user.ConfirmDeny(ctx, id, "not that one")
		}
		if err != nil {
			t.Errorf("deciding %s: %v", id, err)
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, all.String())
	}
	return steps, all.String()
}

// mcpNodeDaemon starts pcpd with its MCP HTTP endpoint and the notes app
// for the Node clients, and returns it, the pcpctl binary and the HTTP
// token.
func mcpNodeDaemon(t *testing.T) (*served, string, []byte) {
	t.Helper()
	needNode(t)
	pcpctl := pcpctlBinary(t)
	s := serve(t, Config{AllowUnsigned: true, MCP: MCPConfig{HTTPAddr: "127.0.0.1:0"}})
	serveNotes(t, s.cfg.Socket)
	tok, err := os.ReadFile(s.cfg.MCP.TokenFile)
	if err != nil {
		t.Fatal(err)
	}
	return s, pcpctl, tok
}

// TestMCPTypeScriptSDK drives the MCP face with the official TypeScript
// SDK client (@modelcontextprotocol/sdk) over stdio (pcpctl mcp) and
// streamable HTTP.
func TestMCPTypeScriptSDK(t *testing.T) {
	s, pcpctl, tok := mcpNodeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	user, err := client.Dial(ctx, s.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	if _, err := user.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventConfirmationRequested}}); err != nil {
		t.Fatal(err)
	}
	ids := confirmationIDs(ctx, user)
	for _, args := range [][]string{
		{"stdio", pcpctl, s.cfg.MCP.Socket},
		{"http", "http://" + s.MCPHTTPAddr() + "/", strings.TrimSpace(string(tok))},
	} {
		t.Run(args[0], func(t *testing.T) {
			steps, out := runNode(ctx, t, user, ids, append([]string{"node", "interop.mjs"}, args...)...)
			for step, want := range map[string]string{
				"initialize": `"name":"pcp"`,
				"tools":      `"pcp_act","pcp_context","pcp_describe","pcp_elements","pcp_events","pcp_invoke","pcp_search"`,
				"search":     `"id":"org.example.notes.create"`,
				"create":     `"title":"groceries"`,
				"approved":   `"deleted":true`,
				"waiting":    `waiting for the user to approve or deny conf-`,
				"denied":     `"name":"CONFIRMATION_DENIED"`,
				"done":       `{"step":"done"}`,
			} {
				if !strings.Contains(steps[step], want) {
					t.Errorf("%s: got %s, want %s\nall output:\n%s", step, steps[step], want, out)
				}
			}
			if strings.Contains(steps["denied"], `"isError":false`) || strings.Contains(steps["approved"], `"isError":true`) {
				t.Errorf("isError: approved %s, denied %s", steps["approved"], steps["denied"])
			}
		})
	}
}

// TestMCPInspectorCLI lists the tools and calls two of them with the MCP
// Inspector's CLI mode (@modelcontextprotocol/inspector --cli), over
// stdio (pcpctl mcp) and streamable HTTP.
func TestMCPInspectorCLI(t *testing.T) {
	s, pcpctl, tok := mcpNodeDaemon(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	targets := map[string][]string{
		"stdio": {"-e", "PCP_MCP_SOCKET=" + s.cfg.MCP.Socket, pcpctl, "mcp"},
		"http":  {"http://" + s.MCPHTTPAddr() + "/", "--transport", "http", "--header", "Authorization: Bearer " + strings.TrimSpace(string(tok))},
	}
	for _, name := range []string{"stdio", "http"} {
		t.Run(name, func(t *testing.T) {
			for _, tc := range []struct {
				args []string
				want string
			}{
				{[]string{"--method", "tools/list"}, `"name": "pcp_search"`},
				{[]string{"--method", "tools/call", "--tool-name", "pcp_search", "--tool-arg", "query=note create"}, `"id": "org.example.notes.create"`},
				{[]string{"--method", "tools/call", "--tool-name", "pcp_invoke", "--tool-arg", "capability_id=pcp.inspection.ping"}, `"pong": true`},
			} {
				args := append(append([]string{filepath.Join("node_modules", ".bin", "mcp-inspector"), "--cli"}, targets[name]...), tc.args...)
				cmd := exec.CommandContext(ctx, "node", args...)
				cmd.Dir = nodeDir
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), tc.want) {
					t.Errorf("inspector %v: %v, want %s in\n%s", tc.args, err, tc.want, out)
				}
			}
		})
	}
}
