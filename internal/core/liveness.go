package core

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// Liveness defaults: a connection serving an app is pinged (AppChannel.Ping)
// every DefaultLivenessInterval and must answer within
// DefaultLivenessTimeout. Any answer counts, an error included: it shows
// the app is reading and writing.
const (
	DefaultLivenessInterval = 10 * time.Second
	DefaultLivenessTimeout  = 5 * time.Second
)

// watchLiveness starts the session's liveness loop once; it runs until
// the session closes.
func (s *Session) watchLiveness() {
	if s.b.cfg.LivenessInterval < 0 || s.ep.App == nil {
		return
	}
	s.liveness.Do(func() { go s.livenessLoop() })
}

func (s *Session) livenessLoop() {
	t := time.NewTicker(s.b.cfg.LivenessInterval)
	defer t.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), s.b.cfg.LivenessTimeout)
		err := s.ep.App.Ping(ctx)
		timedOut := ctx.Err() == context.DeadlineExceeded
		cancel()
		switch {
		case errors.Is(err, net.ErrClosed):
			return
		case timedOut:
			if !s.unresponsive.Swap(true) {
				s.b.livenessChanged(s, false)
			}
		default: // any answer, an error included, shows it is alive
			if s.unresponsive.Swap(false) {
				s.b.livenessChanged(s, true)
			}
		}
	}
}

// livenessChanged records and announces that the apps a session serves
// stopped or resumed answering.
func (b *Broker) livenessChanged(s *Session, responsive bool) {
	s.mu.Lock()
	apps := make([]string, 0, len(s.apps))
	for id := range s.apps {
		apps = append(apps, id)
	}
	s.mu.Unlock()
	ev, outcome := api.EventAppUnresponsive, api.AuditUnresponsive
	if responsive {
		ev, outcome = api.EventAppResponsive, api.AuditResponsive
	}
	for _, id := range apps {
		b.log.Warn("app liveness changed", "app_id", id, "state", outcome)
		b.audit(context.Background(), audit.Record{Kind: api.AuditLiveness, Actor: s.Actor(), AppID: id, Outcome: outcome})
		b.publish(ev, id, "", map[string]any{"app_id": id})
	}
}
