// Package api is PCP's wire contract: method names, parameter and result
// types, event types and the error catalogue. It imports only the standard
// library so that the daemon, the Go client, the app SDK and every protocol
// face share one definition.
package api

import "sort"

// Methods of spec 000, sorted.
const (
	MethodHealthCheck         = "health.check"
	MethodInvokeAction        = "invoke.action"
	MethodInvokeCapability    = "invoke.capability"
	MethodQueryCapabilities   = "query.capabilities"
	MethodQueryElements       = "query.elements"
	MethodQuerySessionContext = "query.session_context"
	MethodQuerySurface        = "query.surface"
	MethodRegisterAdapter     = "register.adapter"
	MethodRegisterCapability  = "register.capability"
	MethodRevokeApp           = "revoke.app"
	MethodSubscribeEvents     = "subscribe.events"
	MethodUnsubscribeEvents   = "unsubscribe.events"
)

// SpecMethods lists the methods spec 000 defines, sorted.
var SpecMethods = []string{
	MethodHealthCheck,
	MethodInvokeAction,
	MethodInvokeCapability,
	MethodQueryCapabilities,
	MethodQueryElements,
	MethodQuerySessionContext,
	MethodQuerySurface,
	MethodRegisterAdapter,
	MethodRegisterCapability,
	MethodRevokeApp,
	MethodSubscribeEvents,
	MethodUnsubscribeEvents,
}

// PCP extensions to spec 000. They live in their own namespaces so that
// they can never collide with a spec method.
const (
	// MethodAgentsOpen opens a contained agent's own socket, whose
	// sessions speak for that agent. User only.
	MethodAgentsOpen = "agents.open"
	// MethodAgentsClose closes an agent's socket and its connections.
	// User only.
	MethodAgentsClose = "agents.close"
	// MethodAppsList lists registered applications with their state.
	MethodAppsList = "apps.list"
	// MethodAppsAllow lifts a revocation. User role only.
	MethodAppsAllow = "apps.allow"
	// MethodAppsSocket opens (or finds) the Tier 1 per-app socket of an
	// app whose signed manifest it is given (spec 001).
	MethodAppsSocket = "apps.socket"
	// MethodAppsState asks a Tier 1 app for its dynamic state.
	MethodAppsState = "apps.state"
	// MethodAuditCheckpoint returns a signed checkpoint of the audit
	// log's Merkle tree.
	MethodAuditCheckpoint = "audit.checkpoint"
	// MethodAuditConsistency proves that the audit log extends a
	// checkpoint given to it. User only.
	MethodAuditConsistency = "audit.consistency"
	// MethodAuditProve returns an inclusion proof of one audit entry.
	MethodAuditProve = "audit.prove"
	// MethodAuditTail returns the most recent audit entries.
	MethodAuditTail = "audit.tail"
	// MethodAuditVerify walks the audit chain as stored on disk.
	MethodAuditVerify = "audit.verify"
	// MethodDashboardLogin makes a one-time login URL of the web
	// dashboard (pcpd --dashboard). User only.
	MethodDashboardLogin = "dashboard.login"
	// MethodEventsHistory returns recent events from the journal.
	MethodEventsHistory = "events.history"
	// MethodSessionAuthenticate presents the bearer token on TCP.
	MethodSessionAuthenticate = "session.authenticate"
	// MethodConfirmList lists confirmations: all for the user, the
	// caller's own for an agent.
	MethodConfirmList = "confirm.list"
	// MethodConfirmApprove approves a pending confirmation. User only.
	MethodConfirmApprove = "confirm.approve"
	// MethodConfirmDeny denies a pending confirmation. User only.
	MethodConfirmDeny = "confirm.deny"
	// MethodJobsList lists deferred jobs.
	MethodJobsList = "jobs.list"
	// MethodJobsUndo undoes a queued job before it runs. User only.
	MethodJobsUndo = "jobs.undo"
	// MethodPolicyShow reports the policy in force with provenance.
	MethodPolicyShow = "policy.show"
	// MethodPolicyReload rereads the policy file. User only.
	MethodPolicyReload = "policy.reload"
)

