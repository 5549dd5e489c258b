package stream

import (
	"encoding/json"

	"github.com/pcp-dev/pcp/api"
)

// Payloads of the client socket, as JSON. Spec 001 names them; the field
// names and the shape of the tagged kinds are fixed here and documented
// in docs/framed.md.

// detectRequest is DetectRequestPayload.
type detectRequest struct {
	AppID string `json:"app_id"`
}

// detectResponse is DetectResponsePayload.
type detectResponse struct {
	Result detectionResult `json:"result"`
}

// detectionResult is what the daemon knows of an app: registered by a
// manifest (tier 1), or found by an adapter.
type detectionResult struct {
	AppID        string `json:"app_id"`
	Detected     bool   `json:"detected"`
	Via          string `json:"via,omitempty"` // "manifest", or an adapter id
	Tier         int    `json:"tier,omitempty"`
	State        string `json:"state,omitempty"`
	Capabilities int    `json:"capabilities"`
}

// executeRequest is ExecuteRequestPayload.
type executeRequest struct {
	Capability string          `json:"capability"`
	Target     string          `json:"target,omitempty"`
	Params     json.RawMessage `json:"params,omitempty"`
	Admin      bool            `json:"admin"`
	// ConfirmationID and WaitMS carry a confirmation, as on the JSON-RPC
	// face.
	ConfirmationID string `json:"confirmation_id,omitempty"`
	WaitMS         int64  `json:"wait_ms,omitempty"`
}

// executeResponse is ExecuteResponsePayload; the result is spec 000's
// CapabilityResult.
type executeResponse struct {
	Result *api.CapabilityResult `json:"result"`
}

// registryQuery is RegistryQueryPayload: kind names the variant, the
// other members are the variant's fields.
type registryQuery struct {
	Kind   string          `json:"kind"`
	Filter *registryFilter `json:"filter,omitempty"`
	ID     string          `json:"id,omitempty"`
	Limit  *int            `json:"limit,omitempty"`
	AppID  string          `json:"app_id,omitempty"`
}

type registryFilter struct {
	AppID string `json:"app_id,omitempty"`
	Tier  *int   `json:"tier,omitempty"`
}

// Registry query kinds and the response kinds that answer them.
const (
	kindCapabilities   = "Capabilities"
	kindCapabilityByID = "CapabilityById"
	kindApps           = "Apps"
	kindEventHistory   = "EventHistory"
	kindHealth         = "Health"
	kindElementTree    = "ElementTree"
	kindEvents         = "Events"
	kindElements       = "Elements"
)

// registryResponse is RegistryResponsePayload.
// Exactly one member besides kind is set; the pointers keep an empty
// list as [] rather than leaving the member out.
type registryResponse struct {
	Kind     string            `json:"kind"`
	Caps     *[]api.Capability `json:"caps,omitempty"`
	Apps     *[]api.App        `json:"apps,omitempty"`
	Events   *[]api.Event      `json:"events,omitempty"`
	Health   *pong             `json:"health,omitempty"`
	Elements *[]elementInfo    `json:"elements,omitempty"`
}

// elementInfo is spec 001's flat ElementInfo.
type elementInfo struct {
	AccessiblePath string   `json:"accessible_path"`
	BusName        string   `json:"bus_name"`
	Role           string   `json:"role"`
	Name           *string  `json:"name"`
	Actions        []string `json:"actions"`
	States         []string `json:"states"`
	Text           *string  `json:"text"`
}

// pong is PongPayload.
type pong struct {
	CapabilityCount   int   `json:"capability_count"`
	AppCount          int   `json:"app_count"`
	SubscriptionCount int   `json:"subscription_count"`
	JournalLength     int64 `json:"journal_length"`
	UptimeSecs        int64 `json:"uptime_secs"`
}

// subscribeRequest is SubscribeEventsPayload.
type subscribeRequest struct {
	Filter struct {
		EventTypes []string `json:"event_types"`
		AppID      string   `json:"app_id,omitempty"`
		SurfaceID  string   `json:"surface_id,omitempty"`
	} `json:"filter"`
}

// unsubscribeRequest is UnsubscribeEventsPayload.
type unsubscribeRequest struct {
	SubscriptionID string `json:"subscription_id"`
}

// pushEvent is PushEventPayload.
type pushEvent struct {
	SubscriptionID string       `json:"subscription_id"`
	Sequence       int64        `json:"sequence"`
	Event          pushedDetail `json:"event"`
}

type pushedDetail struct {
	Type      string          `json:"type"`
	Timestamp int64           `json:"timestamp"`
	Data      json.RawMessage `json:"data"`
}

// errorResponse is ErrorResponsePayload: the stream code and message of
// spec 001, with spec 000's code, name and data alongside so that nothing
// is lost between the faces.
type errorResponse struct {
	Code    uint16 `json:"code"`
	Message string `json:"message"`
	PCPCode int    `json:"pcp_code"`
	Name    string `json:"name"`
	Data    any    `json:"data,omitempty"`
}
