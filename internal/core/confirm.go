package core

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// DefaultConfirmationTTL is how long a confirmation waits for the user,
// and then how long an approval waits to be used.
const DefaultConfirmationTTL = 2 * time.Minute

// maxPendingPerSession bounds the confirmations one connection may have
// waiting, so an agent cannot bury the user in prompts.
const maxPendingPerSession = 32

// timeFormat is how confirmations and jobs write times.
const timeFormat = time.RFC3339Nano

// confirmation is one request for the user's decision. It is bound to the
// capability, a digest of the parameters and the session that asked: only
// that session, presenting that id with those parameters, gets the
// approved action, and only once.
//
// All fields are guarded by Broker.confMu.
type confirmation struct {
	info    api.Confirmation
	digest  string
	session *Session
	expires time.Time
	decided chan struct{} // closed when approved or denied
	stop    func() bool   // cancels the expiry timer
}

// confirmGate applies a confirm trust level. It returns nil when the
// caller presented an approved, unused confirmation of exactly this
// invocation (which it consumes), and otherwise the error to answer:
// CONFIRMATION_REQUIRED (a new confirmation, or the still pending one),
// CONFIRMATION_DENIED or CONFIRMATION_EXPIRED.
func (b *Broker) confirmGate(ctx context.Context, p *api.InvokeCapabilityParams, c *api.Capability) error {
	sess := SessionFrom(ctx)
	digest := audit.ParamsDigest(p.Params)
	if p.ConfirmationID != "" && sess != nil {
		b.confMu.Lock()
		cf := b.confs[p.ConfirmationID]
		match := cf != nil && cf.session == sess && cf.info.CapabilityID == c.ID && cf.info.AppID == c.AppID && cf.digest == digest
		if match && cf.info.State == api.ConfirmPending && p.WaitMS > 0 {
			wait := min(time.Duration(min(p.WaitMS, api.MaxConfirmationWaitMS))*time.Millisecond, cf.expires.Sub(b.now()))
			decided := cf.decided
			b.confMu.Unlock()
			if wait > 0 {
				t := time.NewTimer(wait)
				select {
				case <-decided:
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
			}
			b.confMu.Lock()
		}
		if match {
			if b.expireLocked(cf, b.now()) {
				info := cf.info
				b.confMu.Unlock()
				b.confirmationChanged(ctx, info, "")
				b.confMu.Lock()
			}
			info := cf.info
			switch info.State {
			case api.ConfirmApproved:
				cf.info.State = api.ConfirmUsed
				b.confMu.Unlock()
				b.confirmationChanged(ctx, cf.info, "")
				return nil
			case api.ConfirmDenied:
				b.confMu.Unlock()
				return api.Errorf(api.CodeConfirmationDenied, map[string]any{"confirmation_id": info.ConfirmationID, "capability_id": c.ID, "reason": info.Reason},
					"the user denied %s", c.ID)
			case api.ConfirmExpired:
				b.confMu.Unlock()
				return api.Errorf(api.CodeConfirmationExpired, map[string]any{"confirmation_id": info.ConfirmationID, "capability_id": c.ID, "expired_at": info.ExpiresAt},
					"the confirmation of %s expired at %s", c.ID, info.ExpiresAt)
			case api.ConfirmPending:
				b.confMu.Unlock()
				return confirmationRequired(info)
			}
			// Used: a replay gets a fresh confirmation.
		}
		b.confMu.Unlock()
	}
	return b.requestConfirmation(ctx, p, c, digest)
}

func confirmationRequired(info api.Confirmation) error {
	return api.Errorf(api.CodeConfirmationRequired, map[string]any{
		"confirmation_id":   info.ConfirmationID,
		"capability_id":     info.CapabilityID,
		"confirmation_type": info.ConfirmationType,
		"undo_window_ms":    info.UndoWindowMS,
		"description":       info.Description,
		"expires_at":        info.ExpiresAt,
	}, "Confirmation required")
}

// requestConfirmation opens a new confirmation and answers
// CONFIRMATION_REQUIRED with it.
func (b *Broker) requestConfirmation(ctx context.Context, p *api.InvokeCapabilityParams, c *api.Capability, digest string) error {
	sess := SessionFrom(ctx)
	if sess == nil {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"capability_id": c.ID}, "%s needs the user's confirmation, which needs a connection", c.ID)
	}
	// Forget what expired or was decided long ago, so the table stays
	// bounded even if nobody lists it.
	b.sweepConfirmations()
	now := b.now()
	ttl := b.confirmationTTL()
	cf := &confirmation{
		info: api.Confirmation{
			ConfirmationID:   b.newID("conf"),
			CapabilityID:     c.ID,
			AppID:            c.AppID,
			ConfirmationType: confirmationType(c),
			Description:      describe(c, p.Params),
			UndoWindowMS:     c.UndoWindowMS,
			State:            api.ConfirmPending,
			Requester:        sess.Actor(),
			CreatedAt:        now.UTC().Format(timeFormat),
			ExpiresAt:        now.Add(ttl).UTC().Format(timeFormat),
		},
		digest:  digest,
		session: sess,
		expires: now.Add(ttl),
		decided: make(chan struct{}),
	}
	b.confMu.Lock()
	pending := 0
	for _, o := range b.confs {
		if o.session == sess && o.info.State == api.ConfirmPending {
			pending++
		}
	}
	if pending >= maxPendingPerSession {
		b.confMu.Unlock()
		return api.Errorf(api.CodeRateLimited, map[string]any{"scope": "confirmations", "pending": pending, "retry_after_ms": ttl.Milliseconds()},
			"%d confirmations are already waiting for the user", pending)
	}
	b.confs[cf.info.ConfirmationID] = cf
	cf.stop = b.afterFunc(ttl, func() { b.expire(cf.info.ConfirmationID) })
	b.confMu.Unlock()
	if err := b.confirmationChanged(ctx, cf.info, ""); err != nil {
		return err
	}
	return confirmationRequired(cf.info)
}

