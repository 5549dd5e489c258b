package daemon

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/pcp-dev/pcp/internal/face/dashboard"
)

// dashServer is the web dashboard (internal/face/dashboard) on its
// loopback listener, with Config.Dashboard.
type dashServer struct {
	face *dashboard.Server
	http *http.Server
	ln   net.Listener
}

// newDashboard binds the dashboard's listener, refusing an address that
// is not loopback, and gives the broker its logins (dashboard.login).
func (s *Server) newDashboard() error {
	if s.cfg.Dashboard == "" {
		return nil
	}
	if err := loopbackOnly(s.cfg.Dashboard); err != nil {
		return fmt.Errorf("--dashboard: %w", err)
	}
	ln, err := net.Listen("tcp", s.cfg.Dashboard)
	if err != nil {
		return fmt.Errorf("--dashboard: %w", err)
	}
	face := dashboard.New(s.b, dashboard.Options{Addr: ln.Addr().String(), Logger: s.log})
	s.dash = &dashServer{face: face, ln: ln, http: &http.Server{Handler: face.Handler(), ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes: 16 << 10, IdleTimeout: 2 * time.Minute}}
	s.b.SetDashboard(face)
	return nil
}

// DashboardAddr is the address the dashboard listens on, "" without one.
func (s *Server) DashboardAddr() string {
	if s.dash == nil {
		return ""
	}
	return s.dash.ln.Addr().String()
}

// serveDashboard runs the dashboard's HTTP server until stopDashboard.
func (s *Server) serveDashboard() {
	if s.dash == nil {
		return
	}
	s.log.Info("dashboard listening; pcpctl dashboard opens it", "addr", s.DashboardAddr())
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		if err := s.dash.http.Serve(s.dash.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("dashboard stopped", "err", err)
		}
	}()
}

// stopDashboard takes the logins away, closes the listener and the
// browsers' connections, and ends the event streams.
func (s *Server) stopDashboard() {
	if s.dash == nil {
		return
	}
	s.b.SetDashboard(nil)
	s.dash.http.Close() // closes the listener too, served or not
	s.dash.face.Close()
}
