package daemon

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/pcp-dev/pcp/internal/face/scomp"
	"github.com/pcp-dev/pcp/internal/policy"
)

// ScompConfig configures the scomp face (internal/face/scomp).
type ScompConfig struct {
	// Socket serves WebSocket over a Unix socket; empty means scomp.sock
	// beside the agent socket.
	Socket string
	// Addr, if set, is a loopback address serving WebSocket over TCP;
	// clients present the bearer token written to TokenFile (default
	// scomp.token beside the agent socket, 0600, new each start).
	Addr      string
	TokenFile string
	// EvalTimeout bounds one eval (default scomp.DefaultEvalTimeout).
	EvalTimeout time.Duration
	// Sessions bounds the scomp sessions open at once on the scomp.sock
	// sockets per agent: per uid on the shared one, per name on a
	// contained agent's own; and those of the TCP endpoint together
	// (default DefaultScompSessions).
	Sessions int
	// MemoryLimit bounds one session's JavaScript heap (default
	// scomp.DefaultMemoryLimit); MemoryTotal bounds the heaps of the
	// sessions open at once together, every transport's (default
	// scomp.DefaultMemoryTotal). Each session reserves MemoryLimit of
	// MemoryTotal while it is open.
	MemoryLimit int
	MemoryTotal int64
	// InvokeTimeout bounds the client's answer to a reverse invoke, and
	// ConfirmWait a binding call's wait for the user's decision (0: the
	// face's defaults).
	InvokeTimeout, ConfirmWait time.Duration
}

func (c *Config) scompDefaults() {
	if c.Scomp.Socket == "" {
		c.Scomp.Socket = filepath.Join(filepath.Dir(c.Socket), "scomp.sock")
	}
	if c.Scomp.Addr != "" && c.Scomp.TokenFile == "" {
		c.Scomp.TokenFile = filepath.Join(filepath.Dir(c.Socket), "scomp.token")
	}
	if c.Scomp.Sessions <= 0 {
		c.Scomp.Sessions = DefaultScompSessions
	}
}

// scompServer is the daemon's part of the scomp face: the face and its
// HTTP servers, one on scomp.sock and one on Addr when set (each
// contained agent's scomp.sock has its own: agents.go). The scomp.sock
// connections count against Limits as the other sockets' do
// (scompListener), and so do the TCP endpoint's (scompTCPListener);
// sessions holds the bound per agent.
type scompServer struct {
	face       *scomp.Server
	sessions   *scompSessions
	unix, tcp  *http.Server
	unixLn, ln net.Listener
}

// newScomp builds the scomp face and binds its listeners. A non-loopback
// Addr is refused.
func (s *Server) newScomp() error {
	cfg := s.cfg.Scomp
	if cfg.Addr != "" {
		if err := loopbackOnly(cfg.Addr); err != nil {
			return fmt.Errorf("--scomp: %w", err)
		}
	}
	limit, total := int64(cmp.Or(cfg.MemoryLimit, scomp.DefaultMemoryLimit)), cmp.Or(cfg.MemoryTotal, scomp.DefaultMemoryTotal)
	if cfg.MemoryLimit < 0 || cfg.MemoryTotal < 0 || total < limit {
		return fmt.Errorf("--scomp-memory-total %d, --scomp-memory-limit %d: the total must hold at least one session's heap", total, limit)
	}
	face := scomp.New(s.b, scomp.Options{MaxMessage: s.cfg.MaxLine, EvalTimeout: cfg.EvalTimeout, Logger: s.log,
		MemoryLimit: cfg.MemoryLimit, MemoryTotal: cfg.MemoryTotal, AdmitTCP: s.admitScompTCP,
		InvokeTimeout: cfg.InvokeTimeout, ConfirmWait: cfg.ConfirmWait,
		SessionLimits: s.scompLimits})
	sc := &scompServer{face: face, sessions: newScompSessions(cfg.Sessions, s.notifyConns)}
	s.scomp = sc
	l, err := s.listenUnix(FDNameScomp, cfg.Socket)
	if err != nil {
		return err
	}
	sc.unixLn = &scompListener{UnixListener: l, s: s}
	sc.unix = s.newScompHTTP("")
	if cfg.Addr == "" {
		return nil
	}
	token, err := writeTokenFile(cfg.TokenFile)
	if err != nil {
		return err
	}
	if sc.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
		return err
	}
	addr := sc.ln.Addr().String()
	sc.ln = &scompTCPListener{Listener: sc.ln, s: s}
	sc.tcp = &http.Server{Handler: face.TCPHandler(addr, token), ConnContext: scompTCPConnContext, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 16 << 10}
	return nil
}

// scompLimits are the eval limits the user's policy in force sets for a
// scomp session of agent ("" for none): the policy file's [scomp] and
// [agents.NAME.scomp] tables win over pcpd's flags, which win over the
// built-in defaults (a zero field leaves the flag's value).
func (s *Server) scompLimits(agent string) scomp.Limits {
	p := s.b.Policy().Scomp(agent)
	var l scomp.Limits
	if p.EvalTimeout.From != policy.FromBuiltin {
		l.EvalTimeout = p.EvalTimeout.Value
	}
	if p.MemoryLimitMiB.From != policy.FromBuiltin {
		l.MemoryLimit = p.MemoryLimitMiB.Value << 20
	}
	return l
}

// ScompAddr is the address the scomp TCP endpoint listens on, "" without
// one.
func (s *Server) ScompAddr() string {
	if s.scomp == nil || s.scomp.ln == nil {
		return ""
	}
	return s.scomp.ln.Addr().String()
}

// serveScomp runs the scomp HTTP servers until stopScomp closes them.
func (s *Server) serveScomp() {
	if s.scomp == nil {
		return
	}
	for _, p := range []struct {
		hs *http.Server
		ln net.Listener
	}{{s.scomp.unix, s.scomp.unixLn}, {s.scomp.tcp, s.scomp.ln}} {
		if p.hs == nil {
			continue
		}
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			if err := p.hs.Serve(p.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("scomp endpoint stopped", "err", err)
			}
		}()
	}
}

// stopScomp closes the scomp endpoints and every scomp session.
func (s *Server) stopScomp() {
	if s.scomp == nil {
		return
	}
	for _, p := range []struct {
		hs *http.Server
		ln net.Listener
	}{{s.scomp.unix, s.scomp.unixLn}, {s.scomp.tcp, s.scomp.ln}} {
		switch {
		case p.hs != nil:
			p.hs.Close()
			if p.ln != nil {
				p.ln.Close() // never served: Close does not close it
			}
		case p.ln != nil:
			p.ln.Close()
		}
	}
	s.scomp.face.Close()
	os.Remove(s.cfg.Scomp.Socket)
	if s.cfg.Scomp.Addr != "" {
		os.Remove(s.cfg.Scomp.TokenFile)
	}
}
