package policy

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestView(t *testing.T) {
	p := mustParse(t, samplePolicy)
	caps := []CapabilityInput{
		{CapabilityID: "org.pcp.notes/delete", AppID: "org.pcp.notes", Name: "delete", TrustLevel: "confirm"},
		{CapabilityID: "org.pcp.notes/edit", AppID: "org.pcp.notes", Name: "edit", TrustLevel: "confirm", TimeoutMS: 5000},
		{CapabilityID: "org.pcp.mail/send", AppID: "org.pcp.mail", Name: "send", TrustLevel: "auto"},
		{CapabilityID: "org.other/read", AppID: "org.other", Name: "read", TrustLevel: "deny", TimeoutMS: 1500},
	}
	got := p.View(caps, si)
	want := View{
		Path:   "/home/u/.config/pcp/policy.toml",
		Loaded: true,
		Source: si,
		Limits: Limits{
			PerApp:             Valued[float64]{50, FromBuiltin},
			PerAppBurst:        Valued[int]{100, FromBuiltin},
			PerConnection:      Valued[float64]{500, FromBuiltin},
			PerConnectionBurst: Valued[int]{1000, FromBuiltin},
		},
		ConfirmationExpiry: dur(2*time.Minute, FromBuiltin),
		Scomp:              ScompLimits{dur(30*time.Second, FromBuiltin), mib(64, FromBuiltin)},
		Tier3:              lvl("confirm", FromBuiltin),
		Capabilities: []CapabilityView{
			{"org.pcp.notes/delete", "org.pcp.notes", "delete", "confirm", lvl("deny", fromDelete), dur(2*time.Second, fromDelete)},
			{"org.pcp.notes/edit", "org.pcp.notes", "edit", "confirm", lvl("confirm", fromSI), dur(10*time.Second, fromNotes)},
			{"org.pcp.mail/send", "org.pcp.mail", "send", "auto", lvl("confirm", fromSend), dur(20*time.Second, fromDefs)},
			{"org.other/read", "org.other", "read", "deny", lvl("deny", FromManifest), dur(1500*time.Millisecond, FromManifest)},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("View mismatch (-want +got):\n%s", diff)
	}
}

func TestViewDefaultJSON(t *testing.T) {
	v := Default().View(nil, si)
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want := `{
  "path": "",
  "loaded": false,
  "source": "SystemIntelligence",
  "limits": {
    "per_app": {
      "value": 50,
      "from": "built-in default"
    },
    "per_app_burst": {
      "value": 100,
      "from": "built-in default"
    },
    "per_connection": {
      "value": 500,
      "from": "built-in default"
    },
    "per_connection_burst": {
      "value": 1000,
      "from": "built-in default"
    }
  },
  "confirmation_expiry": {
    "value": "2m",
    "from": "built-in default"
  },
  "scomp": {
    "eval_timeout": {
      "value": "30s",
      "from": "built-in default"
    },
    "memory_limit_mib": {
      "value": 64,
      "from": "built-in default"
    }
  },
  "tier3": {
    "value": "confirm",
    "from": "built-in default"
  },
  "capabilities": []
}`
	if got := string(b); got != want {
		t.Errorf("JSON mismatch (-want +got):\n%s", cmp.Diff(want, got))
	}
}

func TestViewForAgentScomp(t *testing.T) {
	p := mustParse(t, samplePolicy+`
[scomp]
eval_timeout = "1m30s"
memory_limit_mib = 128

[agents.claude.scomp]
memory_limit_mib = 256
`)
	tests := []struct {
		agent string
		want  string // the "scomp" member of the JSON
	}{
		{"", `"scomp":{"eval_timeout":{"value":"1m30s","from":"policy.toml: scomp"},"memory_limit_mib":{"value":128,"from":"policy.toml: scomp"}}`},
		{"claude", `"scomp":{"eval_timeout":{"value":"1m30s","from":"policy.toml: scomp"},"memory_limit_mib":{"value":256,"from":"policy.toml: agents.claude.scomp"}}`},
		{"other", `"scomp":{"eval_timeout":{"value":"1m30s","from":"policy.toml: scomp"},"memory_limit_mib":{"value":128,"from":"policy.toml: scomp"}}`},
	}
	for _, tt := range tests {
		v := p.ViewFor(nil, si, tt.agent)
		if diff := cmp.Diff(p.Scomp(tt.agent), v.Scomp); diff != "" {
			t.Errorf("ViewFor(%q).Scomp mismatch (-want +got):\n%s", tt.agent, diff)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(tt.want)) {
			t.Errorf("ViewFor(%q) JSON %s lacks %s", tt.agent, b, tt.want)
		}
		var back View
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("Unmarshal: %v", err)
		}
		if diff := cmp.Diff(v, back); diff != "" {
			t.Errorf("ViewFor(%q) round trip mismatch (-want +got):\n%s", tt.agent, diff)
		}
	}
}

func TestViewJSONRoundTrip(t *testing.T) {
	p := mustParse(t, samplePolicy)
	v := p.View([]CapabilityInput{
		{CapabilityID: "n/d", AppID: "org.pcp.notes", Name: "delete", TrustLevel: "auto"},
		{CapabilityID: "o/r", AppID: "org.other", Name: "read", TrustLevel: "auto", TimeoutMS: 1500},
	}, "")
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{`"timeout":{"value":"2s","from":"policy.toml: apps.\"org.pcp.notes\".capabilities.delete"}`, `"value":"1.5s"`} {
		if !bytes.Contains(b, []byte(s)) {
			t.Errorf("JSON %s lacks %s", b, s)
		}
	}
	var back View
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("Unmarshal: %v", err)
	}
	if diff := cmp.Diff(v, back); diff != "" {
		t.Errorf("round trip mismatch (-want +got):\n%s", diff)
	}
}

func TestValuedDurationUnmarshalErrors(t *testing.T) {
	for _, in := range []string{`{"value":30,"from":"x"}`, `{"value":"soon","from":"x"}`, `[]`} {
		var v Valued[time.Duration]
		if err := json.Unmarshal([]byte(in), &v); err == nil {
			t.Errorf("Unmarshal(%s) = %v, want an error", in, v)
		}
	}
}
