package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/client"
)

func (e *env) mcpCommand() *cobra.Command {
	var (
		socket     string
		showConfig bool
	)
	cmd := &cobra.Command{
		Use:   "mcp [--config]",
		Short: "Serve PCP to an MCP agent host on standard input and output",
		Long: `pcpctl mcp connects an agent host that speaks the Model Context Protocol
(MCP) to pcpd: it relays the host's standard input and output, byte for
byte, to pcpd's MCP socket (mcp.sock beside the agent socket), where pcpd
serves MCP's stdio framing. Configure the host to start "pcpctl mcp";
--config prints the snippet for .mcp.json-style configuration files.

pcpctl refuses a socket served by another user. It ends when the host
closes its input (after pcpd has answered what was sent) or when pcpd
ends the session. See docs/mcp.md for the tools.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&socket, "mcp-socket", client.DefaultMCPSocket(), "pcpd's MCP socket ($PCP_MCP_SOCKET)")
	cmd.Flags().BoolVar(&showConfig, "config", false, "print the JSON snippet for an agent host's mcpServers configuration and exit")
	cmd.RunE = e.run(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		path := socket
		if !cmd.Flags().Changed("mcp-socket") && e.root.PersistentFlags().Changed("socket") && os.Getenv("PCP_MCP_SOCKET") == "" {
			path = filepath.Join(filepath.Dir(e.socket), "mcp.sock")
		}
		if showConfig {
			return e.printMCPConfig(path, cmd.Flags().Changed("mcp-socket") || path != client.DefaultMCPSocket())
		}
		dctx, cancel := e.callContext(ctx)
		conn, err := client.DialMCP(dctx, path)
		cancel()
		if err != nil {
			return err
		}
		return relay(ctx, conn, e.stdin, e.stdout)
	})
	return cmd
}

// mcpConfig is the mcpServers entry agent hosts read.
type mcpConfig struct {
	MCPServers map[string]mcpServerEntry `json:"mcpServers"`
}

type mcpServerEntry struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
}

func (e *env) printMCPConfig(socket string, explicit bool) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding pcpctl's own path: %w", err)
	}
	if abs, err := filepath.EvalSymlinks(exe); err == nil {
		exe = abs
	}
	args := []string{"mcp"}
	if explicit {
		args = append(args, "--mcp-socket", socket)
	}
	b, err := json.Marshal(mcpConfig{MCPServers: map[string]mcpServerEntry{"pcp": {Command: exe, Args: args}}})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.stdout, "%s\n", b)
	return err
}

// relay copies in to conn and conn to out until pcpd closes its side.
// When in ends, the write side of conn is closed, so that pcpd answers
// what it has read and then ends the session. The copy from in is left
// to end with the process when in is never closed (standard input).
func relay(ctx context.Context, conn net.Conn, in io.Reader, out io.Writer) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	if in != nil {
		go func() {
			io.Copy(conn, in)
			if cw, ok := conn.(interface{ CloseWrite() error }); ok {
				cw.CloseWrite()
			}
		}()
	}
	_, err := io.Copy(out, conn)
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("relaying pcpd's MCP socket: %w", err)
	}
	return nil
}