func (b *Broker) confirmationTTL() time.Duration { return b.confirmationExpiry() }

// expire marks a confirmation expired when its time has come.
func (b *Broker) expire(id string) {
	b.confMu.Lock()
	cf := b.confs[id]
	changed := cf != nil && b.expireLocked(cf, b.now().Add(time.Millisecond))
	var info api.Confirmation
	if changed {
		info = cf.info
	}
	b.confMu.Unlock()
	if changed {
		b.confirmationChanged(context.Background(), info, "")
	}
}

// expireLocked moves a pending or approved confirmation past its expiry
// to expired, reporting whether it did. b.confMu must be held; the
// caller announces the change.
func (b *Broker) expireLocked(cf *confirmation, now time.Time) bool {
	if (cf.info.State == api.ConfirmPending || cf.info.State == api.ConfirmApproved) && !now.Before(cf.expires) {
		cf.info.State = api.ConfirmExpired
		return true
	}
	return false
}

// confirmationChanged audits a confirmation's new state and publishes it.
func (b *Broker) confirmationChanged(ctx context.Context, info api.Confirmation, actor string) error {
	if actor == "" {
		actor = info.Requester
	}
	detail, _ := json.Marshal(map[string]any{"confirmation_id": info.ConfirmationID, "description": info.Description, "reason": info.Reason})
	err := b.audit(ctx, audit.Record{Kind: "confirmation", Actor: actor, AppID: info.AppID, CapabilityID: info.CapabilityID, Outcome: info.State, Detail: detail})
	ev := map[string]string{
		api.ConfirmPending: api.EventConfirmationRequested, api.ConfirmApproved: api.EventConfirmationApproved,
		api.ConfirmDenied: api.EventConfirmationDenied, api.ConfirmExpired: api.EventConfirmationExpired,
	}[info.State]
	if ev != "" {
		b.publish(ev, info.AppID, "", info)
	}
	return err
}

