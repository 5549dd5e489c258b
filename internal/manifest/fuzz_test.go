package manifest

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
)

var fuzzManifests = []string{
	specExample,
	`{"version":"1","publisher":"p","description":"d","signature":"","capabilities":[
	  {"name":"send_later","tier":3,"trust_level":"auto","description":"x","confirmation_type":"send",
	   "undo_window_ms":5000,"timeout_ms":86400000,"parameters":[
	    {"name":"when","type":"integer","required":true},{"name":"id","type":"any","required":false},
	    {"name":"n","type":"number"},{"name":"b","type":"boolean","required":false},
	    {"name":"o","type":"object","required":false},{"name":"a","type":"array","required":false}]},
	  {"name":"x","tier":2.0,"trust_level":"deny"}]}`,
	`{"version":"2.0","capabilities":[],"signature":""}`,
	`{"version":"1.0","capabilities":[{"name":"a","tier":1,"trust_level":"auto","trust_lvl":"x"}],"signature":""}`,
	`{"version":"1.0","capabilities":[{"name":"a","tier":"1","trust_level":"auto"}],"signature":""}`,
	`{"version":"1.0","capabilities":[{"name":"a","tier":1e400,"trust_level":"auto"}],"signature":""}`,
	`{"version":"1.0","capabilities":[{"name":"a","tier":1,"trust_level":"auto","parameters":[{"name":"to","type":"strng"}]}],"signature":""}`,
	`{"version":"1.0","capabilities":[{"name":"a","tier":1,"trust_level":"auto"},{"name":"a","tier":1,"trust_level":"auto"}],"signature":""}`,
	`{"version":"1.0","version":"1.0"}`,
	`[]`, `null`, `{`,
}

// FuzzParse checks that Parse never panics, fails only with
// MANIFEST_INVALID, and that what it accepts can be signed, verified and
// parsed again to the same declarations.
func FuzzParse(f *testing.F) {
	for _, s := range fuzzManifests {
		f.Add([]byte(s))
	}
	key := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	ts, err := NewTrustStore(map[string]ed25519.PublicKey{"fuzz": key.Public().(ed25519.PublicKey)})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := Parse(testApp, raw)
		if err != nil {
			var e *api.Error
			if !errors.As(err, &e) || e.Code != api.CodeManifestInvalid {
				t.Fatalf("Parse(%q): got error %T %v, want MANIFEST_INVALID", raw, err, err)
			}
			if e.DataMap()["app_id"] != testApp {
				t.Fatalf("Parse(%q): error %v has no app_id", raw, err)
			}
			return
		}
		if n := len(m.Capabilities); n < 1 || n > MaxCapabilities {
			t.Fatalf("Parse(%q) accepted %d capabilities", raw, n)
		}
		names := map[string]bool{}
		for _, c := range m.Capabilities {
			if !capNameRE.MatchString(c.Name) || names[c.Name] {
				t.Fatalf("Parse(%q) accepted capability name %q", raw, c.Name)
			}
			names[c.Name] = true
			for _, p := range c.Parameters {
				if err := CheckParams(CapabilityID(testApp, c.Name), []api.ParamDecl{p}, nil); err != nil && !errors.Is(err, api.ErrInvalidParams) {
					t.Fatalf("CheckParams on accepted declaration %+v: %v", p, err)
				}
			}
		}
		signed, err := Sign(raw, key)
		if err != nil {
			t.Fatalf("Sign(%q): %v", raw, err)
		}
		if pub, err := ts.Verify(testApp, signed); err != nil || pub != "fuzz" {
			t.Fatalf("Verify(Sign(%q)) = %q, %v", raw, pub, err)
		}
		m2, err := Parse(testApp, signed)
		if err != nil {
			t.Fatalf("Parse(Sign(%q)): %v", raw, err)
		}
		m2.Signature = m.Signature
		if diff := cmp.Diff(m, m2); diff != "" {
			t.Fatalf("Parse(Sign(%q)) differs (-before +after):\n%s", raw, diff)
		}
	})
}

// FuzzCheckParams checks that CheckParams never panics and fails only with
// INVALID_PARAMS naming a params field, for declarations Parse accepted.
func FuzzCheckParams(f *testing.F) {
	params := []string{
		``, `null`, `{}`, `[]`, `"x"`, `{"recipient":"a","subject":"b","body":"c"}`,
		`{"recipient":1}`, `{"when":1.0,"n":1e300,"o":{},"a":[],"id":null}`, `{"when":1.5}`,
		`{"when":9223372036854775808}`, `{"when":-9223372036854775808}`, `{"when":1e-99999999999999999999}`,
		`{"x":1,"x":2}`, `{"recipient":"\ud800"}`,
	}
	for i, p := range params {
		f.Add([]byte(fuzzManifests[i%2]), []byte(p))
	}
	fallback, err := Parse(testApp, []byte(fuzzManifests[1]))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, manifest, params []byte) {
		m, err := Parse(testApp, manifest)
		if err != nil {
			m = fallback
		}
		for _, c := range m.Capabilities {
			err := CheckParams(CapabilityID(testApp, c.Name), c.Parameters, params)
			if err == nil {
				continue
			}
			var e *api.Error
			if !errors.As(err, &e) || e.Code != api.CodeInvalidParams {
				t.Fatalf("CheckParams(%q): got error %T %v, want INVALID_PARAMS", params, err, err)
			}
			field, _ := e.DataMap()["field"].(string)
			if field != "params" && !strings.HasPrefix(field, "params.") {
				t.Fatalf("CheckParams(%q): error %v names field %q", params, err, field)
			}
		}
	})
}
