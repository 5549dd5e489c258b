package frame

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// specRegistry is spec 001's "Full Message Registry (27 types)" table,
// copied verbatim (tab-separated). TestRegistryMatchesSpec keeps the Go
// table equal to it.
const specRegistry = `#	Variant	Direction	Live?	Payload
1	DetectRequest	client to daemon	yes	DetectRequestPayload { app_id }
2	DetectResponse	daemon to client	yes	DetectResponsePayload { result: DetectionResult }
3	ExecuteRequest	client to daemon	yes	ExecuteRequestPayload { capability, target?, params, admin }
4	ExecuteResponse	daemon to client	yes	ExecuteResponsePayload { result: ExecutionResult }
5	EventNotification	daemon to client	yes	PushEventPayload (alias of #16)
6	RegistryQuery	client to daemon	yes	RegistryQueryPayload { kind }
7	RegistryResponse	daemon to client	yes	RegistryResponsePayload { kind }
8	Ping	either direction	yes	PingPayload (empty)
9	Pong	daemon to client	yes	PongPayload { capability_count, app_count, subscription_count, journal_length, uptime_secs }
10	RegisterCapability	reserved	no	RegisterCapabilityPayload
11	UnregisterCapability	reserved	no	UnregisterCapabilityPayload
12	ExecuteCapability	reserved	no	alias of #3
13	QueryCapabilities	reserved	no	QueryCapabilitiesPayload { filter }
14	SubscribeEvents	client to daemon	yes	SubscribeEventsPayload { filter }
15	UnsubscribeEvents	client to daemon	yes	UnsubscribeEventsPayload { subscription_id }
16	PushEvent	daemon to client	yes	PushEventPayload { event, sequence }
17	ErrorResponse	daemon to client	yes	ErrorResponsePayload { code: u16, message }
18	CapabilityResponse	reserved	no	CapabilityResponsePayload { capability? }
19	InvokeCapability	daemon to app	yes	binary payload (Tier 1 path)
20	CapabilityResultMsg	app to daemon	yes	binary payload
21	GetManifest	daemon to app	yes	binary payload
22	ManifestResponse	app to daemon	yes	binary payload
23	ValidateParamsMsg	daemon to app	yes	binary payload
24	ValidateResultMsg	app to daemon	yes	binary payload
25	QueryState	daemon to app	yes	binary payload
26	StateResponse	app to daemon	yes	binary payload
27	AppShutdown	daemon to app	yes	binary payload (no response expected)
`

func TestRegistryMatchesSpec(t *testing.T) {
	dirs := map[string]Direction{}
	for d := ClientToDaemon; d <= AppToDaemon; d++ {
		dirs[d.String()] = d
	}
	var want []Info
	for i, line := range strings.Split(strings.TrimSpace(specRegistry), "\n")[1:] {
		f := strings.Split(line, "\t")
		if len(f) != 5 {
			t.Fatalf("spec row %d: got %d columns, want 5", i+1, len(f))
		}
		n, err := strconv.Atoi(f[0])
		if err != nil {
			t.Fatal(err)
		}
		d, ok := dirs[f[2]]
		if !ok {
			t.Fatalf("spec row %d: unknown direction %q", n, f[2])
		}
		want = append(want, Info{Type: Type(n), Name: f[1], Direction: d, Live: f[3] == "yes", Payload: f[4]})
	}
	got := Registry()
	if len(got) != 27 {
		t.Errorf("len(Registry()) = %d, want 27", len(got))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Registry() differs from spec 001 (-spec +got):\n%s", diff)
	}
	for i, in := range got {
		if in.Type != Type(i+1) {
			t.Errorf("Registry()[%d].Type = %d, want %d", i, in.Type, i+1)
		}
		if got, ok := in.Type.Info(); !ok || got != in {
			t.Errorf("%d.Info() = %+v, %v; want %+v, true", in.Type, got, ok, in)
		}
		if got := in.Type.String(); got != in.Name {
			t.Errorf("Type(%d).String() = %q, want %q", in.Type, got, in.Name)
		}
		if got, ok := ParseType(in.Name); !ok || got != in.Type {
			t.Errorf("ParseType(%q) = %d, %v; want %d, true", in.Name, got, ok, in.Type)
		}
	}
}

func TestRegistryIsACopy(t *testing.T) {
	r := Registry()
	r[0].Name = "changed"
	if got := DetectRequest.String(); got != "DetectRequest" {
		t.Errorf("after editing Registry()'s result, DetectRequest.String() = %q", got)
	}
}