// Confirmations lists confirmations, newest first: every one for the
// user, the caller's own for an agent. Decided ones stay listed until
// they expire.
func (b *Broker) Confirmations(ctx context.Context) (*api.ConfirmListResult, error) {
	sess := SessionFrom(ctx)
	user := roleOf(ctx) == RoleUser
	b.sweepConfirmations()
	b.confMu.Lock()
	out := []api.Confirmation{}
	for _, cf := range b.confs {
		if user || (sess != nil && cf.session == sess) {
			out = append(out, cf.info)
		}
	}
	b.confMu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt > out[j].CreatedAt
		}
		return out[i].ConfirmationID > out[j].ConfirmationID
	})
	return &api.ConfirmListResult{Confirmations: out}, nil
}

// sweepConfirmations expires what is due and forgets confirmations
// decided or expired more than a TTL ago.
func (b *Broker) sweepConfirmations() {
	now := b.now()
	var changed []api.Confirmation
	b.confMu.Lock()
	for id, cf := range b.confs {
		if b.expireLocked(cf, now) {
			changed = append(changed, cf.info)
		}
		if cf.info.State != api.ConfirmPending && now.Sub(cf.expires) > b.confirmationTTL() {
			delete(b.confs, id)
		}
	}
	b.confMu.Unlock()
	for _, info := range changed {
		b.confirmationChanged(context.Background(), info, "")
	}
}

// PendingConfirmations counts the confirmations waiting for the user.
func (b *Broker) PendingConfirmations() int {
	now := b.now()
	b.confMu.Lock()
	defer b.confMu.Unlock()
	n := 0
	for _, cf := range b.confs {
		if cf.info.State == api.ConfirmPending && now.Before(cf.expires) {
			n++
		}
	}
	return n
}

// ApproveConfirmation is the user's yes. Only the user may call it.
func (b *Broker) ApproveConfirmation(ctx context.Context, p *api.ConfirmDecisionParams) (*api.ConfirmDecisionResult, error) {
	return b.decide(ctx, p, api.ConfirmApproved)
}

// DenyConfirmation is the user's no. Only the user may call it.
func (b *Broker) DenyConfirmation(ctx context.Context, p *api.ConfirmDecisionParams) (*api.ConfirmDecisionResult, error) {
	return b.decide(ctx, p, api.ConfirmDenied)
}

func (b *Broker) decide(ctx context.Context, p *api.ConfirmDecisionParams, state string) (*api.ConfirmDecisionResult, error) {
	if roleOf(ctx) != RoleUser {
		return nil, api.Errorf(api.CodePermissionDenied, map[string]any{"required_role": "user"}, "only the user decides confirmations; use the control socket")
	}
	if p.ConfirmationID == "" {
		return nil, api.MissingParam("confirmation_id")
	}
	b.sweepConfirmations()
	b.confMu.Lock()
	cf := b.confs[p.ConfirmationID]
	if cf == nil {
		b.confMu.Unlock()
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "confirmation_id", "confirmation_id": p.ConfirmationID},
			"confirmation_id: no confirmation %s", p.ConfirmationID)
	}
	switch cf.info.State {
	case api.ConfirmExpired:
		info := cf.info
		b.confMu.Unlock()
		return nil, api.Errorf(api.CodeConfirmationExpired, map[string]any{"confirmation_id": info.ConfirmationID, "expired_at": info.ExpiresAt},
			"confirmation %s expired at %s", info.ConfirmationID, info.ExpiresAt)
	case api.ConfirmPending:
	default:
		info := cf.info
		b.confMu.Unlock()
		return nil, api.Errorf(api.CodeInvalidParams, map[string]any{"field": "confirmation_id", "confirmation_id": info.ConfirmationID, "state": info.State},
			"confirmation_id: %s is already %s", info.ConfirmationID, info.State)
	}
	cf.info.State, cf.info.Reason = state, p.Reason
	close(cf.decided)
	info := cf.info
	b.confMu.Unlock()
	if err := b.confirmationChanged(ctx, info, SessionFrom(ctx).Actor()); err != nil {
		return nil, err
	}
	return &api.ConfirmDecisionResult{Confirmation: info}, nil
}
