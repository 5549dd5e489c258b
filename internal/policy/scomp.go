package policy

import (
	"fmt"
	"time"
)

// Limits of the scomp face's evals: [scomp] for every session and
// [agents.<name>.scomp] for the sessions of one contained agent (see the
// package doc). The defaults equal the face's own (scomp.DefaultEvalTimeout,
// scomp.DefaultMemoryLimit), so an empty policy changes nothing.
const (
	DefaultScompEvalTimeout = 30 * time.Second
	MinScompEvalTimeout     = MinTimeout
	MaxScompEvalTimeout     = MaxTimeout

	DefaultScompMemoryLimitMiB = 64
	MinScompMemoryLimitMiB     = 1
	MaxScompMemoryLimitMiB     = 4096
)

// ScompLimits are the effective limits of one scomp session's evals.
type ScompLimits struct {
	// EvalTimeout bounds the wall-clock time of one eval.
	EvalTimeout Valued[time.Duration] `json:"eval_timeout"`
	// MemoryLimitMiB bounds the memory of the session's JavaScript VM,
	// in MiB (1 << 20 bytes).
	MemoryLimitMiB Valued[int] `json:"memory_limit_mib"`
}

// scompDoc is a [scomp] or [agents.<name>.scomp] table.
type scompDoc struct {
	EvalTimeout    evalTimeoutSetting `toml:"eval_timeout"`
	MemoryLimitMiB memoryMiBSetting   `toml:"memory_limit_mib"`
}

var scompKS = schema{"eval_timeout": leaf, "memory_limit_mib": leaf}

// evalTimeoutSetting is an optional eval timeout.
type evalTimeoutSetting struct{ durationSetting }

func (s *evalTimeoutSetting) UnmarshalTOML(v any) error {
	return s.unmarshal(v, MinScompEvalTimeout, MaxScompEvalTimeout)
}

// memoryMiBSetting is an optional memory limit in MiB.
type memoryMiBSetting struct {
	set bool
	n   int
}

func (s *memoryMiBSetting) UnmarshalTOML(v any) error {
	n, ok := v.(int64)
	if !ok {
		return fmt.Errorf("want an integer number of MiB, got %s", describeValue(v))
	}
	if n < MinScompMemoryLimitMiB || n > MaxScompMemoryLimitMiB {
		return fmt.Errorf("memory limit %d MiB out of range, want %d to %d", n, MinScompMemoryLimitMiB, MaxScompMemoryLimitMiB)
	}
	s.set, s.n = true, int(n)
	return nil
}

// Scomp returns the effective limits of the evals of a scomp session of
// the contained agent named agent ("" for a session that is none's).
// Each limit is the first set of: agents.<agent>.scomp, scomp, the
// built-in default.
func (p *Policy) Scomp(agent string) ScompLimits {
	l := ScompLimits{
		EvalTimeout:    Valued[time.Duration]{DefaultScompEvalTimeout, FromBuiltin},
		MemoryLimitMiB: Valued[int]{DefaultScompMemoryLimitMiB, FromBuiltin},
	}
	apply := func(d scompDoc, from string) {
		if d.EvalTimeout.set {
			l.EvalTimeout = Valued[time.Duration]{d.EvalTimeout.d, from}
		}
		if d.MemoryLimitMiB.set {
			l.MemoryLimitMiB = Valued[int]{d.MemoryLimitMiB.n, from}
		}
	}
	apply(p.scomp, p.from("scomp"))
	if ag, ok := p.agents[agent]; ok && agent != "" {
		apply(ag.Scomp, p.from("agents", agent, "scomp"))
	}
	return l
}
