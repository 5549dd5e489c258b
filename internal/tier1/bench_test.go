package tier1

import (
	"encoding/json"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/frame"
)

// BenchmarkInvokeCapability encodes and decodes an InvokeCapability. The
// encoding/json case does the same to the same struct in the same run, so
// the ratio between the two holds whatever the machine.
func BenchmarkInvokeCapability(b *testing.B) {
	m := &InvokeCapability{RequestID: 7, CapabilityID: "org.example.mail.compose", Source: api.SourceSystemIntelligence,
		Params: []byte(`{"to":"ann@example.org","subject":"hello","body":"see you at ten"}`), DeadlineMS: 30000}
	b.Run("cbor", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := Encode(m)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Decode(frame.InvokeCapability, p); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			p, err := json.Marshal(m)
			if err != nil {
				b.Fatal(err)
			}
			var back InvokeCapability
			if err := json.Unmarshal(p, &back); err != nil {
				b.Fatal(err)
			}
		}
	})
}
