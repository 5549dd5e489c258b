package core

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// DefaultConfirmationTTL is how long a confirmation waits for the user,
// and then how long an approval waits to be used.
const DefaultConfirmationTTL = 2 * time.Minute

// Bounds on the confirmations waiting for the user, so that no agent can
// bury the user in prompts: per connection, per agent (the peer's uid on
// a Unix socket; each TCP session is an agent of its own) and in total.
// A request over a bound is refused with RATE_LIMITED, scope
// "confirmations", naming the bound in "per".
const (
	maxPendingPerSession = 32
	maxPendingPerAgent   = 64
	maxPendingTotal      = 128
)

// endedReason is the reason given to a confirmation whose connection
// closed while it was pending.
const endedReason = "the connection that asked for it closed"

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
	// decided is closed (wake) once the confirmation has left pending
	// (approved, denied, expired) and the change is announced, so a
	// request waiting on it answers after the audit entry and event of
	// the decision.
	decided  chan struct{}
	wakeOnce sync.Once
	stop     func() bool // cancels the expiry timer
	// waiters counts the requests waiting on the decision by id
	// (confirmGate with wait_ms).
	waiters int
	// orphaned is set when the session that asked closed while requests
	// still waited on the confirmation: the last of them to leave ends it.
	orphaned bool
}

