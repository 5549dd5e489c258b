package tier1

import (
	"encoding/json"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
)

// Message is implemented by every payload type of this package; Type is
// the frame tag that carries it.
type Message interface {
	Type() frame.Type
	check() error
}

// Requests the daemon sends on a per-app socket carry a RequestID; the
// app copies it into its reply. The daemon may have several requests in
// flight on one socket and the app may answer them in any order, so the
// RequestID, not the order of replies, says which request a reply
// answers. The daemon picks the ids; they are unique among the requests
// outstanding on one socket.

// GetManifest (21) asks the app for its signed manifest. Its payload is
// the empty map.
type GetManifest struct{}

// ManifestResponse (22) answers GetManifest.
type ManifestResponse struct {
	AppID string `cbor:"1,keyasint"`
	// Manifest is the signed manifest, a JSON object, byte for byte as
	// the app signed it, so that the daemon can check the signature.
	Manifest json.RawMessage `cbor:"2,keyasint"`
}

// InvokeCapability (19) asks the app to run one capability. The app
// answers with a CapabilityResultMsg carrying the same RequestID.
type InvokeCapability struct {
	RequestID    uint64               `cbor:"1,keyasint"`
	CapabilityID string               `cbor:"2,keyasint"`
	Source       api.InvocationSource `cbor:"3,keyasint"`
	// Params is the JSON object of parameters, verbatim; empty means none.
	Params json.RawMessage `cbor:"4,keyasint,omitempty"`
	// DeadlineMS is how long the daemon waits for the reply, in
	// milliseconds from sending; 0 means the daemon's default (30 s).
	DeadlineMS uint32 `cbor:"5,keyasint,omitempty"`
}

// CapabilityResultMsg (20) answers InvokeCapability. It carries either a
// result (Status and optional Data) or an Error, never both: errors of the
// per-app protocol travel here rather than in ErrorResponse frames.
type CapabilityResultMsg struct {
	RequestID uint64 `cbor:"1,keyasint"`
	// Status is api.StatusSuccess, api.StatusPartial or
	// api.StatusDeferred; empty when Error is set.
	Status string `cbor:"2,keyasint,omitempty"`
	// Data is the result as JSON, verbatim; empty means none.
	Data  json.RawMessage `cbor:"3,keyasint,omitempty"`
	Error *ErrorInfo      `cbor:"4,keyasint,omitempty"`
}

// ErrorInfo is a PCP error inside a Tier 1 reply.
type ErrorInfo struct {
	// Code is a spec 000 error code (api.Code); never 0.
	Code    int32  `cbor:"1,keyasint"`
	Message string `cbor:"2,keyasint,omitempty"`
	// Data is the error's structured context as JSON; empty means none.
	Data json.RawMessage `cbor:"3,keyasint,omitempty"`
}

// ValidateParamsMsg (23) asks the app whether Params are acceptable to
// CapabilityID, without running it.
type ValidateParamsMsg struct {
	RequestID    uint64          `cbor:"1,keyasint"`
	CapabilityID string          `cbor:"2,keyasint"`
	Params       json.RawMessage `cbor:"3,keyasint,omitempty"`
}

// ValidateResultMsg (24) answers ValidateParamsMsg. Valid is false exactly
// when Error is set; Error says what is wrong (INVALID_PARAMS, usually).
type ValidateResultMsg struct {
	RequestID uint64     `cbor:"1,keyasint"`
	Valid     bool       `cbor:"2,keyasint"`
	Error     *ErrorInfo `cbor:"3,keyasint,omitempty"`
}

// QueryState (25) asks the app for its dynamic state.
type QueryState struct {
	RequestID uint64 `cbor:"1,keyasint"`
	// Keys narrows the reply to these top-level keys; empty means all.
	Keys []string `cbor:"2,keyasint,omitempty"`
}

// StateResponse (26) answers QueryState.
type StateResponse struct {
	RequestID uint64 `cbor:"1,keyasint"`
	// State is a JSON object, verbatim.
	State json.RawMessage `cbor:"2,keyasint"`
}

// AppShutdown (27) tells the app to shut down. It has no reply: the
// connection closes.
type AppShutdown struct {
	Reason string `cbor:"1,keyasint,omitempty"`
}

// Ping (8) checks that the peer is alive. Its payload is empty (zero
// bytes); Decode also accepts the empty map.
type Ping struct{}

