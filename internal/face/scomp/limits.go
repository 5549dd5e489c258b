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

// limits are the limits of c's next eval: the user's policy for its
// agent where it sets them, else the face's options.
func (c *conn) limits() Limits {
	l := Limits{EvalTimeout: c.s.opts.EvalTimeout, MemoryLimit: c.s.opts.MemoryLimit}
	if f := c.s.opts.SessionLimits; f != nil {
		p := f(c.sess.Info.Agent)
		if p.EvalTimeout > 0 {
			l.EvalTimeout = p.EvalTimeout
		}
		if p.MemoryLimit > 0 {
			l.MemoryLimit = p.MemoryLimit
		}
	}
	return l
}

func (s *Server) confirmWait() time.Duration {
	if s.opts.ConfirmWait > 0 {
		return s.opts.ConfirmWait
	}
	return DefaultConfirmWait
}
