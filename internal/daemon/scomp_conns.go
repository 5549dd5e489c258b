package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/face/scomp"
	"github.com/pcp-dev/pcp/internal/jsonrpc"
	"github.com/pcp-dev/pcp/internal/unixsock"
)

// DefaultScompSessions bounds the scomp sessions one agent holds at once
// (ScompConfig.Sessions).
const DefaultScompSessions = 16

// scompListener admits the connections a scomp.sock accepts through the
// daemon's connection caps (Server.track), as the other sockets' are:
// a refused one gets an HTTP 429 (503 when shutting down) whose body is
// the JSON-RPC error, and is closed before the HTTP server sees it. An
// admitted one is tracked until its HTTP server or its WebSocket closes
// it. agent names the contained agent whose scomp.sock it is, "" for the
// shared one.
type scompListener struct {
	*net.UnixListener
	s     *Server
	agent string
}

func (l *scompListener) Accept() (net.Conn, error) {
	for {
		c, err := l.UnixListener.AcceptUnix()
		if err != nil {
			return nil, err
		}
		uid, _, err := unixsock.PeerCred(c)
		if err != nil {
			uid = -1
		}
		// face: true keeps Shutdown's closeWaiting off it; stopScomp
		// ends the scomp sessions.
		t := &tracked{c: c, uid: uid, agent: l.agent, kind: kindAgent, face: true}
		if refusal := l.s.track(t); refusal != nil {
			refuseHTTP(c, refusal)
			continue
		}
		return &scompConn{Conn: c, s: l.s, t: t}, nil
	}
}

// scompTCPListener admits the connections the --scomp endpoint accepts
// as the JSON-RPC TCP endpoint's are (Server.admit): each counts against
// the total and, until one of its requests presents the token (AdmitTCP
// takes it out of them), against Limits.UnauthenticatedTCP; one that
// has not authenticated within Limits.Auth is closed, so connections
// that never present the token cannot keep holding those slots. A
// refused one gets an HTTP 429 (503 when shutting down) before its
// request is read, as on scomp.sock.
type scompTCPListener struct {
	net.Listener
	s *Server
}

func (l *scompTCPListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		t := &tracked{c: c, uid: -1, kind: kindTCP, face: true}
		if refusal := l.s.track(t); refusal != nil {
			refuseHTTP(c, refusal)
			continue
		}
		sc := &scompConn{Conn: c, s: l.s, t: t}
		if d := l.s.cfg.Limits.Auth; d > 0 {
			sc.authTimer = time.AfterFunc(d, func() { l.s.closeUnauthenticated(c) })
		}
		return sc, nil
	}
}

// closeUnauthenticated closes c if it is a TCP connection that has not
// authenticated.
func (s *Server) closeUnauthenticated(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.unauth[c]; ok {
		c.Close()
	}
}

// scompConn is an admitted scomp connection; closing it (once) takes it
// out of the count. Server.finish and closeAgentConns close the Conn
// under it (tracked.c), which ends its reads, and then its owner closes
// it. authTimer, on TCP, closes it if it has not authenticated in time.
type scompConn struct {
	net.Conn
	s         *Server
	t         *tracked
	authTimer *time.Timer
	once      sync.Once
}

func (c *scompConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.authTimer != nil {
			c.authTimer.Stop()
		}
		c.s.untrack(c.t)
		c.s.connWG.Done()
	})
	return err
}

// scompConnContext is the scomp.sock servers' ConnContext: the peer's
// credentials for the face, agent's name when it is a contained agent's
// socket, and the connection's tracked entry for the session bound.
func scompConnContext(agent string) func(context.Context, net.Conn) context.Context {
	return func(ctx context.Context, c net.Conn) context.Context {
		sc, ok := c.(*scompConn)
		if !ok {
			return ctx
		}
		ctx = scomp.UnixConnContext(ctx, sc.Conn)
		if agent != "" {
			ctx = scomp.WithAgent(ctx, agent)
		}
		return context.WithValue(ctx, trackedKey{}, sc.t)
	}
}

