package frame

import "strconv"

// Type is a message type tag of the framed stream (spec 001's
// StreamMessageType). Tags 1..27 are types; 0 and 28..255 are not.
type Type uint8

// The 27 message types, numbered as in spec 001's registry.
const (
	DetectRequest        Type = 1
	DetectResponse       Type = 2
	ExecuteRequest       Type = 3
	ExecuteResponse      Type = 4
	EventNotification    Type = 5
	RegistryQuery        Type = 6
	RegistryResponse     Type = 7
	Ping                 Type = 8
	Pong                 Type = 9
	RegisterCapability   Type = 10
	UnregisterCapability Type = 11
	ExecuteCapability    Type = 12
	QueryCapabilities    Type = 13
	SubscribeEvents      Type = 14
	UnsubscribeEvents    Type = 15
	PushEvent            Type = 16
	ErrorResponse        Type = 17
	CapabilityResponse   Type = 18
	InvokeCapability     Type = 19
	CapabilityResultMsg  Type = 20
	GetManifest          Type = 21
	ManifestResponse     Type = 22
	ValidateParamsMsg    Type = 23
	ValidateResultMsg    Type = 24
	QueryState           Type = 25
	StateResponse        Type = 26
	AppShutdown          Type = 27

	// MaxType is the highest tag that is a message type.
	MaxType = AppShutdown
)

// Direction says which way a message type travels, as in spec 001's
// direction key. The zero value is not a direction.
type Direction int

const (
	ClientToDaemon Direction = iota + 1 // on the client socket, a request
	DaemonToClient                      // on the client socket, a reply or a push
	Either                              // either way on either socket (Ping)
	Reserved                            // in the enum, not handled by the daemon
	DaemonToApp                         // on a per-app socket, a request to the app
	AppToDaemon                         // on a per-app socket, the app's reply
)

var directionNames = [...]string{
	ClientToDaemon: "client to daemon",
	DaemonToClient: "daemon to client",
	Either:         "either direction",
	Reserved:       "reserved",
	DaemonToApp:    "daemon to app",
	AppToDaemon:    "app to daemon",
}

// String returns the spec's wording, e.g. "client to daemon".
func (d Direction) String() string {
	if d > 0 && int(d) < len(directionNames) {
		return directionNames[d]
	}
	return "Direction(" + strconv.Itoa(int(d)) + ")"
}

// Info is one row of spec 001's message registry.
type Info struct {
	Type      Type
	Name      string // the variant name, e.g. "ExecuteRequest"
	Direction Direction
	// Live reports whether the daemon handles the type. Reserved types
	// are not live: on the client socket they get ErrorResponse 400.
	Live bool
	// Payload is the spec's payload type, verbatim.
	Payload string
}

// registry is indexed by tag; entry 0 is unused.
var registry = [MaxType + 1]Info{
	{},
	{DetectRequest, "DetectRequest", ClientToDaemon, true, "DetectRequestPayload { app_id }"},
	{DetectResponse, "DetectResponse", DaemonToClient, true, "DetectResponsePayload { result: DetectionResult }"},
	{ExecuteRequest, "ExecuteRequest", ClientToDaemon, true, "ExecuteRequestPayload { capability, target?, params, admin }"},
	{ExecuteResponse, "ExecuteResponse", DaemonToClient, true, "ExecuteResponsePayload { result: ExecutionResult }"},
	{EventNotification, "EventNotification", DaemonToClient, true, "PushEventPayload (alias of #16)"},
	{RegistryQuery, "RegistryQuery", ClientToDaemon, true, "RegistryQueryPayload { kind }"},
	{RegistryResponse, "RegistryResponse", DaemonToClient, true, "RegistryResponsePayload { kind }"},
	{Ping, "Ping", Either, true, "PingPayload (empty)"},
	{Pong, "Pong", DaemonToClient, true, "PongPayload { capability_count, app_count, subscription_count, journal_length, uptime_secs }"},
	{RegisterCapability, "RegisterCapability", Reserved, false, "RegisterCapabilityPayload"},
	{UnregisterCapability, "UnregisterCapability", Reserved, false, "UnregisterCapabilityPayload"},
	{ExecuteCapability, "ExecuteCapability", Reserved, false, "alias of #3"},
	{QueryCapabilities, "QueryCapabilities", Reserved, false, "QueryCapabilitiesPayload { filter }"},
	{SubscribeEvents, "SubscribeEvents", ClientToDaemon, true, "SubscribeEventsPayload { filter }"},
	{UnsubscribeEvents, "UnsubscribeEvents", ClientToDaemon, true, "UnsubscribeEventsPayload { subscription_id }"},
	{PushEvent, "PushEvent", DaemonToClient, true, "PushEventPayload { event, sequence }"},
	{ErrorResponse, "ErrorResponse", DaemonToClient, true, "ErrorResponsePayload { code: u16, message }"},
	{CapabilityResponse, "CapabilityResponse", Reserved, false, "CapabilityResponsePayload { capability? }"},
	{InvokeCapability, "InvokeCapability", DaemonToApp, true, "binary payload (Tier 1 path)"},
	{CapabilityResultMsg, "CapabilityResultMsg", AppToDaemon, true, "binary payload"},
	{GetManifest, "GetManifest", DaemonToApp, true, "binary payload"},
	{ManifestResponse, "ManifestResponse", AppToDaemon, true, "binary payload"},
	{ValidateParamsMsg, "ValidateParamsMsg", DaemonToApp, true, "binary payload"},
	{ValidateResultMsg, "ValidateResultMsg", AppToDaemon, true, "binary payload"},
	{QueryState, "QueryState", DaemonToApp, true, "binary payload"},
	{StateResponse, "StateResponse", AppToDaemon, true, "binary payload"},
	{AppShutdown, "AppShutdown", DaemonToApp, true, "binary payload (no response expected)"},
}

var byName = func() map[string]Type {
	m := make(map[string]Type, MaxType)
	for _, in := range registry[1:] {
		m[in.Name] = in.Type
	}
	return m
}()

// Valid reports whether t is one of the 27 message types.
func (t Type) Valid() bool { return t >= 1 && t <= MaxType }

// Info returns t's registry entry; ok is false for a tag that is not a type.
func (t Type) Info() (Info, bool) {
	if !t.Valid() {
		return Info{}, false
	}
	return registry[t], true
}

// String returns the variant name, e.g. "Ping"; a tag that is not a type
// prints as "Type(42)".
func (t Type) String() string {
	if !t.Valid() {
		return "Type(" + strconv.Itoa(int(t)) + ")"
	}
	return registry[t].Name
}

// Registry returns all 27 entries in tag order. The slice is a copy.
func Registry() []Info {
	return append([]Info(nil), registry[1:]...)
}

// ParseType returns the type whose variant name is exactly name.
func ParseType(name string) (Type, bool) {
	t, ok := byName[name]
	return t, ok
}

// AcceptedOnClientSocket reports whether the daemon accepts t as a request
// on the client socket. Spec 001 lists exactly six; every other type a
// client sends, reserved or live, is answered with ErrorResponse 400.
func (t Type) AcceptedOnClientSocket() bool {
	switch t {
	case Ping, RegistryQuery, DetectRequest, ExecuteRequest, SubscribeEvents, UnsubscribeEvents:
		return true
	}
	return false
}