// confirmGate applies a confirm trust level. It returns nil when the
// caller presented an approved, unused confirmation of exactly this
// invocation (which it consumes), and otherwise the error to answer:
// CONFIRMATION_REQUIRED (a new confirmation, or the still pending one),
// CONFIRMATION_DENIED or CONFIRMATION_EXPIRED. describe gives a new
// confirmation's description; it is called only when one is opened.
func (b *Broker) confirmGate(ctx context.Context, p *api.InvokeCapabilityParams, c *api.Capability, describe func() string) error {
	sess := SessionFrom(ctx)
	digest := audit.ParamsDigest(p.Params)
	if p.ConfirmationID != "" && sess != nil {
		b.confMu.Lock()
		cf := b.confs[p.ConfirmationID]
		match := cf != nil && cf.session == sess && cf.info.CapabilityID == c.ID && cf.info.AppID == c.AppID && cf.digest == digest
		if match && cf.info.State == api.ConfirmPending && p.WaitMS > 0 {
			wait := min(time.Duration(min(p.WaitMS, api.MaxConfirmationWaitMS))*time.Millisecond, cf.expires.Sub(b.now()))
			decided := cf.decided
			cf.waiters++
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
			cf.waiters--
			if cf.orphaned && cf.waiters == 0 && b.endLocked(cf) {
				info := cf.info
				b.confMu.Unlock()
				b.confirmationChanged(ctx, info, "")
				b.confMu.Lock()
			}
		}
		if match {
			if b.expireLocked(cf, b.now()) {
				info := cf.info
				b.confMu.Unlock()
				b.confirmationChanged(ctx, info, "")
				cf.wake()
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
	return b.requestConfirmation(ctx, p, c, digest, describe)
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
func (b *Broker) requestConfirmation(ctx context.Context, p *api.InvokeCapabilityParams, c *api.Capability, digest string, describe func() string) error {
	sess := SessionFrom(ctx)
	if sess == nil {
		return api.Errorf(api.CodePermissionDenied, map[string]any{"capability_id": c.ID}, "%s needs the user's confirmation, which needs a connection", c.ID)
	}
	// Described before the table is swept and bounded: an adapter may
	// take a while to say which element the action is on.
	description := describe()
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
			Description:      description,
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
	if err := b.pendingBoundLocked(sess, ttl); err != nil {
		b.confMu.Unlock()
		return err
	}
	b.confs[cf.info.ConfirmationID] = cf
	cf.stop = b.afterFunc(ttl, func() { b.expire(cf.info.ConfirmationID) })
	info := cf.info
	b.confMu.Unlock()
	err := b.confirmationChanged(ctx, info, "")
	// A connection that closed while it asked must not leave its prompt
	// behind: its close either saw the confirmation, or is seen here.
	sess.mu.Lock()
	gone := sess.closed
	sess.mu.Unlock()
	if gone {
		b.endConfirmations(sess)
	}
	if err != nil {
		return err
	}
	return confirmationRequired(info)
}

// agentOf names the agent a session speaks for, for the per-agent bound:
// a contained agent's name, the peer's uid on a Unix socket, else the
// session itself.
func agentOf(s *Session) string {
	if s.Info.Agent != "" {
		return "name:" + s.Info.Agent
	}
	if s.Info.Transport == "unix" && s.Info.UID >= 0 {
		return fmt.Sprintf("uid:%d", s.Info.UID)
	}
	return "session:" + s.ID
}

// pendingBoundLocked refuses a new confirmation for sess when a bound on
// the pending ones is reached. b.confMu must be held.
func (b *Broker) pendingBoundLocked(sess *Session, ttl time.Duration) error {
	agent := agentOf(sess)
	var perSession, perAgent, total int
	for _, o := range b.confs {
		if o.info.State != api.ConfirmPending {
			continue
		}
		total++
		if o.session == sess {
			perSession++
		}
		if agentOf(o.session) == agent {
			perAgent++
		}
	}
	refuse := func(per string, pending int, format string) error {
		return api.Errorf(api.CodeRateLimited, map[string]any{"scope": "confirmations", "per": per, "pending": pending, "retry_after_ms": ttl.Milliseconds()},
			format, pending)
	}
	switch {
	case perSession >= maxPendingPerSession:
		return refuse("connection", perSession, "%d confirmations are already waiting for the user")
	case perAgent >= maxPendingPerAgent:
		return refuse("agent", perAgent, "%d confirmations of this agent are already waiting for the user")
	case total >= maxPendingTotal:
		return refuse("daemon", total, "%d confirmations are already waiting for the user, as many as pcpd keeps")
	}
	return nil
}

// endConfirmations ends the pending confirmations s asked for, now that
// it has closed: nobody can use their approval. One that a request still
// waits on by id ends when the last such request leaves (confirmGate).
func (b *Broker) endConfirmations(s *Session) {
	var ended []api.Confirmation
	b.confMu.Lock()
	for id, cf := range b.confs {
		if cf.session != s || cf.info.State != api.ConfirmPending {
			continue
		}
		if cf.waiters > 0 {
			cf.orphaned = true
			continue
		}
		if b.endLocked(cf) {
			ended = append(ended, cf.info)
			delete(b.confs, id)
		}
	}
	b.confMu.Unlock()
	for _, info := range ended {
		b.confirmationChanged(context.Background(), info, "")
	}
}

// endLocked expires a pending confirmation whose connection closed,
// reporting whether it did. b.confMu must be held; the caller announces
// the change.
func (b *Broker) endLocked(cf *confirmation) bool {
	if cf.info.State != api.ConfirmPending {
		return false
	}
	cf.info.State, cf.info.Reason = api.ConfirmExpired, endedReason
	if cf.stop != nil {
		cf.stop()
	}
	return true
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
		cf.wake()
	}
}

// wake lets the requests waiting on the confirmation go, once.
func (cf *confirmation) wake() { cf.wakeOnce.Do(func() { close(cf.decided) }) }

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
	detail := detailOf(&api.AuditConfirmationDetail{ConfirmationID: info.ConfirmationID, Description: info.Description, Reason: info.Reason})
	err := b.audit(ctx, audit.Record{Kind: api.AuditConfirmation, Actor: actor, AppID: info.AppID, CapabilityID: info.CapabilityID, Outcome: info.State, Detail: detail})
	ev := map[string]string{
		api.ConfirmPending: api.EventConfirmationRequested, api.ConfirmApproved: api.EventConfirmationApproved,
		api.ConfirmDenied: api.EventConfirmationDenied, api.ConfirmExpired: api.EventConfirmationExpired,
	}[info.State]
	if ev != "" {
		b.publish(ev, info.AppID, "", info)
	}
	b.promptChanged(ctx, info)
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
	var woken []*confirmation
	b.confMu.Lock()
	for id, cf := range b.confs {
		if b.expireLocked(cf, now) {
			changed = append(changed, cf.info)
			woken = append(woken, cf)
		}
		if cf.info.State != api.ConfirmPending && now.Sub(cf.expires) > b.confirmationTTL() {
			delete(b.confs, id)
		}
	}
	b.confMu.Unlock()
	for i, info := range changed {
		b.confirmationChanged(context.Background(), info, "")
		woken[i].wake()
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
	if err := b.auditAvailable(); err != nil {
		return nil, err
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
	info := cf.info
	b.confMu.Unlock()
	err := b.confirmationChanged(ctx, info, SessionFrom(ctx).Actor())
	cf.wake()
	if err != nil {
		return nil, err
	}
	return &api.ConfirmDecisionResult{Confirmation: info}, nil
}