// Notifications the daemon sends that are not event types.
const (
	// NotifyEventsLost tells a subscriber that its queue overflowed.
	NotifyEventsLost = "events.lost"
	// NotifySubscriptionEnded tells a subscriber its subscription was
	// terminated by the daemon (the app was revoked, say).
	NotifySubscriptionEnded = "subscription.ended"
)

// Role is who may call a method.
type Role string

const (
	// RoleAgent methods are open to every authenticated connection: the
	// agent socket, loopback TCP and the user's control socket.
	RoleAgent Role = "agent"
	// RoleUser methods are served on the user's control socket only.
	RoleUser Role = "user"
)

// MethodInfo describes one method of the JSON-RPC face.
type MethodInfo struct {
	Name string
	// Role is the least role that may call it.
	Role Role
	// ReadOnly methods change no state (they may still be costly, like
	// audit.verify): a client may retry one whose answer it lost, and a
	// read-only surface such as pavo's queries may offer it.
	ReadOnly bool
}

// Methods lists every method of the JSON-RPC face, spec 000's and PCP's
// extensions, sorted by name. The face's method table, its role check and
// pavo's retries read it.
var Methods = []MethodInfo{
	{Name: MethodAgentsClose, Role: RoleUser},
	{Name: MethodAgentsOpen, Role: RoleUser},
	{Name: MethodAppsAllow, Role: RoleUser},
	{Name: MethodAppsList, Role: RoleAgent, ReadOnly: true},
	{Name: MethodAppsSocket, Role: RoleAgent},
	{Name: MethodAppsState, Role: RoleAgent, ReadOnly: true},
	{Name: MethodAuditCheckpoint, Role: RoleAgent, ReadOnly: true},
	{Name: MethodAuditConsistency, Role: RoleUser},
	{Name: MethodAuditProve, Role: RoleAgent, ReadOnly: true},
	{Name: MethodAuditTail, Role: RoleAgent, ReadOnly: true},
	{Name: MethodAuditVerify, Role: RoleAgent, ReadOnly: true},
	{Name: MethodConfirmApprove, Role: RoleUser},
	{Name: MethodConfirmDeny, Role: RoleUser},
	{Name: MethodConfirmList, Role: RoleAgent, ReadOnly: true},
	{Name: MethodDashboardLogin, Role: RoleUser},
	{Name: MethodEventsHistory, Role: RoleAgent, ReadOnly: true},
	{Name: MethodHealthCheck, Role: RoleAgent, ReadOnly: true},
	{Name: MethodInvokeAction, Role: RoleAgent},
	{Name: MethodInvokeCapability, Role: RoleAgent},
	{Name: MethodJobsList, Role: RoleAgent, ReadOnly: true},
	{Name: MethodJobsUndo, Role: RoleUser},
	{Name: MethodPolicyReload, Role: RoleUser},
	{Name: MethodPolicyShow, Role: RoleAgent, ReadOnly: true},
	{Name: MethodQueryCapabilities, Role: RoleAgent, ReadOnly: true},
	{Name: MethodQueryElements, Role: RoleAgent, ReadOnly: true},
	{Name: MethodQuerySessionContext, Role: RoleAgent, ReadOnly: true},
	{Name: MethodQuerySurface, Role: RoleAgent, ReadOnly: true},
	{Name: MethodRegisterAdapter, Role: RoleAgent},
	{Name: MethodRegisterCapability, Role: RoleAgent},
	{Name: MethodRevokeApp, Role: RoleAgent},
	{Name: MethodSessionAuthenticate, Role: RoleAgent},
	{Name: MethodSubscribeEvents, Role: RoleAgent},
	{Name: MethodUnsubscribeEvents, Role: RoleAgent},
}

// LookupMethod returns the description of the method called name.
func LookupMethod(name string) (MethodInfo, bool) {
	i := sort.Search(len(Methods), func(i int) bool { return Methods[i].Name >= name })
	if i < len(Methods) && Methods[i].Name == name {
		return Methods[i], true
	}
	return MethodInfo{}, false
}

// ReadOnlyMethods lists the read-only methods, sorted.
func ReadOnlyMethods() []string {
	var out []string
	for _, m := range Methods {
		if m.ReadOnly {
			out = append(out, m.Name)
		}
	}
	return out
}
