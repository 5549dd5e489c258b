package tier1

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
)

// samples are one or more messages of every type, each as Decode returns
// it (a pointer). The golden cases are a subset.
var samples = []struct {
	name string
	m    Message
}{
	{"get_manifest", &GetManifest{}},
	{"manifest_response", &ManifestResponse{AppID: "org.example.mail", Manifest: []byte(`{"version":"1","capabilities":[],"signature":"c2ln"}`)}},
	{"invoke_capability", &InvokeCapability{RequestID: 7, CapabilityID: "org.example.mail.compose", Source: api.SourceSystemIntelligence, Params: []byte(`{"to":"ann@example.org"}`), DeadlineMS: 30000}},
	{"invoke_capability_bare", &InvokeCapability{RequestID: 1 << 40, CapabilityID: "c", Source: "x"}},
	{"capability_result_success", &CapabilityResultMsg{RequestID: 7, Status: api.StatusSuccess, Data: []byte(`{"draft_id":"d1"}`)}},
	{"capability_result_deferred", &CapabilityResultMsg{Status: api.StatusDeferred}},
	{"capability_result_error", &CapabilityResultMsg{RequestID: 7, Error: &ErrorInfo{Code: int32(api.CodeInvalidParams), Message: "to: required", Data: []byte(`{"field":"to"}`)}}},
	{"validate_params", &ValidateParamsMsg{RequestID: 8, CapabilityID: "org.example.mail.compose", Params: []byte(`{}`)}},
	{"validate_result_valid", &ValidateResultMsg{RequestID: 8, Valid: true}},
	{"validate_result_invalid", &ValidateResultMsg{RequestID: 8, Error: &ErrorInfo{Code: int32(api.CodeInvalidParams)}}},
	{"query_state", &QueryState{RequestID: 9, Keys: []string{"unread", "folder"}}},
	{"query_state_all", &QueryState{RequestID: 9}},
	{"state_response", &StateResponse{RequestID: 9, State: []byte(`{"unread":3}`)}},
	{"app_shutdown", &AppShutdown{}},
	{"app_shutdown_reason", &AppShutdown{Reason: "daemon stopping"}},
	{"ping", &Ping{}},
	{"pong_zero", &Pong{}},
	{"pong", &Pong{CapabilityCount: 87, AppCount: 12, SubscriptionCount: 3, JournalLength: 1042, UptimeSecs: 3624}},
}

// equal compares decoded messages; an empty JSON field and an absent one
// are the same message.
var equal = cmpopts.EquateEmpty()

func TestRoundTrip(t *testing.T) {
	seen := map[frame.Type]bool{}
	for _, s := range samples {
		t.Run(s.name, func(t *testing.T) {
			seen[s.m.Type()] = true
			b, err := Encode(s.m)
			if err != nil {
				t.Fatalf("Encode() error = %v", err)
			}
			got, err := Decode(s.m.Type(), b)
			if err != nil {
				t.Fatalf("Decode(%s, %x) error = %v", s.m.Type(), b, err)
			}
			if diff := cmp.Diff(s.m, got, equal); diff != "" {
				t.Errorf("Decode(Encode(m)) mismatch (-want +got):\n%s", diff)
			}
			// A value encodes like its pointer.
			bv, err := Encode(deref(s.m))
			if err != nil || !bytes.Equal(bv, b) {
				t.Errorf("Encode(value) = %x, %v; want %x", bv, err, b)
			}
		})
	}
	for _, ty := range []frame.Type{frame.Ping, frame.Pong} {
		if !seen[ty] {
			t.Errorf("no sample of %s", ty)
		}
	}
	for ty := frame.InvokeCapability; ty <= frame.AppShutdown; ty++ {
		if !seen[ty] {
			t.Errorf("no sample of %s", ty)
		}
	}
}

