package api

import "encoding/json"

// Payloads of spec 001's framed client face, as JSON. Spec 001 names
// them; their members are fixed here (docs/framed.md) and shared by the
// daemon's face and the Go client.

// DetectRequest is DetectRequestPayload.
type DetectRequest struct {
	AppID string `json:"app_id"`
}

// DetectResponse is DetectResponsePayload.
type DetectResponse struct {
	Result DetectionResult `json:"result"`
}

// DetectionResult is what the daemon knows of an app: registered by a
// manifest (tier 1), or found by an adapter.
type DetectionResult struct {
	AppID        string `json:"app_id"`
	Detected     bool   `json:"detected"`
	Via          string `json:"via,omitempty"` // "manifest", or an adapter id
	Tier         int    `json:"tier,omitempty"`
	State        string `json:"state,omitempty"`
	Capabilities int    `json:"capabilities"`
}

// ExecuteRequest is ExecuteRequestPayload. ConfirmationID and WaitMS
// carry a confirmation as invoke.capability does; Attachments chooses
// how the result's attachments travel, as invoke.capability's does
// (AttachmentsAuto, AttachmentsFD, AttachmentsInline; docs/framed.md).
type ExecuteRequest struct {
	Capability     string          `json:"capability"`
	Target         string          `json:"target,omitempty"`
	Params         json.RawMessage `json:"params,omitempty"`
	Admin          bool            `json:"admin"`
	ConfirmationID string          `json:"confirmation_id,omitempty"`
	WaitMS         int64           `json:"wait_ms,omitempty"`
	Attachments    string          `json:"attachments,omitempty"`
}

// ExecuteResponse is ExecuteResponsePayload; the result is spec 000's
// CapabilityResult.
type ExecuteResponse struct {
	Result *CapabilityResult `json:"result"`
}

// Registry query kinds, and the response kinds that answer them.
const (
	KindCapabilities   = "Capabilities"
	KindCapabilityByID = "CapabilityById"
	KindApps           = "Apps"
	KindEventHistory   = "EventHistory"
	KindHealth         = "Health"
	KindElementTree    = "ElementTree"
	KindEvents         = "Events"
	KindElements       = "Elements"
)

// RegistryQuery is RegistryQueryPayload: Kind names the variant, the
// other members are the variant's fields.
type RegistryQuery struct {
	Kind   string          `json:"kind"`
	Filter *RegistryFilter `json:"filter,omitempty"`
	ID     string          `json:"id,omitempty"`
	Limit  *int            `json:"limit,omitempty"`
	AppID  string          `json:"app_id,omitempty"`
	// Before pages EventHistory as EventsHistoryParams.Before does.
	Before int64 `json:"before,omitempty"`
}

// RegistryFilter narrows a Capabilities query.
type RegistryFilter struct {
	AppID string `json:"app_id,omitempty"`
	Tier  *int   `json:"tier,omitempty"`
}

// RegistryResponse is RegistryResponsePayload. Exactly one member besides
// Kind is set; the pointers keep an empty list as [] rather than leaving
// the member out.
type RegistryResponse struct {
	Kind     string         `json:"kind"`
	Caps     *[]Capability  `json:"caps,omitempty"`
	Apps     *[]App         `json:"apps,omitempty"`
	Events   *[]Event       `json:"events,omitempty"`
	Health   *Pong          `json:"health,omitempty"`
	Elements *[]ElementInfo `json:"elements,omitempty"`
	// Next is EventsHistoryResult.Next for an Events answer.
	Next int64 `json:"next,omitempty"`
}

// ElementInfo is spec 001's flat view of one accessibility node.
type ElementInfo struct {
	AccessiblePath string   `json:"accessible_path"`
	BusName        string   `json:"bus_name"`
	Role           string   `json:"role"`
	Name           *string  `json:"name"`
	Actions        []string `json:"actions"`
	States         []string `json:"states"`
	Text           *string  `json:"text"`
}

// Pong is PongPayload.
type Pong struct {
	CapabilityCount   int   `json:"capability_count"`
	AppCount          int   `json:"app_count"`
	SubscriptionCount int   `json:"subscription_count"`
	JournalLength     int64 `json:"journal_length"`
	UptimeSecs        int64 `json:"uptime_secs"`
}

// StreamSubscribe is SubscribeEventsPayload; no event types means all.
type StreamSubscribe struct {
	Filter struct {
		EventTypes []string `json:"event_types"`
		AppID      string   `json:"app_id,omitempty"`
		SurfaceID  string   `json:"surface_id,omitempty"`
	} `json:"filter"`
}

// PushEvent is PushEventPayload.
type PushEvent struct {
	SubscriptionID string       `json:"subscription_id"`
	Sequence       int64        `json:"sequence"`
	Event          PushedDetail `json:"event"`
}

// PushedDetail is the event a PushEvent carries.
type PushedDetail struct {
	Type      string          `json:"type"`
	Timestamp int64           `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// ErrorResponse is ErrorResponsePayload: spec 001's stream code and
// message, with spec 000's code, name and data alongside so nothing is
// lost between the faces.
type ErrorResponse struct {
	Code    uint16 `json:"code"`
	Message string `json:"message"`
	PCPCode int    `json:"pcp_code"`
	Name    string `json:"name"`
	Data    any    `json:"data,omitempty"`
}
