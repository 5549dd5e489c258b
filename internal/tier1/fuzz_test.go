package tier1

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
)

// fuzzTypes are the types with a fuzz target, one each.
var fuzzTypes = []frame.Type{
	frame.InvokeCapability, frame.CapabilityResultMsg, frame.GetManifest, frame.ManifestResponse,
	frame.ValidateParamsMsg, frame.ValidateResultMsg, frame.QueryState, frame.StateResponse,
	frame.AppShutdown, frame.Ping, frame.Pong,
}

// fuzzDecode checks that Decode(ty, …) never panics, fails only with
// INVALID_REQUEST, and that whatever it accepts re-encodes to a payload
// that decodes to an equal message and encodes to the same bytes again.
// The seed corpus is testdata/fuzz/FuzzDecode<Type> (go test -update
// rewrites it from the samples).
func fuzzDecode(f *testing.F, ty frame.Type) {
	f.Fuzz(func(t *testing.T, payload []byte) {
		v, err := Decode(ty, payload)
		if err != nil {
			if v != nil || !errors.Is(err, api.ErrInvalidRequest) {
				t.Fatalf("Decode() = %#v, %v; want nil, INVALID_REQUEST", v, err)
			}
			return
		}
		m, ok := v.(Message)
		if !ok || m.Type() != ty {
			t.Fatalf("Decode(%s) = %#v", ty, v)
		}
		enc, err := Encode(m)
		if err != nil {
			t.Fatalf("Encode(%#v) error = %v", m, err)
		}
		back, err := Decode(ty, enc)
		if err != nil {
			t.Fatalf("Decode(Encode(%#v)) = %x: %v", m, enc, err)
		}
		if diff := cmp.Diff(m, back, equal); diff != "" {
			t.Fatalf("re-decoded message differs (-first +second):\n%s", diff)
		}
		if again := mustEncode(t, back.(Message)); !bytes.Equal(again, enc) {
			t.Fatalf("encoding is not stable: %x then %x", enc, again)
		}
	})
}

func FuzzDecodeInvokeCapability(f *testing.F)    { fuzzDecode(f, frame.InvokeCapability) }
func FuzzDecodeCapabilityResultMsg(f *testing.F) { fuzzDecode(f, frame.CapabilityResultMsg) }
func FuzzDecodeGetManifest(f *testing.F)         { fuzzDecode(f, frame.GetManifest) }
func FuzzDecodeManifestResponse(f *testing.F)    { fuzzDecode(f, frame.ManifestResponse) }
func FuzzDecodeValidateParamsMsg(f *testing.F)   { fuzzDecode(f, frame.ValidateParamsMsg) }
func FuzzDecodeValidateResultMsg(f *testing.F)   { fuzzDecode(f, frame.ValidateResultMsg) }
func FuzzDecodeQueryState(f *testing.F)          { fuzzDecode(f, frame.QueryState) }
func FuzzDecodeStateResponse(f *testing.F)       { fuzzDecode(f, frame.StateResponse) }
func FuzzDecodeAppShutdown(f *testing.F)         { fuzzDecode(f, frame.AppShutdown) }
func FuzzDecodePing(f *testing.F)                { fuzzDecode(f, frame.Ping) }
func FuzzDecodePong(f *testing.F)                { fuzzDecode(f, frame.Pong) }