func deref(m Message) any {
	switch p := m.(type) {
	case *GetManifest:
		return *p
	case *ManifestResponse:
		return *p
	case *InvokeCapability:
		return *p
	case *CapabilityResultMsg:
		return *p
	case *ValidateParamsMsg:
		return *p
	case *ValidateResultMsg:
		return *p
	case *QueryState:
		return *p
	case *StateResponse:
		return *p
	case *AppShutdown:
		return *p
	case *Ping:
		return *p
	case *Pong:
		return *p
	}
	panic("unknown message")
}

func TestEmptyPayloadIsEmptyMap(t *testing.T) {
	for _, ty := range []frame.Type{frame.Ping, frame.Pong, frame.GetManifest, frame.AppShutdown} {
		for _, p := range [][]byte{nil, {0xa0}} {
			got, err := Decode(ty, p)
			if err != nil {
				t.Fatalf("Decode(%s, %x) error = %v", ty, p, err)
			}
			if want := newMessage(ty); !cmp.Equal(got, want) {
				t.Errorf("Decode(%s, %x) = %#v, want %#v", ty, p, got, want)
			}
		}
	}
	if got, _ := Encode(Ping{}); len(got) != 0 {
		t.Errorf("Encode(Ping{}) = %x, want the empty payload", got)
	}
}

func TestReplyType(t *testing.T) {
	want := map[frame.Type]frame.Type{
		frame.GetManifest:       frame.ManifestResponse,
		frame.InvokeCapability:  frame.CapabilityResultMsg,
		frame.ValidateParamsMsg: frame.ValidateResultMsg,
		frame.QueryState:        frame.StateResponse,
		frame.Ping:              frame.Pong,
	}
	for ty := frame.Type(0); ty <= frame.MaxType+1; ty++ {
		got, ok := ReplyType(ty)
		w, wok := want[ty]
		if got != w || ok != wok {
			t.Errorf("ReplyType(%s) = %s, %t; want %s, %t", ty, got, ok, w, wok)
		}
	}
}

// wantInvalid checks that err is INVALID_REQUEST naming type ty and
// containing sub.
func wantInvalid(t *testing.T, err error, ty frame.Type, sub string) {
	t.Helper()
	var pe *api.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v (%T), want *api.Error", err, err)
	}
	if pe.Code != api.CodeInvalidRequest {
		t.Errorf("code = %s, want INVALID_REQUEST (%v)", pe.Code, err)
	}
	if !strings.Contains(pe.Message, ty.String()) || !strings.Contains(pe.Message, sub) {
		t.Errorf("message = %q, want it to name %s and contain %q", pe.Message, ty, sub)
	}
}

// h builds bytes from hex fragments.
func h(parts ...string) []byte {
	b, err := hex.DecodeString(strings.ReplaceAll(strings.Join(parts, ""), " ", ""))
	if err != nil {
		panic(err)
	}
	return b
}

func nested(depth int) []byte {
	// {2: [[[…["k"]…]]]} for QueryState: depth arrays inside the map.
	return append(append(h("a2", "01", "01", "02"), bytes.Repeat([]byte{0x81}, depth)...), h("616b")...)
}

