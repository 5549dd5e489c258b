package core

import "context"

// OnDuty reports whether the session has work that keeps its connection
// open while the peer is silent: an app or adapter it serves, a
// subscription it holds, or an agent's socket it opened. Faces use it to
// spare such connections from their idle timeout. It takes b.mu, then
// s.mu (the documented order).
func (s *Session) OnDuty() bool {
	b := s.b
	if b.ownsAgents(s) {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, sub := range b.subs {
		if sub.sess == s {
			return true
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.apps) > 0 || len(s.adapters) > 0
}

// Drain ends every session gracefully, for a daemon's shutdown: each
// connection stops reading, answers what it has already read, then
// closes (see closeGracefully). Sessions without duties go first; those
// serving apps and adapters, which the first wave's requests may be
// waiting on, go once the first wave has ended. Sessions opened meanwhile
// join the next wave. It returns nil once no session is left, or ctx's
// error when it ends first; the caller then closes what is left.
func (b *Broker) Drain(ctx context.Context) error {
	asked := map[*Session]bool{}
	for {
		b.mu.Lock()
		all := make([]*Session, 0, len(b.sessions))
		for _, s := range b.sessions {
			all = append(all, s)
		}
		b.mu.Unlock()
		if len(all) == 0 {
			return nil
		}
		var clients, duty []*Session
		for _, s := range all {
			if s.OnDuty() {
				duty = append(duty, s)
			} else {
				clients = append(clients, s)
			}
		}
		wave := clients
		if len(wave) == 0 {
			wave = duty
		}
		for _, s := range wave {
			if !asked[s] {
				asked[s] = true
				s.closeGracefully()
			}
		}
		for _, s := range wave {
			select {
			case <-s.done:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// GracefulCloser is a Closer that can also end its connection after the
// requests already read are answered: it stops reading, and closes once
// they are. Both faces' connections offer it.
type GracefulCloser interface {
	CloseWhenIdle()
}

// closeGracefully ends the session's connection after the requests it
// has in flight are answered, where its Closer can (GracefulCloser);
// otherwise it closes the session at once.
func (s *Session) closeGracefully() {
	if g, ok := s.ep.Closer.(GracefulCloser); ok {
		g.CloseWhenIdle()
		return
	}
	s.Close()
}
