package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
)

const testApp = "org.example.mail"

// specExample is the manifest of spec 000's register.capability example.
const specExample = `{
  "version": "1.0",
  "capabilities": [
    {
      "name": "compose",
      "tier": 1,
      "trust_level": "confirm",
      "parameters": [
        { "name": "recipient", "type": "string" },
        { "name": "subject", "type": "string" },
        { "name": "body", "type": "string" }
      ]
    }
  ],
  "signature": "a1b2c3d4..."
}`

// checkError fails t unless err is an *api.Error with code whose message
// contains each of msgs and whose Data matches the non-empty of field and
// capability (capability "-" means Data must have none).
func checkError(t *testing.T, err error, code api.Code, field, capability string, msgs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %s", code.Name())
	}
	var e *api.Error
	if !errors.As(err, &e) {
		t.Fatalf("got error %T %v, want *api.Error", err, err)
	}
	if e.Code != code {
		t.Errorf("got code %s, want %s (%v)", e.Code.Name(), code.Name(), err)
	}
	for _, m := range msgs {
		if !strings.Contains(e.Message, m) {
			t.Errorf("got message %q, want it to contain %q", e.Message, m)
		}
	}
	data := e.DataMap()
	if field != "" {
		if got := data["field"]; got != field {
			t.Errorf("got Data field %v, want %q (%v)", got, field, err)
		}
	}
	switch capability {
	case "":
	case "-":
		if got, ok := data["capability"]; ok {
			t.Errorf("got Data capability %v, want none", got)
		}
	default:
		if got := data["capability"]; got != capability {
			t.Errorf("got Data capability %v, want %q", got, capability)
		}
	}
}

func TestParseSpecExample(t *testing.T) {
	m, err := Parse(testApp, json.RawMessage(specExample))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := &api.Manifest{
		Version:   "1.0",
		Signature: "a1b2c3d4...",
		Capabilities: []api.CapabilityDecl{{
			Name:       "compose",
			Tier:       1,
			TrustLevel: api.TrustConfirm,
			Parameters: []api.ParamDecl{
				{Name: "recipient", Type: api.TypeString},
				{Name: "subject", Type: api.TypeString},
				{Name: "body", Type: api.TypeString},
			},
		}},
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("Parse mismatch (-want +got):\n%s", diff)
	}
}

func TestParseAllFields(t *testing.T) {
	raw := `{
	  "version": "1",
	  "publisher": "Example Corp",
	  "description": "Mail client",
	  "accessible_name": "Example Mail",
	  "signature": "",
	  "capabilities": [
	    {"name": "send_later", "tier": 3, "trust_level": "auto", "description": "Send at a time",
	     "confirmation_type": "send", "undo_window_ms": 5000, "timeout_ms": 86400000,
	     "parameters": [
	       {"name": "when", "type": "integer", "description": "Unix ms", "required": true},
	       {"name": "Draft_ID", "type": "any", "required": false},
	       {"name": "_n", "type": "number"}, {"name": "b", "type": "boolean"},
	       {"name": "o", "type": "object"}, {"name": "a", "type": "array"}
	     ]},
	    {"name": "x", "tier": 2.0, "trust_level": "deny", "parameters": []}
	  ]
	}`
	m, err := Parse(testApp, json.RawMessage(raw))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	yes, no := true, false
	want := &api.Manifest{
		Version:        "1",
		Publisher:      "Example Corp",
		Description:    "Mail client",
		AccessibleName: "Example Mail",
		Capabilities: []api.CapabilityDecl{
			{
				Name: "send_later", Tier: 3, TrustLevel: api.TrustAuto, Description: "Send at a time",
				ConfirmationType: "send", UndoWindowMS: 5000, TimeoutMS: 86400000,
				Parameters: []api.ParamDecl{
					{Name: "when", Type: api.TypeInteger, Description: "Unix ms", Required: &yes},
					{Name: "Draft_ID", Type: api.TypeAny, Required: &no},
					{Name: "_n", Type: api.TypeNumber},
					{Name: "b", Type: api.TypeBoolean},
					{Name: "o", Type: api.TypeObject},
					{Name: "a", Type: api.TypeArray},
				},
			},
			{Name: "x", Tier: 2, TrustLevel: api.TrustDeny, Parameters: []api.ParamDecl{}},
		},
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("Parse mismatch (-want +got):\n%s", diff)
	}
}