// Pong (9) answers Ping. An app replies with a zeroed Pong, the empty
// map; the counters are the daemon's (see docs/framed.md).
type Pong struct {
	CapabilityCount   uint64 `cbor:"1,keyasint,omitempty"`
	AppCount          uint64 `cbor:"2,keyasint,omitempty"`
	SubscriptionCount uint64 `cbor:"3,keyasint,omitempty"`
	JournalLength     uint64 `cbor:"4,keyasint,omitempty"`
	UptimeSecs        uint64 `cbor:"5,keyasint,omitempty"`
}

func (GetManifest) Type() frame.Type         { return frame.GetManifest }
func (ManifestResponse) Type() frame.Type    { return frame.ManifestResponse }
func (InvokeCapability) Type() frame.Type    { return frame.InvokeCapability }
func (CapabilityResultMsg) Type() frame.Type { return frame.CapabilityResultMsg }
func (ValidateParamsMsg) Type() frame.Type   { return frame.ValidateParamsMsg }
func (ValidateResultMsg) Type() frame.Type   { return frame.ValidateResultMsg }
func (QueryState) Type() frame.Type          { return frame.QueryState }
func (StateResponse) Type() frame.Type       { return frame.StateResponse }
func (AppShutdown) Type() frame.Type         { return frame.AppShutdown }
func (Ping) Type() frame.Type                { return frame.Ping }
func (Pong) Type() frame.Type                { return frame.Pong }

// ReplyType returns the type that answers a request of type t on a
// per-app socket: 21→22, 19→20, 23→24, 25→26 and 8→9. ok is false for
// AppShutdown, which has no reply, and for every type that is not a
// request on a per-app socket.
func ReplyType(t frame.Type) (reply frame.Type, ok bool) {
	switch t {
	case frame.GetManifest:
		return frame.ManifestResponse, true
	case frame.InvokeCapability:
		return frame.CapabilityResultMsg, true
	case frame.ValidateParamsMsg:
		return frame.ValidateResultMsg, true
	case frame.QueryState:
		return frame.StateResponse, true
	case frame.Ping:
		return frame.Pong, true
	}
	return 0, false
}

// newMessage returns a pointer to a zero message of type t, or nil when t
// carries no Tier 1 payload.
func newMessage(t frame.Type) Message {
	switch t {
	case frame.GetManifest:
		return &GetManifest{}
	case frame.ManifestResponse:
		return &ManifestResponse{}
	case frame.InvokeCapability:
		return &InvokeCapability{}
	case frame.CapabilityResultMsg:
		return &CapabilityResultMsg{}
	case frame.ValidateParamsMsg:
		return &ValidateParamsMsg{}
	case frame.ValidateResultMsg:
		return &ValidateResultMsg{}
	case frame.QueryState:
		return &QueryState{}
	case frame.StateResponse:
		return &StateResponse{}
	case frame.AppShutdown:
		return &AppShutdown{}
	case frame.Ping:
		return &Ping{}
	case frame.Pong:
		return &Pong{}
	}
	return nil
}

// Err returns e as an *api.Error, its Data as a json.RawMessage; nil for
// a nil e.
func (e *ErrorInfo) Err() *api.Error {
	if e == nil {
		return nil
	}
	out := &api.Error{Code: api.Code(e.Code), Message: e.Message}
	if len(e.Data) > 0 {
		out.Data = e.Data
	}
	return out
}

// ErrorInfoOf converts err to the ErrorInfo an app sends: an *api.Error
// keeps its code, message and data; any other error becomes
// INTERNAL_ERROR (api.AsError). Data that does not encode to JSON is
// dropped rather than sent malformed. It returns nil for a nil err.
func ErrorInfoOf(err error) *ErrorInfo {
	pe := api.AsError(err)
	if pe == nil {
		return nil
	}
	out := &ErrorInfo{Code: int32(pe.Code), Message: pe.Message}
	if pe.Data != nil {
		if b, err := json.Marshal(pe.Data); err == nil && string(b) != "null" {
			out.Data = b
		}
	}
	return out
}

// Result returns m's outcome as the core sees it: the result, or m.Error
// as an *api.Error.
func (m *CapabilityResultMsg) Result() (*api.CapabilityResult, error) {
	if m.Error != nil {
		return nil, m.Error.Err()
	}
	return &api.CapabilityResult{Status: m.Status, Data: m.Data}, nil
}