func TestTypeConstants(t *testing.T) {
	tests := []struct {
		t    Type
		want string
	}{
		{DetectRequest, "DetectRequest"}, {DetectResponse, "DetectResponse"},
		{ExecuteRequest, "ExecuteRequest"}, {ExecuteResponse, "ExecuteResponse"},
		{EventNotification, "EventNotification"}, {RegistryQuery, "RegistryQuery"},
		{RegistryResponse, "RegistryResponse"}, {Ping, "Ping"}, {Pong, "Pong"},
		{RegisterCapability, "RegisterCapability"}, {UnregisterCapability, "UnregisterCapability"},
		{ExecuteCapability, "ExecuteCapability"}, {QueryCapabilities, "QueryCapabilities"},
		{SubscribeEvents, "SubscribeEvents"}, {UnsubscribeEvents, "UnsubscribeEvents"},
		{PushEvent, "PushEvent"}, {ErrorResponse, "ErrorResponse"},
		{CapabilityResponse, "CapabilityResponse"}, {InvokeCapability, "InvokeCapability"},
		{CapabilityResultMsg, "CapabilityResultMsg"}, {GetManifest, "GetManifest"},
		{ManifestResponse, "ManifestResponse"}, {ValidateParamsMsg, "ValidateParamsMsg"},
		{ValidateResultMsg, "ValidateResultMsg"}, {QueryState, "QueryState"},
		{StateResponse, "StateResponse"}, {AppShutdown, "AppShutdown"},
	}
	if len(tests) != 27 {
		t.Fatalf("table has %d constants, want 27", len(tests))
	}
	for _, tt := range tests {
		if got := tt.t.String(); got != tt.want {
			t.Errorf("Type(%d).String() = %q, want %q", tt.t, got, tt.want)
		}
	}
}

func TestNotATypes(t *testing.T) {
	for _, tag := range []int{0, 28, 42, 123, 255} {
		ty := Type(tag)
		if ty.Valid() {
			t.Errorf("Type(%d).Valid() = true, want false", tag)
		}
		if _, ok := ty.Info(); ok {
			t.Errorf("Type(%d).Info() ok = true, want false", tag)
		}
		if got, want := ty.String(), "Type("+strconv.Itoa(tag)+")"; got != want {
			t.Errorf("Type(%d).String() = %q, want %q", tag, got, want)
		}
		if ty.AcceptedOnClientSocket() {
			t.Errorf("Type(%d).AcceptedOnClientSocket() = true, want false", tag)
		}
	}
	for _, name := range []string{"", "ping", "PING", "Type(8)", "8", "Ping "} {
		if got, ok := ParseType(name); ok {
			t.Errorf("ParseType(%q) = %d, true; want false", name, got)
		}
	}
}

func TestReservedNotLive(t *testing.T) {
	reserved := map[Type]bool{RegisterCapability: true, UnregisterCapability: true, ExecuteCapability: true, QueryCapabilities: true, CapabilityResponse: true}
	for _, in := range Registry() {
		if got, want := in.Direction == Reserved, reserved[in.Type]; got != want {
			t.Errorf("%s: reserved = %v, want %v", in.Name, got, want)
		}
		if got, want := in.Live, !reserved[in.Type]; got != want {
			t.Errorf("%s: Live = %v, want %v", in.Name, got, want)
		}
	}
}

func TestAcceptedOnClientSocket(t *testing.T) {
	// Spec 001, "Accepted Client Requests", in the spec's order.
	want := []Type{Ping, RegistryQuery, DetectRequest, ExecuteRequest, SubscribeEvents, UnsubscribeEvents}
	accepted := map[Type]bool{}
	for _, ty := range want {
		accepted[ty] = true
	}
	for tag := 0; tag <= 255; tag++ {
		ty := Type(tag)
		if got := ty.AcceptedOnClientSocket(); got != accepted[ty] {
			t.Errorf("%s.AcceptedOnClientSocket() = %v, want %v", ty, got, accepted[ty])
		}
		// Every accepted request travels client to daemon (Ping either way).
		if in, _ := ty.Info(); accepted[ty] && in.Direction != ClientToDaemon && in.Direction != Either {
			t.Errorf("%s is accepted but its direction is %s", ty, in.Direction)
		}
	}
}

func TestDirectionString(t *testing.T) {
	tests := []struct {
		d    Direction
		want string
	}{
		{ClientToDaemon, "client to daemon"}, {DaemonToClient, "daemon to client"},
		{Either, "either direction"}, {Reserved, "reserved"},
		{DaemonToApp, "daemon to app"}, {AppToDaemon, "app to daemon"},
		{0, "Direction(0)"}, {7, "Direction(7)"}, {-1, "Direction(-1)"},
	}
	for _, tt := range tests {
		if got := tt.d.String(); got != tt.want {
			t.Errorf("Direction(%d).String() = %q, want %q", int(tt.d), got, tt.want)
		}
	}
}

// The planned socket dispatch (docs/framed.md) reads a first byte of '{',
// '[' or JSON whitespace as JSON-RPC. Only tags no client may send collide
// with those bytes.
func TestFirstByteDispatch(t *testing.T) {
	jsonLead := map[byte]bool{'{': true, '[': true, ' ': true, '\t': true, '\n': true, '\r': true}
	var collide []Type
	for _, in := range Registry() {
		if jsonLead[byte(in.Type)] {
			collide = append(collide, in.Type)
			if in.Type.AcceptedOnClientSocket() {
				t.Errorf("%s (tag %d) is an accepted client request but reads as JSON-RPC", in.Type, in.Type)
			}
		}
	}
	if diff := cmp.Diff([]Type{Pong, RegisterCapability, QueryCapabilities}, collide); diff != "" {
		t.Errorf("tags that are JSON lead bytes (-want +got):\n%s", diff)
	}
}
