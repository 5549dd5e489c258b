package api

// The audit contract: what the daemon writes in AuditEntry.Kind, Outcome
// and Detail, for readers of audit.tail (pcpctl, pavo) and for the core
// that writes them. A test in internal/core decodes the details it writes
// strictly into these structs, so the two stay in step.

// Audit entry kinds (AuditEntry.Kind).
const (
	// AuditAgent: an agent's socket was opened or closed (agents.open,
	// agents.close, or the control connection that opened it closing);
	// Outcome is AuditAgentOpened or AuditAgentClosed. Detail:
	// AuditAgentDetail.
	AuditAgent = "agent"
	// AuditRegister: register.capability, or a Tier 1 app's handshake.
	// Detail: AuditRegisterDetail, or AuditErrorDetail when refused.
	AuditRegister = "register"
	// AuditInvoke: an agent's invocation (invoke.capability, ExecuteRequest).
	// Detail: AuditInvokeDetail.
	AuditInvoke = "invoke"
	// AuditInvokeAdmin: an invocation the user made on the control socket.
	// Detail: AuditInvokeDetail.
	AuditInvokeAdmin = "invoke_admin"
	// AuditAction: invoke.action. Detail: AuditActionDetail.
	AuditAction = "action"
	// AuditAdapter: register.adapter. Detail: AuditAdapterDetail.
	AuditAdapter = "adapter"
	// AuditRevoke: revoke.app. Detail: AuditRevokeDetail.
	AuditRevoke = "revoke"
	// AuditAllow: apps.allow. Detail: AuditAllowDetail.
	AuditAllow = "allow"
	// AuditDashboard: the web dashboard handed out a login URL
	// (dashboard.login), a browser traded one for a session, or a session
	// logged out; Outcome is AuditDashboardLoginIssued,
	// AuditDashboardSessionOpened or AuditDashboardSessionClosed. Detail:
	// AuditDashboardDetail.
	AuditDashboard = "dashboard"
	// AuditConfirmation: a confirmation changed state; Outcome is the new
	// state (ConfirmPending, ...). Detail: AuditConfirmationDetail.
	AuditConfirmation = "confirmation"
	// AuditJob: a deferred job changed state; Outcome is the new state
	// (JobQueued, ...). Detail: AuditJobDetail.
	AuditJob = "job"
	// AuditLiveness: an app stopped or resumed answering liveness checks;
	// Outcome is AuditUnresponsive or AuditResponsive. No detail.
	AuditLiveness = "liveness"
	// AuditPolicy: the policy file was (re)loaded; Outcome is
	// AuditPolicyLoaded or AuditPolicyLoadFailed. Detail: AuditPolicyDetail.
	AuditPolicy = "policy"
)

// AuditKinds lists the entry kinds, sorted.
var AuditKinds = []string{
	AuditAction, AuditAdapter, AuditAgent, AuditAllow, AuditConfirmation, AuditDashboard, AuditInvoke, AuditInvokeAdmin,
	AuditJob, AuditLiveness, AuditPolicy, AuditRegister, AuditRevoke,
}

// Audit outcomes besides those named above: a refusal or a failure is the
// error's name (Code.Name(), e.g. "PERMISSION_DENIED"); an invocation
// that ran is its result's status (StatusSuccess, ...).
const (
	AuditSuccess          = "success"
	AuditResponsive       = "responsive"
	AuditUnresponsive     = "unresponsive"
	AuditPolicyLoaded     = "loaded"
	AuditPolicyLoadFailed = "load_failed"
	AuditAgentOpened      = "opened"
	AuditAgentClosed      = "closed"

	AuditDashboardLoginIssued   = "login_issued"
	AuditDashboardSessionOpened = "session_opened"
	AuditDashboardSessionClosed = "session_closed"
)

// The detail structs below list their fields sorted by JSON name, so
// that their encoding is canonical (RFC 8785 orders members the same way);
// a test in this package keeps them so.

// AuditErrorDetail is the detail of a refused registration.
type AuditErrorDetail struct {
	Error string `json:"error"`
	// SuppressedSinceLastEntry counts the refusals of the same kind that
	// were not audited one by one since the last entry.
	SuppressedSinceLastEntry int64 `json:"suppressed_since_last_entry,omitempty"`
}

// AuditRegisterDetail is the detail of a registration.
type AuditRegisterDetail struct {
	CapabilityIDs []string `json:"capability_ids"`
	Publisher     string   `json:"publisher"`
	// Serve is whether the registering connection serves the app.
	Serve  bool `json:"serve"`
	Signed bool `json:"signed"`
}

// AuditInvokeDetail is the detail of an invocation; an entry with none of
// these has no detail.
type AuditInvokeDetail struct {
	// Error is the error's message when it failed.
	Error string `json:"error,omitempty"`
	// Route is where the dispatch sent it: "in_process", "platform",
	// "native", "accessibility:<adapter id>" or "accessibility"; empty when
	// it failed before a route was chosen.
	Route string `json:"route,omitempty"`
	// SuppressedSinceLastEntry counts the refusals of the same kind that
	// the rate limiter did not audit one by one since the last entry.
	SuppressedSinceLastEntry int64 `json:"suppressed_since_last_entry,omitempty"`
}

// AuditActionDetail is the detail of a structural action.
type AuditActionDetail struct {
	Action    string `json:"action"`
	ElementID string `json:"element_id"`
	SurfaceID string `json:"surface_id"`
}

// AuditAdapterDetail is the detail of an adapter's binding.
type AuditAdapterDetail struct {
	AdapterID      string `json:"adapter_id"`
	SupportedTiers []int  `json:"supported_tiers"`
	SurfaceType    string `json:"surface_type"`
}

// AuditAgentDetail is the detail of an agent's socket opening or closing.
type AuditAgentDetail struct {
	Agent string `json:"agent"`
	// Connections counts the agent's connections closed with it.
	Connections int    `json:"connections,omitempty"`
	Reason      string `json:"reason,omitempty"`
	Socket      string `json:"socket"`
}

// AuditDashboardDetail is the detail of a dashboard login or session.
type AuditDashboardDetail struct {
	// Address is the dashboard's listener.
	Address string `json:"address"`
	// ExpiresAt is when an unused login URL stops working (RFC 3339).
	ExpiresAt string `json:"expires_at,omitempty"`
	// Session is a random tag of the browser's session (not its
	// cookie), so that its opening and closing can be matched.
	Session string `json:"session,omitempty"`
}

// AuditRevokeDetail is the detail of a revocation.
type AuditRevokeDetail struct {
	CapabilityIDs           []string `json:"capability_ids"`
	Reason                  string   `json:"reason"`
	TerminatedSubscriptions int      `json:"terminated_subscriptions"`
}

// AuditAllowDetail is the detail of apps.allow.
type AuditAllowDetail struct {
	WasRevoked bool `json:"was_revoked"`
}

// AuditConfirmationDetail is the detail of a confirmation's change.
type AuditConfirmationDetail struct {
	ConfirmationID string `json:"confirmation_id"`
	Description    string `json:"description"`
	Reason         string `json:"reason"`
}

// AuditJobDetail is the detail of a job's change.
type AuditJobDetail struct {
	JobID  string `json:"job_id"`
	Reason string `json:"reason"`
}

// AuditPolicyDetail is the detail of a policy load.
type AuditPolicyDetail struct {
	Error string `json:"error,omitempty"`
	Path  string `json:"path"`
}
