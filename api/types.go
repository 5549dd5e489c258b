package api

import (
	"encoding/json"
	"strings"
)

// InvocationSource identifies who initiated an invocation (spec 000).
type InvocationSource string

// SourceSystemIntelligence is the AI agent; today the only source.
const SourceSystemIntelligence InvocationSource = "SystemIntelligence"

// Valid reports whether s is a source spec 000 defines.
func (s InvocationSource) Valid() bool { return s == SourceSystemIntelligence }

// Trust levels of a capability.
const (
	TrustAuto    = "auto"
	TrustConfirm = "confirm"
	TrustDeny    = "deny"
)

// Parameter types a manifest may declare.
const (
	TypeString  = "string"
	TypeInteger = "integer"
	TypeNumber  = "number"
	TypeBoolean = "boolean"
	TypeObject  = "object"
	TypeArray   = "array"
	TypeAny     = "any"
)

// Manifest is a capability manifest as registered (spec 000, extended with
// optional descriptive fields).
type Manifest struct {
	// AppID, when present, must equal the registering app id; being
	// inside the signed object, it binds the signature to that app.
	AppID        string           `json:"app_id,omitempty"`
	Version      string           `json:"version"`
	Capabilities []CapabilityDecl `json:"capabilities"`
	Signature    string           `json:"signature"`
	Publisher    string           `json:"publisher,omitempty"`
	Description  string           `json:"description,omitempty"`
	// AccessibleName, when present, is the app's name on the
	// accessibility bus: while the app has no connection of its own, its
	// capabilities run on that application's accessibility tree (Tier 2).
	AccessibleName string `json:"accessible_name,omitempty"`
}

