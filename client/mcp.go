package client

import (
	"context"
	"net"
	"os"
	"path/filepath"
)

// DefaultMCPSocket is pcpd's MCP socket: $PCP_MCP_SOCKET, else mcp.sock
// beside the agent socket.
func DefaultMCPSocket() string {
	if s := os.Getenv("PCP_MCP_SOCKET"); s != "" {
		return s
	}
	return filepath.Join(filepath.Dir(DefaultSocket()), "mcp.sock")
}

// DialMCP connects to pcpd's MCP socket at path ("" means
// DefaultMCPSocket()), refusing a socket another user serves, as Dial
// does. The connection speaks MCP's stdio framing; the caller brings the
// MCP client.
func DialMCP(ctx context.Context, path string) (net.Conn, error) {
	if path == "" {
		path = DefaultMCPSocket()
	}
	return dialUnix(ctx, path)
}
