package core

import (
	"context"
	"sync/atomic"

	"github.com/pcp-dev/pcp/api"
)

// auditGate keeps the core from acting while its audit log cannot be
// written (fail closed). The first append that fails closes the gate for
// the rest of the broker's life: an append that failed once (a commit
// refused, the chain's head taken by another writer) says the log and
// this process no longer agree, and only a restart, which rereads the
// head, can settle that.
//
// Every action checks the gate before it runs; its audit entry is
// appended after it ran, so the actions already past the gate when the
// first append fails still run: at most those in flight at that moment.
// No action starts after it.
type auditGate struct {
	// failed is the refusal answered once the gate is closed; nil while
	// it is open.
	failed atomic.Pointer[api.Error]
}

// auditAvailable answers nil while the audit log can be written, else
// the INTERNAL_ERROR every action is refused with.
func (b *Broker) auditAvailable() error {
	if e := b.gate.failed.Load(); e != nil {
		return e
	}
	return nil
}

// auditUnavailable closes the gate after an append failed with err, and
// returns the refusal.
func (b *Broker) auditUnavailable(err error) *api.Error {
	e := api.Errorf(api.CodeInternalError, map[string]any{"audit": "unavailable", "reason": err.Error()},
		"%v; pcpd refuses every action until it is restarted", err)
	if b.gate.failed.CompareAndSwap(nil, e) {
		b.log.Error("audit log unavailable: refusing every action until restart", "err", err)
		return e
	}
	return b.gate.failed.Load()
}

// auditHealth reports the gate for health.check: empty while open.
func (b *Broker) auditHealth() string {
	if e := b.gate.failed.Load(); e != nil {
		return e.Message
	}
	return ""
}

// sessionEnded settles what a closing connection leaves behind: the
// refusals it was refused that are not yet written, and the
// confirmations it asked for that nobody waits on any more. Called by
// closeSession, without locks held.
func (b *Broker) sessionEnded(s *Session) {
	b.flushRefusals(context.Background(), "conn:"+s.ID+":")
	b.endConfirmations(s)
}
