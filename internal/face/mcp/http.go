package mcp

import (
	"crypto/subtle"
	"net"
	"net/http"
	"net/url"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
)

// HTTP authentication failures are throttled face-wide, as the TCP
// face throttles wrong tokens: once the burst is spent, every wrong
// token is answered 429 until the bucket refills.
const (
	authFailuresPerSecond = 5
	authFailureBurst      = 20
)

// HTTPHandler serves streamable HTTP for a listener on addr (loopback;
// the daemon refuses anything else). Every request must:
//
//   - name a loopback host on addr's port in Host, so that a web page
//     whose name was rebound to 127.0.0.1 (DNS rebinding) is refused;
//   - carry no Origin, or a loopback origin on that port: browsers send
//     Origin on cross-origin requests, so a page elsewhere cannot drive
//     the endpoint even when it can reach it;
//   - present the bearer token (Authorization: Bearer TOKEN).
//
// A refusal is 403 (or 401 for the token, 429 once wrong tokens are
// throttled) with a JSON-RPC error body from the catalogue. Every HTTP
// MCP session is a core session of its own, with info (the agent over
// HTTP); bodies are bounded by MaxLine.
func (s *Server) HTTPHandler(addr, token string, info core.SessionInfo) http.Handler {
	s.mu.Lock()
	s.httpServed, s.httpInfo = true, info
	s.mu.Unlock()
	_, port, _ := net.SplitHostPort(addr)
	inner := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv }, &sdk.StreamableHTTPOptions{
		Logger:              s.opts.Logger,
		MaxRequestBodyBytes: int64(s.opts.MaxLine),
		SessionTimeout:      s.opts.HTTPSessionTimeout,
	})
	g := &httpGate{next: inner, port: port, token: token, failures: rate.NewLimiter(authFailuresPerSecond, authFailureBurst)}
	return g
}

type httpGate struct {
	next     http.Handler
	port     string
	token    string
	failures *rate.Limiter
}

func (g *httpGate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.loopback(r.Host) {
		httpRefuse(w, http.StatusForbidden, api.Errorf(api.CodePermissionDenied, map[string]any{"host": r.Host},
			"host %q refused: this endpoint answers only to 127.0.0.1, localhost or [::1] on port %s", r.Host, g.port))
		return
	}
	if origin, ok := r.Header["Origin"]; ok && !g.allowedOrigin(origin) {
		httpRefuse(w, http.StatusForbidden, api.Errorf(api.CodePermissionDenied, map[string]any{"origin": strings.Join(origin, ",")},
			"origin %q refused: a web page may not drive PCP", strings.Join(origin, ",")))
		return
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || g.token == "" || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(g.token)) != 1 {
		if !g.failures.Allow() {
			httpRefuse(w, http.StatusTooManyRequests, api.Errorf(api.CodeRateLimited, map[string]any{"scope": "authentication"},
				"too many failed authentications"))
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="pcp"`)
		httpRefuse(w, http.StatusUnauthorized, api.Errorf(api.CodePermissionDenied, nil,
			"missing or wrong bearer token: send Authorization: Bearer with the token pcpd wrote to its MCP token file"))
		return
	}
	g.next.ServeHTTP(w, r)
}

// loopback reports whether hostport names a loopback host on the
// gate's port.
func (g *httpGate) loopback(hostport string) bool {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || port != g.port {
		return false
	}
	return isLoopbackName(host)
}

func isLoopbackName(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (g *httpGate) allowedOrigin(values []string) bool {
	if len(values) != 1 {
		return false
	}
	u, err := url.Parse(values[0])
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Port() != g.port {
		return false
	}
	return isLoopbackName(u.Hostname())
}

func httpRefuse(w http.ResponseWriter, status int, e *api.Error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(jsonrpc.AppendError(nil, nil, e), '\n'))
}
