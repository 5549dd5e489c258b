package daemon

import (
	"context"
	"os"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/adapter/notify"
	"github.com/pcp-dev/pcp/internal/core"
)

// notifyTransport names the session of of a decision taken on the desktop
// notification: its audit actor is "user:notification".
const notifyTransport = "notification"

// newNotifier makes the desktop notifier when Config.Notifications asks
// for it, and gives it the broker's confirmations. It connects in Serve.
func (s *Server) newNotifier() {
	if !s.cfg.Notifications {
		return
	}
	s.notifier = notify.New(notify.Config{BusAddress: s.cfg.NotificationsBus, Decide: s.decideFromNotification,
		OnServer: s.notificationServer, Logger: s.log})
	s.b.SetConfirmationPrompter(s.notifier)
}

// decideFromNotification is the user's answer on the notification the
// server sent: approve or deny on a session of the user's role, audited
// as "user:notification", like pcpctl confirm on the control socket.
func (s *Server) decideFromNotification(ctx context.Context, id string, approve bool) error {
	sess := s.b.OpenSession(core.SessionInfo{Role: core.RoleUser, Transport: notifyTransport, UID: os.Getuid(), PID: -1}, core.Endpoint{})
	defer sess.Close()
	ctx = core.WithSession(ctx, sess)
	var err error
	if approve {
		_, err = s.b.ApproveConfirmation(ctx, &api.ConfirmDecisionParams{ConfirmationID: id})
	} else {
		_, err = s.b.DenyConfirmation(ctx, &api.ConfirmDecisionParams{ConfirmationID: id, Reason: "denied on the desktop notification"})
	}
	return err
}

// notificationServer keeps the AT-SPI2 adapter off the windows of the
// process that shows PCP's notifications.
func (s *Server) notificationServer(busName string, pid int) {
	if s.ax != nil {
		s.ax.Protect("notifications", pid)
	}
	s.log.Info("confirmations are shown as desktop notifications", "server", busName, "pid", pid)
}

// startNotifier connects the notifier in the background (Serve).
func (s *Server) startNotifier() {
	if s.notifier == nil {
		return
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		cctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
		defer cancel()
		if err := s.notifier.Connect(cctx); err != nil {
			s.log.Warn("no session bus yet: confirmations are answered with pcpctl confirm until one appears", "err", err)
		}
	}()
}

// closeNotifier takes the notifications down (release), before the
// broker closes.
func (s *Server) closeNotifier() {
	if s.notifier == nil {
		return
	}
	s.b.SetConfirmationPrompter(nil)
	s.notifier.Close()
}