func TestDecodeHostile(t *testing.T) {
	const (
		inv  = frame.InvokeCapability
		okIC = "a3 01 07 02 63612e62 03 6153" // {1: 7, 2: "a.b", 3: "S"}
	)
	bigArray := append(h("a2 01 01 02 99 1001"), bytes.Repeat([]byte{0x61, 'k'}, 4097)...)
	bigMap := h("b9 1001")
	for i := range 4097 {
		bigMap = append(bigMap, 0x19, byte(i>>8), byte(i), 0x00)
	}
	tests := []struct {
		name    string
		ty      frame.Type
		payload []byte
		sub     string
	}{
		{"not a per-app type", frame.ExecuteRequest, h("a0"), "not a per-app socket message type"},
		{"not a type", 0, nil, "not a per-app socket message type"},
		{"oversized", frame.StateResponse, make([]byte, MaxPayload+1), "exceeds the maximum"},
		{"deep nesting", frame.QueryState, nested(MaxNestedLevels + 1), "exceeded max nested level"},
		{"array too long", frame.QueryState, bigArray, "exceeded max number of elements"},
		{"map too large", frame.Pong, bigMap, "exceeded max number of key-value pairs"},
		{"duplicate key", inv, h("a4 01 07 01 08 02 63612e62 03 6153"), "duplicate key 1"},
		{"indefinite map", inv, h("bf 01 07 02 63612e62 03 6153 ff"), "indefinite-length"},
		{"indefinite byte string", inv, h("a4 01 07 02 63612e62 03 6153 04 5f 42 7b7d ff"), "indefinite-length"},
		{"tag", inv, h("a3 01 c1 07 02 63612e62 03 6153"), "tag"},
		{"unknown integer key", inv, h("a4 01 07 02 63612e62 03 6153 06 00"), "unknown key"},
		{"unknown text key", inv, h("a4 01 07 02 63612e62 03 6153 6131 00"), "unknown key"},
		{"negative key", inv, h("a4 01 07 02 63612e62 03 6153 20 00"), "unknown key"},
		{"not a map", inv, h("83 07 61 61 61 53"), "array"},
		{"wrong type text for uint", inv, h("a3 01 6137 02 63612e62 03 6153"), "key 1: UTF-8 text string where uint64"},
		{"wrong type negative for uint", inv, h("a3 01 20 02 63612e62 03 6153"), "key 1"},
		{"wrong type text for JSON", inv, h("a4 01 07 02 63612e62 03 6153 04 62 7b7d"), "key 4: UTF-8 text string where json.RawMessage"},
		{"uint32 overflow", inv, h("a4 01 07 02 63612e62 03 6153 05 1b 0000000100000000"), "key 5: positive integer where uint32"},
		{"float for uint", inv, h("a3 01 f9 3c00 02 63612e62 03 6153"), "key 1"},
		{"invalid UTF-8", inv, h("a3 01 07 02 62 ff fe 03 6153"), "UTF-8"},
		{"trailing bytes", inv, append(h(okIC), 0x00), "extraneous data"},
		{"truncated", inv, h("a3 01 07 02 63612e"), "unexpected EOF"},
		{"invalid JSON params", inv, h("a4 01 07 02 63612e62 03 6153 04 42 7b7b"), "params: not valid JSON"},
		{"params not an object", inv, h("a4 01 07 02 63612e62 03 6153 04 42 5b5d"), "params: not a JSON object"},
		{"missing capability id", inv, h("a2 01 07 03 6153"), "capability_id: required"},
		{"missing source", inv, h("a2 01 07 02 63612e62"), "source: required"},
		{"invalid JSON data", frame.CapabilityResultMsg, h("a3 01 07 02 67 73756363657373 03 41 7b"), "data: not valid JSON"},
		{"bad status", frame.CapabilityResultMsg, h("a2 01 07 02 62 6f6b"), "status"},
		{"error and result", frame.CapabilityResultMsg, h("a3 01 07 02 67 73756363657373 04 a1 01 20"), "set together with a result"},
		{"error without code", frame.CapabilityResultMsg, h("a2 01 07 04 a1 02 61 78"), "error: code: required"},
		{"invalid JSON error data", frame.CapabilityResultMsg, h("a2 01 07 04 a2 01 20 03 41 7b"), "error: data: not valid JSON"},
		{"unknown key in error", frame.CapabilityResultMsg, h("a2 01 07 04 a2 01 20 09 00"), "unknown key"},
		{"invalid without error", frame.ValidateResultMsg, h("a2 01 07 02 f4"), "error: required when valid is false"},
		{"valid with error", frame.ValidateResultMsg, h("a3 01 07 02 f5 03 a1 01 20"), "error: set although valid is true"},
		{"missing state", frame.StateResponse, h("a1 01 07"), "state: required"},
		{"state not an object", frame.StateResponse, h("a2 01 07 02 41 31"), "state: not a JSON object"},
		{"manifest invalid JSON", frame.ManifestResponse, h("a2 01 61 61 02 42 7b5d"), "manifest: not valid JSON"},
		{"empty key", frame.QueryState, h("a2 01 07 02 81 60"), "keys[0]: empty"},
		{"fields in Ping", frame.Ping, h("a1 01 00"), "unknown key"},
		{"fields in GetManifest", frame.GetManifest, h("a1 01 00"), "unknown key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.ty, tt.payload)
			if err == nil {
				t.Fatalf("Decode(%s) = %#v, nil error; want INVALID_REQUEST", tt.ty, got)
			}
			if got != nil {
				t.Errorf("Decode(%s) returned %#v alongside the error", tt.ty, got)
			}
			wantInvalid(t, err, tt.ty, tt.sub)
		})
	}
	// Just inside the limits decodes.
	if _, err := Decode(frame.QueryState, nested(MaxNestedLevels-2)); err == nil || strings.Contains(err.Error(), "nested") {
		t.Errorf("nesting within the limit: error = %v, want a type error only", err)
	}
	keys := append(h("a2 01 01 02 99 1000"), bytes.Repeat([]byte{0x61, 'k'}, 4096)...)
	if _, err := Decode(frame.QueryState, keys); err != nil {
		t.Errorf("4096 keys: error = %v", err)
	}
}