// scompTCPConnContext is the --scomp server's ConnContext: the
// connection's tracked entry, for admitScompTCP.
func scompTCPConnContext(ctx context.Context, c net.Conn) context.Context {
	if sc, ok := c.(*scompConn); ok {
		ctx = context.WithValue(ctx, trackedKey{}, sc.t)
	}
	return ctx
}

type trackedKey struct{}

// admitScompTCP is the face's AdmitTCP: the request presented the token,
// so its connection is no longer unauthenticated, and the session it
// opens counts against the bound of the TCP sessions. Those all hold the
// one token pcpd wrote, so they are one agent as far as the bound goes:
// together they hold at most Scomp.Sessions.
func (s *Server) admitScompTCP(r *http.Request) (func(), *api.Error) {
	if t, ok := r.Context().Value(trackedKey{}).(*tracked); ok {
		s.authenticated(t.c)
	}
	ss := s.scomp.sessions
	return ss.acquire("tcp", map[string]any{"scope": "scomp_sessions", "limit": ss.limit, "transport": "tcp"}, "the TCP endpoint")
}

// scompSessions bounds the scomp sessions of each agent: a contained
// agent by its name, the TCP endpoint's together, any other by its uid.
//
// Concurrency: mu guards open; every request handler of the scomp.sock
// servers shares it. mu is a leaf: changed is called without it.
type scompSessions struct {
	limit int
	// changed is called after a session ends (Server.notifyConns).
	changed func()
	mu      sync.Mutex
	open    map[string]int
}

func newScompSessions(limit int, changed func()) *scompSessions {
	return &scompSessions{limit: limit, changed: changed, open: map[string]int{}}
}

// count is how many sessions key (as handler makes it) holds.
func (ss *scompSessions) count(key string) int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.open[key]
}

// handler counts each request h serves (an upgraded one is served until
// its session ends) against its agent's bound, refusing those beyond it
// with RATE_LIMITED, scope scomp_sessions.
func (ss *scompSessions) handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t, _ := r.Context().Value(trackedKey{}).(*tracked)
		if t == nil {
			h.ServeHTTP(w, r)
			return
		}
		key, data := "uid:"+strconv.Itoa(t.uid), map[string]any{"scope": "scomp_sessions", "limit": ss.limit, "uid": t.uid}
		who := fmt.Sprintf("uid %d", t.uid)
		if t.agent != "" {
			key, data = "agent:"+t.agent, map[string]any{"scope": "scomp_sessions", "limit": ss.limit, "agent": t.agent}
			who = "agent " + t.agent
		}
		release, e := ss.acquire(key, data, who)
		if e != nil {
			// Connection: close hangs up after the answer, so a refused
			// connection does not hold a slot of the connection caps.
			w.Header().Set("Connection", "close")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write(append(jsonrpc.AppendError(nil, nil, e), '\n'))
			return
		}
		defer release()
		h.ServeHTTP(w, r)
	})
}

// acquire takes one of key's sessions, or answers the refusal (data is
// its data, who names key in its message) when key holds the limit.
// release gives it back.
func (ss *scompSessions) acquire(key string, data map[string]any, who string) (release func(), _ *api.Error) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.open[key] >= ss.limit {
		return nil, api.Errorf(api.CodeRateLimited, data, "scomp session refused: %s already has %d scomp sessions open", who, ss.limit)
	}
	ss.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			ss.mu.Lock()
			if ss.open[key]--; ss.open[key] <= 0 {
				delete(ss.open, key)
			}
			ss.mu.Unlock()
			ss.changed()
		})
	}, nil
}

// refuseHTTP answers a scomp connection refused before its request is
// read: an HTTP error whose body is the JSON-RPC error, then hangs up.
func refuseHTTP(c net.Conn, e *api.Error) {
	status := http.StatusTooManyRequests
	if e.Code != api.CodeRateLimited {
		status = http.StatusServiceUnavailable
	}
	body := append(jsonrpc.AppendError(nil, nil, e), '\n')
	c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), len(body), body)
	c.Close()
}

// newScompHTTP is the HTTP server of one scomp.sock.
func (s *Server) newScompHTTP(agent string) *http.Server {
	return &http.Server{
		Handler:           s.scomp.sessions.handler(s.scomp.face.UnixHandler()),
		ConnContext:       scompConnContext(agent),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}