func TestParseVersions(t *testing.T) {
	for _, v := range []string{"1", "1.0", "1.2", "1.10", "1.2.3"} {
		raw := fmt.Sprintf(`{"version":%q,"capabilities":[{"name":"a","tier":1,"trust_level":"auto"}],"signature":""}`, v)
		if _, err := Parse(testApp, json.RawMessage(raw)); err != nil {
			t.Errorf("Parse(version %q): %v", v, err)
		}
	}
}

// capJSON is a valid capability with the given members replaced or, for a
// value of "", removed; extra members are added.
func capJSON(over map[string]string) string {
	members := map[string]string{
		"name":        `"compose"`,
		"tier":        `1`,
		"trust_level": `"confirm"`,
		"parameters":  `[{"name":"to","type":"string"}]`,
	}
	for k, v := range over {
		members[k] = v
	}
	var parts []string
	for _, k := range []string{"name", "tier", "trust_level", "parameters"} {
		if v := members[k]; v != "" {
			parts = append(parts, fmt.Sprintf("%q:%s", k, v))
		}
		delete(members, k)
	}
	for k, v := range members {
		if v != "" {
			parts = append(parts, fmt.Sprintf("%q:%s", k, v))
		}
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func manifestJSON(caps ...string) string {
	return `{"version":"1.0","signature":"","capabilities":[` + strings.Join(caps, ",") + `]}`
}

func TestParseErrors(t *testing.T) {
	many := func(n int, f func(i int) string) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = f(i)
		}
		return strings.Join(parts, ",")
	}
	long := strings.Repeat("x", MaxDescription+1)

	tests := []struct {
		name       string
		raw        string
		field      string
		capability string // "-" for none
		msgs       []string
	}{
		// The manifest object.
		{"not json", `{"version":`, "", "-", []string{"manifest org.example.mail:", "not valid I-JSON"}},
		{"not object", `[]`, "", "-", []string{"expected object, got array"}},
		{"null", `null`, "", "-", []string{"expected object, got null"}},
		{"duplicate member", `{"version":"1.0","version":"1.0","capabilities":[],"signature":""}`, "", "-", []string{"duplicate member name"}},
		{"invalid utf8", "{\"version\":\"1\xff\"}", "", "-", []string{"UTF-8"}},
		{"unknown member", `{"version":"1.0","capabilities":[],"signature":"","signatures":""}`, "signatures", "-", []string{`unknown member "signatures"`}},
		{"version missing", `{"capabilities":[],"signature":""}`, "version", "-", []string{"version: required member missing"}},
		{"accessible_name number", `{"version":"1.0","capabilities":[],"signature":"","accessible_name":7}`, "accessible_name", "-", []string{"accessible_name: expected string, got number"}},
		{"accessible_name blank", `{"version":"1.0","capabilities":[],"signature":"","accessible_name":"  "}`, "accessible_name", "-", []string{"accessible_name: must not be empty"}},
		{"version number", `{"version":1.0,"capabilities":[],"signature":""}`, "version", "-", []string{"version: expected string, got number"}},
		{"version 2", `{"version":"2.0","capabilities":[],"signature":""}`, "version", "-", []string{`unsupported version "2.0"`}},
		{"version 10", `{"version":"10","capabilities":[],"signature":""}`, "version", "-", []string{`unsupported version "10"`}},
		{"version empty", `{"version":"","capabilities":[],"signature":""}`, "version", "-", []string{`unsupported version ""`}},
		{"version suffix", `{"version":"1.0-beta","capabilities":[],"signature":""}`, "version", "-", []string{"unsupported version"}},
		{"signature missing", `{"version":"1.0","capabilities":[]}`, "signature", "-", []string{"signature: required member missing"}},
		{"signature null", `{"version":"1.0","capabilities":[],"signature":null}`, "signature", "-", []string{"signature: expected string, got null"}},
		{"signature object", `{"version":"1.0","capabilities":[],"signature":{}}`, "signature", "-", []string{"expected string, got object"}},
		{"publisher number", `{"version":"1.0","capabilities":[],"signature":"","publisher":7}`, "publisher", "-", []string{"expected string, got number"}},
		{"publisher long", `{"version":"1.0","capabilities":[],"signature":"","publisher":"` + long[:MaxPublisher+1] + `"}`, "publisher", "-", []string{"longer than 256"}},
		{"description long", `{"version":"1.0","capabilities":[],"signature":"","description":"` + long + `"}`, "description", "-", []string{"longer than 4096"}},
		{"capabilities missing", `{"version":"1.0","signature":""}`, "capabilities", "-", []string{"capabilities: required member missing"}},
		{"capabilities object", `{"version":"1.0","signature":"","capabilities":{}}`, "capabilities", "-", []string{"capabilities: expected array, got object"}},
		{"capabilities empty", manifestJSON(), "capabilities", "-", []string{"has 0 entries, want 1 to 1024"}},
		{"capabilities too many", manifestJSON(many(MaxCapabilities+1, func(i int) string {
			return capJSON(map[string]string{"name": fmt.Sprintf(`"c%d"`, i)})
		})), "capabilities", "-", []string{"has 1025 entries"}},

		// Capabilities.
		{"capability not object", manifestJSON(`"compose"`), "capabilities[0]", "-", []string{"capabilities[0]: expected object, got string"}},
		{"name missing", manifestJSON(capJSON(map[string]string{"name": ""})), "capabilities[0].name", "-", []string{"required member missing"}},
		{"name number", manifestJSON(capJSON(map[string]string{"name": "3"})), "capabilities[0].name", "-", []string{"capabilities[0].name: expected string, got number"}},
		{"name upper", manifestJSON(capJSON(map[string]string{"name": `"Compose"`})), "capabilities[0].name", "-", []string{`invalid capability name "Compose"`}},
		{"name digit first", manifestJSON(capJSON(map[string]string{"name": `"1x"`})), "capabilities[0].name", "-", []string{`invalid capability name "1x"`}},
		{"name dot", manifestJSON(capJSON(map[string]string{"name": `"a.b"`})), "capabilities[0].name", "-", []string{"invalid capability name"}},
		{"name empty", manifestJSON(capJSON(map[string]string{"name": `""`})), "capabilities[0].name", "-", []string{`invalid capability name ""`}},
		{"name too long", manifestJSON(capJSON(map[string]string{"name": `"a` + strings.Repeat("b", 64) + `"`})), "capabilities[0].name", "-", []string{"longer than 64"}},
		{"name duplicate", manifestJSON(capJSON(nil), capJSON(map[string]string{"tier": "2"})), "capabilities[1].name", "compose",
			[]string{`capability "compose": capabilities[1].name: duplicate capability name, first declared at capabilities[0]`}},
		{"unknown capability member", manifestJSON(capJSON(map[string]string{"trust_lvl": `"auto"`})), "capabilities[0].trust_lvl", "compose",
			[]string{`capability "compose": capabilities[0].trust_lvl: unknown member "trust_lvl"`}},
		{"case-folded member", manifestJSON(capJSON(map[string]string{"Tier": `1`})), "capabilities[0].Tier", "compose", []string{`unknown member "Tier"`}},
		{"tier missing", manifestJSON(capJSON(map[string]string{"tier": ""})), "capabilities[0].tier", "compose", []string{"required member missing"}},
		{"tier string", manifestJSON(capJSON(map[string]string{"tier": `"1"`})), "capabilities[0].tier", "compose",
			[]string{`capability "compose": capabilities[0].tier: expected integer, got string`}},
		{"tier fraction", manifestJSON(capJSON(map[string]string{"tier": `1.5`})), "capabilities[0].tier", "compose", []string{"expected integer, got 1.5, which has a fractional part"}},
		{"tier 0", manifestJSON(capJSON(map[string]string{"tier": `0`})), "capabilities[0].tier", "compose", []string{"tier 0 out of range, want 1 to 3"}},
		{"tier 4", manifestJSON(capJSON(map[string]string{"tier": `4`})), "capabilities[0].tier", "compose", []string{"tier 4 out of range"}},
		{"tier huge", manifestJSON(capJSON(map[string]string{"tier": `1e100`})), "capabilities[0].tier", "compose", []string{"out of the int64 range"}},
		{"tier null", manifestJSON(capJSON(map[string]string{"tier": `null`})), "capabilities[0].tier", "compose", []string{"expected integer, got null"}},
		{"trust missing", manifestJSON(capJSON(map[string]string{"trust_level": ""})), "capabilities[0].trust_level", "compose", []string{"required member missing"}},
		{"trust bool", manifestJSON(capJSON(map[string]string{"trust_level": `true`})), "capabilities[0].trust_level", "compose", []string{"expected string, got boolean"}},
		{"trust unknown", manifestJSON(capJSON(map[string]string{"trust_level": `"always"`})), "capabilities[0].trust_level", "compose", []string{`unknown trust level "always"`}},
		{"trust case", manifestJSON(capJSON(map[string]string{"trust_level": `"Auto"`})), "capabilities[0].trust_level", "compose", []string{`unknown trust level "Auto"`}},
		{"description type", manifestJSON(capJSON(map[string]string{"description": `[]`})), "capabilities[0].description", "compose", []string{"expected string, got array"}},
		{"description long", manifestJSON(capJSON(map[string]string{"description": `"` + long + `"`})), "capabilities[0].description", "compose", []string{"longer than 4096"}},
		{"confirmation type", manifestJSON(capJSON(map[string]string{"confirmation_type": `1`})), "capabilities[0].confirmation_type", "compose", []string{"expected string, got number"}},
		{"confirmation long", manifestJSON(capJSON(map[string]string{"confirmation_type": `"` + long[:65] + `"`})), "capabilities[0].confirmation_type", "compose", []string{"longer than 64"}},
		{"undo negative", manifestJSON(capJSON(map[string]string{"undo_window_ms": `-1`})), "capabilities[0].undo_window_ms", "compose", []string{"-1 out of range, want 0 to 86400000"}},
		{"undo too long", manifestJSON(capJSON(map[string]string{"undo_window_ms": `86400001`})), "capabilities[0].undo_window_ms", "compose", []string{"86400001 out of range"}},
		{"undo string", manifestJSON(capJSON(map[string]string{"undo_window_ms": `"5s"`})), "capabilities[0].undo_window_ms", "compose", []string{"expected integer, got string"}},
		{"timeout negative", manifestJSON(capJSON(map[string]string{"timeout_ms": `-5`})), "capabilities[0].timeout_ms", "compose", []string{"out of range"}},
		{"timeout fraction", manifestJSON(capJSON(map[string]string{"timeout_ms": `0.5`})), "capabilities[0].timeout_ms", "compose", []string{"fractional part"}},
		{"parameters object", manifestJSON(capJSON(map[string]string{"parameters": `{}`})), "capabilities[0].parameters", "compose", []string{"expected array, got object"}},
		{"parameters null", manifestJSON(capJSON(map[string]string{"parameters": `null`})), "capabilities[0].parameters", "compose", []string{"expected array, got null"}},
		{"parameters too many", manifestJSON(capJSON(map[string]string{"parameters": "[" + many(MaxParameters+1, func(i int) string {
			return fmt.Sprintf(`{"name":"p%d","type":"any"}`, i)
		}) + "]"})), "capabilities[0].parameters", "compose", []string{"has 65 entries, want at most 64"}},

		// Parameters.
		{"parameter not object", manifestJSON(capJSON(map[string]string{"parameters": `["to"]`})), "capabilities[0].parameters[0]", "compose", []string{"expected object, got string"}},
		{"parameter unknown member", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"to","type":"string","optional":true}]`})),
			"capabilities[0].parameters[0].optional", "compose", []string{`unknown member "optional"`}},
		{"parameter name missing", manifestJSON(capJSON(map[string]string{"parameters": `[{"type":"string"}]`})), "capabilities[0].parameters[0].name", "compose", []string{"required member missing"}},
		{"parameter name invalid", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"to-do","type":"string"}]`})),
			"capabilities[0].parameters[0].name", "compose", []string{`invalid parameter name "to-do"`}},
		{"parameter name digit", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"2","type":"string"}]`})), "capabilities[0].parameters[0].name", "compose", []string{"invalid parameter name"}},
		{"parameter name duplicate", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"to","type":"string"},{"name":"to","type":"any"}]`})),
			"capabilities[0].parameters[1].name", "compose", []string{`parameter "to": capabilities[0].parameters[1].name: duplicate parameter name`}},
		{"parameter type missing", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"to"}]`})), "capabilities[0].parameters[0].type", "compose", []string{`parameter "to"`, "required member missing"}},
		{"parameter type typo", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"cc","type":"any"},{"name":"to","type":"strng"}]`})),
			"capabilities[0].parameters[1].type", "compose",
			[]string{`manifest org.example.mail: capability "compose": parameter "to": capabilities[0].parameters[1].type: unknown type "strng"`}},
		{"parameter type number", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"to","type":1}]`})), "capabilities[0].parameters[0].type", "compose", []string{"expected string, got number"}},
		{"parameter required string", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"to","type":"string","required":"no"}]`})),
			"capabilities[0].parameters[0].required", "compose", []string{"expected boolean, got string"}},
		{"parameter required null", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"to","type":"string","required":null}]`})),
			"capabilities[0].parameters[0].required", "compose", []string{"expected boolean, got null"}},
		{"parameter description long", manifestJSON(capJSON(map[string]string{"parameters": `[{"name":"to","type":"string","description":"` + long + `"}]`})),
			"capabilities[0].parameters[0].description", "compose", []string{"longer than 4096"}},
		{"second capability", manifestJSON(capJSON(nil), capJSON(map[string]string{"name": `"reply"`, "tier": `"x"`})), "capabilities[1].tier", "reply", []string{`capability "reply"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Parse(testApp, json.RawMessage(tt.raw))
			if err == nil {
				t.Fatalf("Parse = %+v, want error", m)
			}
			checkError(t, err, api.CodeManifestInvalid, tt.field, tt.capability, tt.msgs...)
			if got := (err.(*api.Error)).DataMap()["app_id"]; got != testApp {
				t.Errorf("got Data app_id %v, want %q", got, testApp)
			}
		})
	}
}

func TestParseLongUnknownMemberClipped(t *testing.T) {
	name := strings.Repeat("é", 1000)
	raw := `{"version":"1.0","capabilities":[],"signature":"","` + name + `":1}`
	_, err := Parse(testApp, json.RawMessage(raw))
	checkError(t, err, api.CodeManifestInvalid, "", "-", "unknown member")
	if len(err.Error()) > 500 {
		t.Errorf("got a %d-byte message, want it clipped", len(err.Error()))
	}
}

func TestCapabilityID(t *testing.T) {
	if got, want := CapabilityID(testApp, "compose"), "org.example.mail.compose"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