func TestEncodeRefuses(t *testing.T) {
	tests := []struct {
		name string
		v    any
		sub  string
	}{
		{"invalid JSON params", InvokeCapability{RequestID: 1, CapabilityID: "c", Source: "s", Params: []byte("{")}, "params: not valid JSON"},
		{"no status", &CapabilityResultMsg{RequestID: 1}, "status"},
		{"no state", StateResponse{}, "state: required"},
		{"oversized", StateResponse{State: []byte(`{"a":"` + strings.Repeat("x", MaxPayload) + `"}`)}, "exceeds the maximum"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Encode(tt.v)
			if err == nil {
				t.Fatalf("Encode() = %x, nil error", b)
			}
			wantInvalid(t, err, tt.v.(Message).Type(), tt.sub)
		})
	}
	for _, v := range []any{nil, "ping", (*Ping)(nil), api.CapabilityResult{}} {
		if b, err := Encode(v); !errors.Is(err, api.ErrInvalidRequest) {
			t.Errorf("Encode(%#v) = %x, %v; want INVALID_REQUEST", v, b, err)
		}
	}
}

func TestErrorInfo(t *testing.T) {
	in := api.InvalidParam("to", "required")
	ei := ErrorInfoOf(in)
	want := &ErrorInfo{Code: int32(api.CodeInvalidParams), Message: "to: required", Data: []byte(`{"field":"to"}`)}
	if diff := cmp.Diff(want, ei); diff != "" {
		t.Fatalf("ErrorInfoOf mismatch (-want +got):\n%s", diff)
	}
	b, err := Encode(CapabilityResultMsg{RequestID: 3, Error: ei})
	if err != nil {
		t.Fatal(err)
	}
	m, err := Decode(frame.CapabilityResultMsg, b)
	if err != nil {
		t.Fatal(err)
	}
	res, err := m.(*CapabilityResultMsg).Result()
	if res != nil || !errors.Is(err, api.ErrInvalidParams) {
		t.Fatalf("Result() = %v, %v; want INVALID_PARAMS", res, err)
	}
	if got := api.AsError(err).DataMap()["field"]; got != "to" {
		t.Errorf("error data field = %v, want to", got)
	}
	if got := ErrorInfoOf(errors.New("boom")); got.Code != int32(api.CodeInternalError) || got.Message != "boom" {
		t.Errorf("ErrorInfoOf(plain) = %+v, want INTERNAL_ERROR boom", got)
	}
	if ErrorInfoOf(nil) != nil || (*ErrorInfo)(nil).Err() != nil {
		t.Error("nil does not map to nil")
	}
	ok := &CapabilityResultMsg{Status: api.StatusPartial, Data: []byte(`[1]`)}
	if res, err := ok.Result(); err != nil || res.Status != api.StatusPartial || string(res.Data) != "[1]" {
		t.Errorf("Result() = %+v, %v", res, err)
	}
}
