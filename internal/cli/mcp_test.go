package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/cli"
)

func TestMCPConfigSnippet(t *testing.T) {
	d := startDaemon(t)
	out := d.mustRun(t, "mcp", "--config")
	var cfg struct {
		MCPServers map[string]struct {
			Command string   `json:"command"`
			Args    []string `json:"args"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal([]byte(out), &cfg); err != nil {
		t.Fatalf("--config printed %q: %v", out, err)
	}
	pcp := cfg.MCPServers["pcp"]
	want := []string{"mcp", "--mcp-socket", filepath.Join(filepath.Dir(d.socket), "mcp.sock")}
	if !filepath.IsAbs(pcp.Command) || strings.Join(pcp.Args, " ") != strings.Join(want, " ") {
		t.Errorf("snippet %+v, want an absolute command and args %v", pcp, want)
	}
	if _, err := os.Stat(pcp.Command); err != nil {
		t.Errorf("command %s: %v", pcp.Command, err)
	}
}

// TestMCPRelay: pcpctl mcp relays its stdin and stdout to pcpd's MCP
// socket, and ends when stdin does, after the answers.
func TestMCPRelay(t *testing.T) {
	d := startDaemon(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		var errb bytes.Buffer
		done <- cli.Run(context.Background(), []string{"--socket", d.socket, "mcp"}, inR, outW, &errb)
		outW.Close()
	}()
	io.WriteString(inW, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`+"\n")
	r := bufio.NewReader(outR)
	line, err := r.ReadString('\n')
	if err != nil || !strings.Contains(line, `"serverInfo":{"name":"pcp"`) {
		t.Fatalf("initialize through the relay: %q, %v", line, err)
	}
	io.WriteString(inW, `{"jsonrpc":"2.0","method":"notifications/initialized"}`+"\n"+
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"pcp_invoke","arguments":{"capability_id":"pcp.inspection.ping"}}}`+"\n")
	inW.Close()
	line, err = r.ReadString('\n')
	if err != nil || !strings.Contains(line, `"pong":true`) {
		t.Fatalf("tools/call through the relay: %q, %v", line, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("pcpctl mcp: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pcpctl mcp did not end after its input did")
	}
}
