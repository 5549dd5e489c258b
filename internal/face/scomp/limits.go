package scomp

import "time"

// DefaultConfirmWait is Options.ConfirmWait's default: as long as a
// confirmation lives by default, so a user who decides in time is
// waited for.
const DefaultConfirmWait = 2 * time.Minute

// Limits bound a session's evals.
type Limits struct {
	// EvalTimeout bounds one eval's running time (not counting the time
	// it waits for the user to decide a confirmation).
	EvalTimeout time.Duration
	// MemoryLimit bounds the session's JavaScript heap, in bytes.
	MemoryLimit int
}

// limitsFor are the limits of a session of agent ("" for none) now:
// the user's policy for it where it sets them, else the face's options.
func (s *Server) limitsFor(agent string) Limits {
	l := Limits{EvalTimeout: s.opts.EvalTimeout, MemoryLimit: s.opts.MemoryLimit}
	if f := s.opts.SessionLimits; f != nil {
		p := f(agent)
		if p.EvalTimeout > 0 {
			l.EvalTimeout = p.EvalTimeout
		}
		if p.MemoryLimit > 0 {
			l.MemoryLimit = p.MemoryLimit
		}
	}
	return l
}

// limits are the limits of c's next eval. Its heap may not outgrow what
// the connection reserved of Options.MemoryTotal at its upgrade: a
// policy reload lowers a live session's memory limit, and raises it
// only for the sessions opened after.
func (c *conn) limits() Limits {
	l := c.s.limitsFor(c.sess.Info.Agent)
	if c.reserved > 0 && l.MemoryLimit > c.reserved {
		l.MemoryLimit = c.reserved
	}
	return l
}

func (s *Server) confirmWait() time.Duration {
	if s.opts.ConfirmWait > 0 {
		return s.opts.ConfirmWait
	}
	return DefaultConfirmWait
}
