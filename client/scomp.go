package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/coder/websocket"
)

// DefaultScompSocket is pcpd's scomp socket: $PCP_SCOMP_SOCKET, else
// scomp.sock beside the agent socket.
func DefaultScompSocket() string {
	if s := os.Getenv("PCP_SCOMP_SOCKET"); s != "" {
		return s
	}
	return filepath.Join(filepath.Dir(DefaultSocket()), "scomp.sock")
}

// Scomp is a live scomp session (spec 004) on pcpd's scomp socket: one
// request at a time.
type Scomp struct {
	ws *websocket.Conn
	// SessionID is the server's id of the session.
	SessionID string
	// Bindings are the names of the server's bindings.
	Bindings []string
	next     int
}

// ScompError is a failed scomp request; Kind and Stack are set for a
// failed eval (code -32000).
type ScompError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    struct {
		Kind  string          `json:"kind"`
		Stack string          `json:"stack"`
		Error json.RawMessage `json:"error"`
	} `json:"data"`
}

func (e *ScompError) Error() string { return e.Message }

// DialScomp connects to the scomp socket at path ("" means
// DefaultScompSocket()), refusing a socket another user serves, and
// opens the session with a handshake declaring no client bindings.
func DialScomp(ctx context.Context, path string) (*Scomp, error) {
	if path == "" {
		path = DefaultScompSocket()
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialUnix(ctx, path)
	}}}
	ws, _, err := websocket.Dial(ctx, "ws://localhost/", &websocket.DialOptions{HTTPClient: hc, Subprotocols: []string{"scomp.v0"}})
	if err != nil {
		hc.CloseIdleConnections() // a refused upgrade's connection
		return nil, fmt.Errorf("pcp: opening a scomp session on %s: %w", path, err)
	}
	ws.SetReadLimit(64 << 20)
	s := &Scomp{ws: ws}
	var hs struct {
		SessionID string `json:"sessionId"`
		Bindings  []struct {
			Name string `json:"name"`
		} `json:"bindings"`
	}
	if err := s.call(ctx, "handshake", map[string]any{"protocol": "0.1", "bindings": []any{},
		"metadata": map[string]any{"client": map[string]string{"name": "pcpctl"}}}, &hs); err != nil {
		ws.CloseNow()
		return nil, err
	}
	s.SessionID = hs.SessionID
	for _, b := range hs.Bindings {
		s.Bindings = append(s.Bindings, b.Name)
	}
	return s, nil
}

// Eval runs code in the session's sandbox and returns its value as JSON.
func (s *Scomp) Eval(ctx context.Context, code string) (json.RawMessage, error) {
	var r struct {
		Value json.RawMessage `json:"value"`
	}
	if err := s.call(ctx, "eval", map[string]string{"code": code}, &r); err != nil {
		return nil, err
	}
	return r.Value, nil
}

// Close ends the session.
func (s *Scomp) Close() error { return s.ws.Close(websocket.StatusNormalClosure, "") }

func (s *Scomp) call(ctx context.Context, method string, params, result any) error {
	s.next++
	req, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": s.next, "method": method, "params": params})
	if err != nil {
		return err
	}
	if err := s.ws.Write(ctx, websocket.MessageText, req); err != nil {
		return fmt.Errorf("pcp: scomp %s: %w", method, err)
	}
	for {
		_, data, err := s.ws.Read(ctx)
		if err != nil {
			return fmt.Errorf("pcp: scomp %s: %w", method, err)
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Result json.RawMessage `json:"result"`
			Error  *ScompError     `json:"error"`
		}
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("pcp: scomp %s: a reply that is not JSON: %w", method, err)
		}
		if string(m.ID) != fmt.Sprint(s.next) {
			continue // not ours: this client sends one request at a time
		}
		if m.Error != nil {
			return m.Error
		}
		return json.Unmarshal(m.Result, result)
	}
}