// CapabilityDecl is one capability in a manifest.
type CapabilityDecl struct {
	Name        string      `json:"name"`
	Tier        int         `json:"tier"`
	TrustLevel  string      `json:"trust_level"`
	Description string      `json:"description,omitempty"`
	Parameters  []ParamDecl `json:"parameters,omitempty"`
	// ConfirmationType names the kind of action for confirmation prompts
	// ("send", "delete", ...).
	ConfirmationType string `json:"confirmation_type,omitempty"`
	// UndoWindowMS is how long an approved action waits before it runs.
	UndoWindowMS int64 `json:"undo_window_ms,omitempty"`
	// TimeoutMS overrides the default execution timeout.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// ParamDecl is one typed parameter of a capability.
type ParamDecl struct {
	Name        string `json:"name"`
	Type        string `json:"type"`
	Description string `json:"description,omitempty"`
	// Required defaults to true: a declared parameter must be given
	// unless the manifest says "required": false.
	Required *bool `json:"required,omitempty"`
}

// IsRequired reports whether the parameter must be present.
func (p ParamDecl) IsRequired() bool { return p.Required == nil || *p.Required }

// RegisterCapabilityParams are the parameters of register.capability.
type RegisterCapabilityParams struct {
	AppID    string          `json:"app_id"`
	Manifest json.RawMessage `json:"manifest"`
	// Serve, when true (the default for a connection that registers), says
	// the registering connection serves invocations of these capabilities.
	Serve *bool `json:"serve,omitempty"`
}

// RegisterCapabilityResult is the result of register.capability.
type RegisterCapabilityResult struct {
	Registered    bool     `json:"registered"`
	CapabilityIDs []string `json:"capability_ids"`
}

// RegisterAdapterParams are the parameters of register.adapter.
type RegisterAdapterParams struct {
	SurfaceType    string `json:"surface_type"`
	AdapterID      string `json:"adapter_id"`
	SupportedTiers []int  `json:"supported_tiers"`
}

// RegisterAdapterResult is the result of register.adapter.
type RegisterAdapterResult struct {
	Bound     bool   `json:"bound"`
	AdapterID string `json:"adapter_id"`
}

// QueryCapabilitiesParams are the parameters of query.capabilities.
type QueryCapabilitiesParams struct {
	AppID string `json:"app_id,omitempty"`
	Tier  *int   `json:"tier,omitempty"`
	// Registered, PCP's extension, leaves out the generic capabilities
	// of the apps reached only through accessibility (tier 2, see
	// App.Via): only the registry's are listed.
	Registered bool `json:"registered,omitempty"`
}

// CapabilityID is the id of an app's capability: "<app id>.<name>".
func CapabilityID(appID, name string) string { return appID + "." + name }

// CapabilityAppID is the app part of a capability id, everything before
// its last dot (a capability's name has none). ok is false when the id
// has no app part.
func CapabilityAppID(id string) (appID string, ok bool) {
	i := strings.LastIndexByte(id, '.')
	if i <= 0 {
		return "", false
	}
	return id[:i], true
}

// Capability is a registered capability as queries return it.
type Capability struct {
	ID               string      `json:"id"`
	Name             string      `json:"name"`
	Tier             int         `json:"tier"`
	TrustLevel       string      `json:"trust_level"`
	AppID            string      `json:"app_id"`
	Description      string      `json:"description,omitempty"`
	Parameters       []ParamDecl `json:"parameters,omitempty"`
	ConfirmationType string      `json:"confirmation_type,omitempty"`
	UndoWindowMS     int64       `json:"undo_window_ms,omitempty"`
	TimeoutMS        int64       `json:"timeout_ms,omitempty"`
	// Available is false while the owning app is registered but not
	// connected to serve it.
	Available bool `json:"available"`
}

// QueryCapabilitiesResult is the result of query.capabilities.
type QueryCapabilitiesResult struct {
	Capabilities []Capability `json:"capabilities"`
}

// QueryElementsParams are the parameters of query.elements.
type QueryElementsParams struct {
	SurfaceID string `json:"surface_id"`
	FocusID   string `json:"focus_id,omitempty"`
}

// Bounds is a rectangle in surface coordinates.
type Bounds struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

// Element is a node of a surface's semantic tree.
type Element struct {
	ID       string          `json:"id"`
	Role     string          `json:"role"`
	Label    string          `json:"label"`
	Bounds   *Bounds         `json:"bounds,omitempty"`
	Actions  []string        `json:"actions,omitempty"`
	States   []string        `json:"states,omitempty"`
	Value    json.RawMessage `json:"value,omitempty"`
	Children []Element       `json:"children,omitempty"`
}

// QueryElementsResult is the result of query.elements.
type QueryElementsResult struct {
	Root Element `json:"root"`
}

// QuerySurfaceParams are the parameters of query.surface.
type QuerySurfaceParams struct {
	SurfaceID string `json:"surface_id"`
}

// Surface is the metadata of a compositor surface (query.surface result).
type Surface struct {
	SurfaceID string  `json:"surface_id"`
	AppID     string  `json:"app_id"`
	Title     string  `json:"title"`
	State     string  `json:"state"`
	Geometry  *Bounds `json:"geometry"`
	Tier      int     `json:"tier"`
}

// SessionContext is the result of query.session_context.
type SessionContext struct {
	SessionID      string         `json:"session_id"`
	FocusedSurface *string        `json:"focused_surface"`
	ActiveSurfaces []string       `json:"active_surfaces"`
	SystemState    map[string]any `json:"system_state"`
}

// InvokeCapabilityParams are the parameters of invoke.capability.
type InvokeCapabilityParams struct {
	CapabilityID string           `json:"capability_id"`
	AppID        string           `json:"app_id"`
	Source       InvocationSource `json:"source"`
	Params       json.RawMessage  `json:"params,omitempty"`
	// ConfirmationID presents the confirmation the daemon handed out
	// with CONFIRMATION_REQUIRED, once the user has decided it.
	ConfirmationID string `json:"confirmation_id,omitempty"`
	// WaitMS, with ConfirmationID, waits up to this long (at most
	// MaxConfirmationWaitMS) for the user to decide a pending one.
	WaitMS int64 `json:"wait_ms,omitempty"`
	// Admin is spec 001's admin flag: the user invoking for themselves,
	// so a confirm capability runs without asking them again. Only the
	// user's connections may set it; from an agent it is refused.
	Admin bool `json:"admin,omitempty"`
	// Attachments chooses how the result's attachments travel on the
	// JSON-RPC face: AttachmentsAuto, AttachmentsFD or AttachmentsInline
	// (see docs/jsonrpc.md, "Attachments"). Other faces ignore it.
	Attachments string `json:"attachments,omitempty"`
}

// MaxConfirmationWaitMS bounds InvokeCapabilityParams.WaitMS.
const MaxConfirmationWaitMS = 60000

// Result statuses of a CapabilityResult.
const (
	StatusSuccess  = "success"
	StatusPartial  = "partial"
	StatusDeferred = "deferred"
)

// CapabilityResult is the result of a successful invocation.
type CapabilityResult struct {
	Status string          `json:"status"`
	Data   json.RawMessage `json:"data,omitempty"`
	// Attachments are binary payloads beside Data, which describes
	// them; each face encodes them its own way (api.Attachment).
	Attachments []Attachment `json:"-"`
}

// ValidStatus reports whether s is a ResultStatus of spec 000.
func ValidStatus(s string) bool {
	return s == StatusSuccess || s == StatusPartial || s == StatusDeferred
}

// InvokeActionParams are the parameters of invoke.action.
type InvokeActionParams struct {
	ElementID string          `json:"element_id"`
	Action    string          `json:"action"`
	Value     json.RawMessage `json:"value,omitempty"`
	SurfaceID string          `json:"surface_id"`
	// ConfirmationID and WaitMS, PCP's extension, present the user's
	// decision on a Tier 3 fallback (input at the element's place) that
	// answered CONFIRMATION_REQUIRED, as invoke.capability's do.
	ConfirmationID string `json:"confirmation_id,omitempty"`
	WaitMS         int64  `json:"wait_ms,omitempty"`
}

// InvokeActionResult is the result of invoke.action.
type InvokeActionResult struct {
	Executed bool            `json:"executed"`
	Result   json.RawMessage `json:"result,omitempty"`
}

// SubscribeEventsParams are the parameters of subscribe.events.
type SubscribeEventsParams struct {
	EventTypes []string `json:"event_types"`
	SurfaceID  string   `json:"surface_id,omitempty"`
	AppID      string   `json:"app_id,omitempty"`
}

// SubscribeEventsResult is the result of subscribe.events.
type SubscribeEventsResult struct {
	SubscriptionID string   `json:"subscription_id"`
	ActiveEvents   []string `json:"active_events"`
}

// UnsubscribeEventsParams are the parameters of unsubscribe.events.
type UnsubscribeEventsParams struct {
	SubscriptionID string `json:"subscription_id"`
}

// UnsubscribeEventsResult is the result of unsubscribe.events.
type UnsubscribeEventsResult struct {
	Cancelled bool `json:"cancelled"`
}

// RevokeAppParams are the parameters of revoke.app.
type RevokeAppParams struct {
	AppID  string `json:"app_id"`
	Reason string `json:"reason,omitempty"`
}

// RevokeAppResult is the result of revoke.app.
type RevokeAppResult struct {
	Revoked                 bool `json:"revoked"`
	TerminatedSubscriptions int  `json:"terminated_subscriptions"`
}

// Health statuses.
const (
	HealthOK       = "ok"
	HealthDegraded = "degraded"
	HealthDown     = "down"
)

// AdapterHealth is one adapter's entry in health.check.
type AdapterHealth struct {
	AdapterID      string `json:"adapter_id"`
	SurfaceType    string `json:"surface_type"`
	SupportedTiers []int  `json:"supported_tiers"`
	Status         string `json:"status"`
	Detail         string `json:"detail,omitempty"`
}

// HealthResult is the result of health.check.
type HealthResult struct {
	Status               string          `json:"status"`
	Adapters             []AdapterHealth `json:"adapters"`
	UptimeMS             int64           `json:"uptime_ms"`
	ActiveSessions       int             `json:"active_sessions"`
	PendingConfirmations int             `json:"pending_confirmations"`
	// AllowUnsigned is true when the daemon accepts unsigned manifests.
	AllowUnsigned bool   `json:"allow_unsigned"`
	Version       string `json:"version"`
	Capabilities  int    `json:"capability_count"`
	Apps          int    `json:"app_count"`
	Subscriptions int    `json:"subscription_count"`
	JournalLength int64  `json:"journal_length"`
	// AuditError is set, and Status is degraded, once an audit entry
	// could not be written: every action is then refused until pcpd is
	// restarted.
	AuditError string `json:"audit_error,omitempty"`
}

// App states in apps.list.
const (
	AppRunning    = "running"
	AppNotRunning = "not_running"
	AppRevoked    = "revoked"
	AppBuiltin    = "builtin"
	// AppUnresponsive: connected, but not answering liveness checks.
	AppUnresponsive = "unresponsive"
)

// App describes a registered or revoked application.
type App struct {
	AppID string `json:"app_id"`
	State string `json:"state"`
	// Tier is how PCP reaches the app: 1 for an app a manifest registers,
	// 2 for one reached only through an accessibility adapter (Via);
	// absent for the daemon's builtins and for revoked apps.
	Tier         int    `json:"tier,omitempty"`
	Via          string `json:"via,omitempty"`
	Capabilities int    `json:"capabilities"`
	Publisher    string `json:"publisher,omitempty"`
	Signed       bool   `json:"signed"`
	RevokedAt    string `json:"revoked_at,omitempty"`
	Reason       string `json:"reason,omitempty"`
}

// AppsListResult is the result of apps.list.
type AppsListResult struct {
	Apps []App `json:"apps"`
}

// AppsAllowParams are the parameters of apps.allow.
type AppsAllowParams struct {
	AppID string `json:"app_id"`
}

// AppsAllowResult is the result of apps.allow.
type AppsAllowResult struct {
	Allowed bool `json:"allowed"`
	// WasRevoked is false when the app was not revoked to begin with.
	WasRevoked bool `json:"was_revoked"`
}

// AppsSocketParams are the parameters of apps.socket: the app and its
// signed manifest, checked as register.capability checks it.
type AppsSocketParams struct {
	AppID    string          `json:"app_id"`
	Manifest json.RawMessage `json:"manifest"`
}

// AppsSocketResult is the result of apps.socket: the per-app socket the
// app connects to and serves the PcpServer contract on.
type AppsSocketResult struct {
	AppID  string `json:"app_id"`
	Socket string `json:"socket"`
}

// AppsStateParams are the parameters of apps.state. Keys narrows the
// state to these top-level keys; empty means all of it.
type AppsStateParams struct {
	AppID string   `json:"app_id"`
	Keys  []string `json:"keys,omitempty"`
}

// AppsStateResult is the result of apps.state: the app's dynamic state,
// a JSON object as the app reported it.
type AppsStateResult struct {
	AppID string          `json:"app_id"`
	State json.RawMessage `json:"state"`
}

// AuditTailParams are the parameters of audit.tail.
type AuditTailParams struct {
	Limit int `json:"limit,omitempty"`
	// Before, when not 0, asks for the entries with a seq below it: the
	// page older than one whose Next it is.
	Before int64 `json:"before,omitempty"`
}

// AuditEntry is one entry of the hash-chained audit log.
type AuditEntry struct {
	Seq          int64           `json:"seq"`
	Time         string          `json:"time"`
	Kind         string          `json:"kind"`
	Source       string          `json:"source,omitempty"`
	Actor        string          `json:"actor,omitempty"`
	AppID        string          `json:"app_id,omitempty"`
	CapabilityID string          `json:"capability_id,omitempty"`
	ParamsDigest string          `json:"params_digest,omitempty"`
	Outcome      string          `json:"outcome"`
	DurationUS   int64           `json:"duration_us"`
	Detail       json.RawMessage `json:"detail,omitempty"`
	PrevHash     string          `json:"prev_hash"`
	Hash         string          `json:"hash"`
}

// AuditTailResult is the result of audit.tail.
type AuditTailResult struct {
	Entries []AuditEntry `json:"entries"`
	// Next is set when the answer holds fewer entries than asked for (the
	// limit was clamped, or the page was cut to fit a frame) and older
	// ones exist: pass it as Before for the next page.
	Next int64 `json:"next,omitempty"`
}

// AuditVerifyResult is the result of audit.verify.
type AuditVerifyResult struct {
	OK      bool   `json:"ok"`
	Entries int64  `json:"entries"`
	Head    string `json:"head,omitempty"`
	// BrokenSeq is the first entry whose hash does not follow.
	BrokenSeq int64  `json:"broken_seq,omitempty"`
	Problem   string `json:"problem,omitempty"`
}

// AuditCheckpointResult is the result of audit.checkpoint: a C2SP
// tlog-checkpoint of the audit log's RFC 6962 Merkle tree, signed with
// the log's Ed25519 key (docs/audit.md).
type AuditCheckpointResult struct {
	// Checkpoint is the signed note: origin, size and base64 root hash
	// lines, a blank line and the signature line.
	Checkpoint string `json:"checkpoint"`
	Origin     string `json:"origin"`
	Size       uint64 `json:"size"`
	// Root is the tree's root hash in hex.
	Root string `json:"root"`
	// Key is the note verifier key that checks the signature.
	Key string `json:"key"`
}

// AuditProveParams are the parameters of audit.prove.
type AuditProveParams struct {
	// Seq is the entry to prove; its leaf index is Seq-1.
	Seq int64 `json:"seq"`
}

// AuditProveResult is the result of audit.prove: an RFC 9162 inclusion
// proof of Entry in the tree of the checkpoint that comes with it.
type AuditProveResult struct {
	Entry     AuditEntry `json:"entry"`
	LeafIndex uint64     `json:"leaf_index"`
	// LeafHash is SHA-256(0x00 || C(entry)) in hex, where C is the
	// canonical form the chain hashes (docs/audit.md).
	LeafHash string `json:"leaf_hash"`
	TreeSize uint64 `json:"tree_size"`
	// Proof is the inclusion path, hex hashes from the leaf up.
	Proof      []string              `json:"proof"`
	Checkpoint AuditCheckpointResult `json:"checkpoint"`
}

// AuditConsistencyParams are the parameters of audit.consistency.
type AuditConsistencyParams struct {
	// Checkpoint is a signed checkpoint audit.checkpoint returned earlier.
	Checkpoint string `json:"checkpoint"`
}

// AuditConsistencyResult is the result of audit.consistency. The daemon
// rereads the log from disk for it. When OK, Proof is the RFC 9162
// consistency proof from the old checkpoint's tree to the tree of
// Checkpoint; when not, Problem says how the log stopped containing the
// old tree (truncated or rewritten) and BrokenSeq, when known, names the
// first entry concerned.
type AuditConsistencyResult struct {
	OK      bool   `json:"ok"`
	OldSize uint64 `json:"old_size"`
	// Size is the number of entries the log holds now.
	Size       uint64                 `json:"size"`
	Proof      []string               `json:"proof,omitempty"`
	Checkpoint *AuditCheckpointResult `json:"checkpoint,omitempty"`
	BrokenSeq  int64                  `json:"broken_seq,omitempty"`
	Problem    string                 `json:"problem,omitempty"`
}

// EventsHistoryParams are the parameters of events.history.
type EventsHistoryParams struct {
	Limit int `json:"limit,omitempty"`
	// Before, when not 0, asks for the events with a sequence below it:
	// the page older than one whose Next it is.
	Before int64 `json:"before,omitempty"`
}

// Event is one entry of the event journal.
type Event struct {
	Sequence  int64           `json:"sequence"`
	Type      string          `json:"type"`
	Timestamp int64           `json:"timestamp"`
	AppID     string          `json:"app_id,omitempty"`
	SurfaceID string          `json:"surface_id,omitempty"`
	Data      json.RawMessage `json:"data"`
}

// EventsHistoryResult is the result of events.history.
type EventsHistoryResult struct {
	Events []Event `json:"events"`
	// Next is set when the answer holds fewer events than asked for (the
	// limit was clamped, or the page was cut to fit a frame) and older
	// ones exist: pass it as Before for the next page.
	Next int64 `json:"next,omitempty"`
}

// SessionAuthenticateParams are the parameters of session.authenticate.
type SessionAuthenticateParams struct {
	Token string `json:"token"`
}

// SessionAuthenticateResult is the result of session.authenticate.
type SessionAuthenticateResult struct {
	Authenticated bool `json:"authenticated"`
}

// EventsLost is the params of the events.lost notification.
type EventsLost struct {
	SubscriptionID string `json:"subscription_id"`
	Lost           int64  `json:"lost"`
	Timestamp      int64  `json:"timestamp"`
}

// SubscriptionEnded is the params of the subscription.ended notification.
type SubscriptionEnded struct {
	SubscriptionID string `json:"subscription_id"`
	Reason         string `json:"reason"`
	Timestamp      int64  `json:"timestamp"`
}

// Confirmation states.
const (
	ConfirmPending  = "pending"
	ConfirmApproved = "approved"
	ConfirmDenied   = "denied"
	ConfirmExpired  = "expired"
	ConfirmUsed     = "used"
)

// Confirmation is a request for the user's decision on one invocation.
type Confirmation struct {
	ConfirmationID   string `json:"confirmation_id"`
	CapabilityID     string `json:"capability_id"`
	AppID            string `json:"app_id"`
	ConfirmationType string `json:"confirmation_type"`
	Description      string `json:"description"`
	UndoWindowMS     int64  `json:"undo_window_ms"`
	State            string `json:"state"`
	// Requester names the connection that asked, e.g. "agent:uid=1000,pid=42".
	Requester string `json:"requester"`
	CreatedAt string `json:"created_at"`
	ExpiresAt string `json:"expires_at"`
	Reason    string `json:"reason,omitempty"`
}

// ConfirmListResult is the result of confirm.list.
type ConfirmListResult struct {
	Confirmations []Confirmation `json:"confirmations"`
}

// ConfirmDecisionParams are the parameters of confirm.approve and
// confirm.deny.
type ConfirmDecisionParams struct {
	ConfirmationID string `json:"confirmation_id"`
	Reason         string `json:"reason,omitempty"`
}

// ConfirmDecisionResult is the result of confirm.approve and confirm.deny.
type ConfirmDecisionResult struct {
	Confirmation Confirmation `json:"confirmation"`
}

// Job states.
const (
	JobQueued    = "queued"
	JobRunning   = "running"
	JobDone      = "done"
	JobFailed    = "failed"
	JobUndone    = "undone"
	JobCancelled = "cancelled"
)

// Job is an approved invocation waiting out its undo window, or its
// outcome.
type Job struct {
	JobID        string          `json:"job_id"`
	CapabilityID string          `json:"capability_id"`
	AppID        string          `json:"app_id"`
	State        string          `json:"state"`
	RunAt        string          `json:"run_at"`
	CreatedAt    string          `json:"created_at"`
	UpdatedAt    string          `json:"updated_at"`
	Requester    string          `json:"requester"`
	Result       json.RawMessage `json:"result,omitempty"`
	Error        json.RawMessage `json:"error,omitempty"`
	Reason       string          `json:"reason,omitempty"`
}

// JobsListParams are the parameters of jobs.list.
type JobsListParams struct {
	Limit int `json:"limit,omitempty"`
	// Before, when not empty, asks for the jobs older than this job: the
	// page after one whose Next it is.
	Before string `json:"before,omitempty"`
}

// JobsListResult is the result of jobs.list.
type JobsListResult struct {
	Jobs []Job `json:"jobs"`
	// Next is set when the answer holds fewer jobs than asked for (the
	// limit was clamped, or the page was cut to fit a frame) and older
	// ones exist: pass it as Before for the next page.
	Next string `json:"next,omitempty"`
}

// JobsUndoParams are the parameters of jobs.undo.
type JobsUndoParams struct {
	JobID string `json:"job_id"`
}

// JobsUndoResult is the result of jobs.undo.
type JobsUndoResult struct {
	Job Job `json:"job"`
}

// PolicyShowParams are the parameters of policy.show.
type PolicyShowParams struct {
	// Source is the invocation source the rows are for; default
	// SystemIntelligence.
	Source string `json:"source,omitempty"`
	// Agent, when set, shows the decisions for the contained agent of
	// that name (its [agents.<name>] rules); a contained agent that
	// leaves it empty sees its own.
	Agent string `json:"agent,omitempty"`
}

// Valued is a setting's effective value and where it came from, e.g.
// "policy.toml: apps.\"org.pcp.notes\"", "manifest", "built-in default".
// Durations are strings such as "30s".
type Valued struct {
	Value any    `json:"value"`
	From  string `json:"from"`
}

// PolicyLimits are the effective rate limits.
type PolicyLimits struct {
	PerApp             Valued `json:"per_app"`
	PerAppBurst        Valued `json:"per_app_burst"`
	PerConnection      Valued `json:"per_connection"`
	PerConnectionBurst Valued `json:"per_connection_burst"`
}

// PolicyScomp are the effective limits of a scomp session's evals.
// EvalTimeout's value is a duration string; MemoryLimitMiB's an integer
// number of MiB.
type PolicyScomp struct {
	EvalTimeout    Valued `json:"eval_timeout"`
	MemoryLimitMiB Valued `json:"memory_limit_mib"`
}

// PolicyCapability is one capability's declared and effective settings.
type PolicyCapability struct {
	CapabilityID string `json:"capability_id"`
	AppID        string `json:"app_id"`
	Name         string `json:"name"`
	Declared     string `json:"declared"`
	TrustLevel   Valued `json:"trust_level"`
	Timeout      Valued `json:"timeout"`
}

// PolicyView is the result of policy.show and policy.reload.
type PolicyView struct {
	Path               string             `json:"path"`
	Loaded             bool               `json:"loaded"`
	Source             string             `json:"source"`
	Agent              string             `json:"agent,omitempty"`
	Limits             PolicyLimits       `json:"limits"`
	ConfirmationExpiry Valued             `json:"confirmation_expiry"`
	Scomp              PolicyScomp        `json:"scomp"` // for Agent's scomp sessions, the global ones without
	Tier3              Valued             `json:"tier3"` // Tier 3's trust level for apps without a tier3 of their own
	Capabilities       []PolicyCapability `json:"capabilities"`
}
