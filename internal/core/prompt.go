package core

import (
	"context"
	"sync"

	"github.com/pcp-dev/pcp/api"
)

// ConfirmationPrompter puts the confirmations that wait for the user in
// front of them on a surface of theirs: pcpd's desktop notification. It
// only shows; the user's answer comes back as ApproveConfirmation or
// DenyConfirmation on a session of the user's role, which the prompter's
// owner opens.
//
// The broker calls Prompt when a confirmation is requested and Withdraw
// once it is no longer pending (approved, denied, expired, ended with its
// connection, used), on whichever surface it was decided. For one
// confirmation the calls come in that order, and a confirmation decided
// before it could be shown is never prompted. They are called one at a
// time, under the broker's prompt lock and no other lock: neither may
// block (a prompter queues and shows in the background) nor call back
// into the broker. Withdraw of an id never prompted, or withdrawn
// already, does nothing.
type ConfirmationPrompter interface {
	Prompt(ctx context.Context, c api.Confirmation)
	Withdraw(confirmationID string)
}

// promptSlot holds the broker's prompter. mu serialises the calls to it
// and is taken before b.confMu (promptChanged checks under it that a
// confirmation is still pending).
type promptSlot struct {
	mu sync.Mutex
	p  ConfirmationPrompter
}

// SetConfirmationPrompter gives the broker the prompter that shows the
// confirmations requested from now on; nil removes it. Confirmations
// always stay decidable on the control socket.
func (b *Broker) SetConfirmationPrompter(p ConfirmationPrompter) {
	b.prompter.mu.Lock()
	b.prompter.p = p
	b.prompter.mu.Unlock()
}

// promptChanged tells the prompter of a confirmation's new state. It is
// called by confirmationChanged, with no lock held.
func (b *Broker) promptChanged(ctx context.Context, info api.Confirmation) {
	b.prompter.mu.Lock()
	defer b.prompter.mu.Unlock()
	p := b.prompter.p
	if p == nil {
		return
	}
	if info.State != api.ConfirmPending {
		p.Withdraw(info.ConfirmationID)
		return
	}
	// The user may have decided between the request and this call: then
	// its Withdraw came first, and nothing is shown.
	b.confMu.Lock()
	cf := b.confs[info.ConfirmationID]
	pending := cf != nil && cf.info.State == api.ConfirmPending
	b.confMu.Unlock()
	if pending {
		p.Prompt(ctx, info)
	}
}
