package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/mcp"
)

// MCPConfig configures the MCP face (internal/face/mcp).
type MCPConfig struct {
	// Socket serves MCP's stdio framing (`pcpctl mcp` relays to it);
	// empty means mcp.sock beside the agent socket. Its connections count
	// against Limits as the agent socket's do.
	Socket string
	// HTTPAddr, if set, is a loopback address serving streamable HTTP;
	// clients present the bearer token written to TokenFile (default
	// mcp.token beside the agent socket, 0600, new each start).
	HTTPAddr  string
	TokenFile string
	// ConfirmWait bounds how long a tool call waits for the user's
	// decision (default mcp.DefaultConfirmWait).
	ConfirmWait time.Duration
	// ExposeCapabilities adds one MCP tool per registered capability.
	ExposeCapabilities bool
}

func (c *Config) mcpDefaults() {
	if c.MCP.Socket == "" {
		c.MCP.Socket = filepath.Join(filepath.Dir(c.Socket), "mcp.sock")
	}
	if c.MCP.HTTPAddr != "" && c.MCP.TokenFile == "" {
		c.MCP.TokenFile = filepath.Join(filepath.Dir(c.Socket), "mcp.token")
	}
}

// check refuses an HTTP address that is not loopback, before anything
// is opened.
func (c MCPConfig) check() error {
	if c.HTTPAddr == "" {
		return nil
	}
	if err := loopbackOnly(c.HTTPAddr); err != nil {
		return fmt.Errorf("--mcp-http: %w", err)
	}
	return nil
}

// mcpServer is the daemon's part of the MCP face: the face, and the HTTP
// server when HTTPAddr is set.
type mcpServer struct {
	face *mcp.Server
	http *http.Server
	ln   net.Listener
}

// newMCP builds the MCP face and binds mcp.sock (as a listener of the
// accept loops) and, with HTTPAddr, the HTTP listener.
func (s *Server) newMCP() error {
	cfg := s.cfg.MCP
	lim := s.cfg.Limits
	face := mcp.New(s.b, mcp.Options{ConfirmWait: cfg.ConfirmWait, MaxLine: s.cfg.MaxLine, MessageTimeout: off(lim.Message),
		HTTPSessionTimeout: off(lim.Idle), LineBudget: s.lineBudget, Logger: s.log, ExposeCapabilities: cfg.ExposeCapabilities})
	s.mcp = &mcpServer{face: face}
	l, err := s.listenUnix(FDNameMCP, cfg.Socket)
	if err != nil {
		return err
	}
	s.lns = append(s.lns, listener{l: l, role: core.RoleAgent, mcp: true})
	if cfg.HTTPAddr == "" {
		return nil
	}
	token, err := writeTokenFile(cfg.TokenFile)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return err
	}
	s.mcp.ln = ln
	info := core.SessionInfo{Role: core.RoleAgent, Transport: "tcp", Remote: "mcp-http", UID: -1, PID: -1}
	s.mcp.http = &http.Server{Handler: face.HTTPHandler(ln.Addr().String(), token, info), ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes: 16 << 10, ErrorLog: nil}
	return nil
}

// MCPHTTPAddr is the address the MCP HTTP endpoint listens on, "" without
// one.
func (s *Server) MCPHTTPAddr() string {
	if s.mcp == nil || s.mcp.ln == nil {
		return ""
	}
	return s.mcp.ln.Addr().String()
}

// serveMCPHTTP runs the HTTP server until stopMCP closes it.
func (s *Server) serveMCPHTTP() {
	if s.mcp == nil || s.mcp.http == nil {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if err := s.mcp.http.Serve(s.mcp.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("MCP HTTP endpoint stopped", "err", err)
		}
	}()
}

// stopMCP closes the HTTP endpoint and the face's HTTP sessions.
func (s *Server) stopMCP() {
	if s.mcp == nil {
		return
	}
	if s.mcp.http != nil {
		s.mcp.http.Close()
	} else if s.mcp.ln != nil {
		s.mcp.ln.Close()
	}
	s.mcp.face.Close()
	if s.cfg.MCP.HTTPAddr != "" {
		os.Remove(s.cfg.MCP.TokenFile)
	}
}

// serveMCP hands a connection of mcp.sock to the MCP face.
func (s *Server) serveMCP(t *tracked, info core.SessionInfo) {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return
	}
	t.face = true
	s.mu.Unlock()
	if err := s.mcp.face.ServeConn(t.c, info); err != nil {
		s.log.Debug("MCP connection ended", "err", err)
	}
}
