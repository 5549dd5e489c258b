package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const samplePolicy = `# defaults for everything
[defaults]
timeout = "20s"

[apps."org.pcp.notes"]
trust_level = "auto"
timeout = "10s"

[apps."org.pcp.notes".capabilities.delete]
trust_level = "deny"
timeout = "2s"

[apps."org.pcp.mail".capabilities.send]
trust_level = "confirm"

[sources.SystemIntelligence]
trust_level = "confirm"
`

const (
	fromNotes  = `policy.toml: apps."org.pcp.notes"`
	fromDelete = `policy.toml: apps."org.pcp.notes".capabilities.delete`
	fromSend   = `policy.toml: apps."org.pcp.mail".capabilities.send`
	fromSI     = `policy.toml: sources.SystemIntelligence`
	fromDefs   = `policy.toml: defaults`
	si         = "SystemIntelligence"
)

func mustParse(t *testing.T, text string) *Policy {
	t.Helper()
	p, err := Parse("/home/u/.config/pcp/policy.toml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

func dur(v time.Duration, from string) Valued[time.Duration] { return Valued[time.Duration]{v, from} }
func lvl(v, from string) Valued[string]                      { return Valued[string]{v, from} }

func TestDecide(t *testing.T) {
	p := mustParse(t, samplePolicy)
	tests := []struct {
		name                 string
		p                    *Policy
		app, capName, source string
		declared             string
		timeoutMS            int64
		want                 Decision
	}{
		{"manifest only", p, "org.other", "x", "", "confirm", 0,
			Decision{lvl("confirm", FromManifest), dur(20*time.Second, fromDefs)}},
		{"manifest timeout over defaults", p, "org.other", "x", "", "auto", 5000,
			Decision{lvl("auto", FromManifest), dur(5*time.Second, FromManifest)}},
		{"negative manifest timeout is none", p, "org.other", "x", "", "auto", -5,
			Decision{lvl("auto", FromManifest), dur(20*time.Second, fromDefs)}},
		{"app rule loosens confirm to auto", p, "org.pcp.notes", "edit", "", "confirm", 5000,
			Decision{lvl("auto", fromNotes), dur(10*time.Second, fromNotes)}},
		{"capability rule over app rule", p, "org.pcp.notes", "delete", "", "auto", 5000,
			Decision{lvl("deny", fromDelete), dur(2*time.Second, fromDelete)}},
		{"capability rule without app rule", p, "org.pcp.mail", "send", "", "auto", 0,
			Decision{lvl("confirm", fromSend), dur(20*time.Second, fromDefs)}},
		{"other capability of a ruled app", p, "org.pcp.mail", "read", "", "auto", 0,
			Decision{lvl("auto", FromManifest), dur(20*time.Second, fromDefs)}},
		{"source floor tightens auto", p, "org.other", "x", si, "auto", 0,
			Decision{lvl("confirm", fromSI), dur(20*time.Second, fromDefs)}},
		{"source floor never loosens deny", p, "org.other", "x", si, "deny", 0,
			Decision{lvl("deny", FromManifest), dur(20*time.Second, fromDefs)}},
		{"source floor equal keeps provenance", p, "org.other", "x", si, "confirm", 0,
			Decision{lvl("confirm", FromManifest), dur(20*time.Second, fromDefs)}},
		{"source floor over an app rule's loosening", p, "org.pcp.notes", "edit", si, "confirm", 0,
			Decision{lvl("confirm", fromSI), dur(10*time.Second, fromNotes)}},
		{"source floor under a capability deny", p, "org.pcp.notes", "delete", si, "auto", 0,
			Decision{lvl("deny", fromDelete), dur(2*time.Second, fromDelete)}},
		{"unknown source has no floor", p, "org.other", "x", "Nobody", "auto", 0,
			Decision{lvl("auto", FromManifest), dur(20*time.Second, fromDefs)}},
		{"unknown declared level is denied", p, "org.other", "x", "", "yes", 0,
			Decision{lvl("deny", `manifest (unknown trust level "yes")`), dur(20*time.Second, fromDefs)}},
		{"manifest timeout clamped high", p, "org.other", "x", "", "auto", 2 * 3600 * 1000,
			Decision{lvl("auto", FromManifest), dur(time.Hour, "manifest (clamped to 1h)")}},
		{"manifest timeout huge", p, "org.other", "x", "", "auto", 1 << 62,
			Decision{lvl("auto", FromManifest), dur(time.Hour, "manifest (clamped to 1h)")}},
		{"manifest timeout clamped low", p, "org.other", "x", "", "auto", 10,
			Decision{lvl("auto", FromManifest), dur(100*time.Millisecond, "manifest (clamped to 100ms)")}},
		{"manifest timeout at bounds", p, "org.other", "x", "", "auto", 100,
			Decision{lvl("auto", FromManifest), dur(100*time.Millisecond, FromManifest)}},
		{"built-in timeout", Default(), "org.other", "x", si, "auto", 0,
			Decision{lvl("auto", FromManifest), dur(30*time.Second, FromBuiltin)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.p.Decide(tt.app, tt.capName, tt.source, tt.declared, tt.timeoutMS)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide(%q, %q, %q, %q, %d) mismatch (-want +got):\n%s",
					tt.app, tt.capName, tt.source, tt.declared, tt.timeoutMS, diff)
			}
		})
	}
}

func TestProvenanceUsesBaseName(t *testing.T) {
	p, err := Parse("/etc/pcp/site.toml", []byte("[apps.a]\ntrust_level = \"deny\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := p.Decide("a", "c", "", "auto", 0).TrustLevel.From
	if want := "site.toml: apps.a"; got != want {
		t.Errorf("From = %q, want %q", got, want)
	}
}

func TestLimitsAndExpiry(t *testing.T) {
	p := mustParse(t, `
[defaults]
confirmation_expiry = "90s"
rate_per_app = 5          # an integer is a rate too
rate_per_connection = 0.5
rate_per_connection_burst = 0
`)
	want := Limits{
		PerApp:             Valued[float64]{5, fromDefs},
		PerAppBurst:        Valued[int]{DefaultRatePerAppBurst, FromBuiltin},
		PerConnection:      Valued[float64]{0.5, fromDefs},
		PerConnectionBurst: Valued[int]{0, fromDefs},
	}
	if diff := cmp.Diff(want, p.Limits()); diff != "" {
		t.Errorf("Limits mismatch (-want +got):\n%s", diff)
	}
	if got, want := p.ConfirmationExpiry(), dur(90*time.Second, fromDefs); got != want {
		t.Errorf("ConfirmationExpiry = %v, want %v", got, want)
	}

	d := Default()
	wantDef := Limits{
		PerApp:             Valued[float64]{50, FromBuiltin},
		PerAppBurst:        Valued[int]{100, FromBuiltin},
		PerConnection:      Valued[float64]{500, FromBuiltin},
		PerConnectionBurst: Valued[int]{1000, FromBuiltin},
	}
	if diff := cmp.Diff(wantDef, d.Limits()); diff != "" {
		t.Errorf("Default().Limits mismatch (-want +got):\n%s", diff)
	}
	if got, want := d.ConfirmationExpiry(), dur(2*time.Minute, FromBuiltin); got != want {
		t.Errorf("Default().ConfirmationExpiry = %v, want %v", got, want)
	}
}

func TestEmptyFileIsDefaults(t *testing.T) {
	p := mustParse(t, "# nothing yet\n")
	if !p.Loaded() {
		t.Errorf("Loaded = false, want true")
	}
	if diff := cmp.Diff(Default().Limits(), p.Limits()); diff != "" {
		t.Errorf("Limits mismatch (-want +got):\n%s", diff)
	}
	got := p.Decide("a", "c", si, "auto", 0)
	want := Decision{lvl("auto", FromManifest), dur(DefaultTimeout, FromBuiltin)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Decide mismatch (-want +got):\n%s", diff)
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pcp", "policy.toml")
	p, err := Load(path)
	if err != nil {
		t.Fatalf("Load(missing) error: %v", err)
	}
	if p.Path() != path {
		t.Errorf("Path() = %q, want %q", p.Path(), path)
	}
	if p.Loaded() {
		t.Errorf("Loaded() = true, want false")
	}
	if diff := cmp.Diff(Default().Limits(), p.Limits()); diff != "" {
		t.Errorf("Limits mismatch (-want +got):\n%s", diff)
	}
	if got, want := p.ConfirmationExpiry(), dur(DefaultConfirmationExpiry, FromBuiltin); got != want {
		t.Errorf("ConfirmationExpiry = %v, want %v", got, want)
	}
}

func TestLoadFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(path, []byte(samplePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if p.Path() != path || !p.Loaded() {
		t.Errorf("Path, Loaded = %q, %v; want %q, true", p.Path(), p.Loaded(), path)
	}
	if got := p.Decide("org.pcp.notes", "delete", "", "auto", 0).TrustLevel; got != lvl("deny", fromDelete) {
		t.Errorf("Decide trust = %v, want deny from %s", got, fromDelete)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxFileSize)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[defaults]\ntimeout = \"soon\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{big, "more than the 1048576 allowed"},
		{bad, bad + `:2: defaults.timeout: invalid duration "soon"`},
		{dir, dir + ": "}, // a directory cannot be read as a file
	} {
		_, err := Load(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Load(%s) error = %v, want it to contain %q", tt.path, err, tt.want)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		30 * time.Second:                     "30s",
		2 * time.Minute:                      "2m",
		time.Hour:                            "1h",
		90 * time.Minute:                     "1h30m",
		time.Hour + time.Second:              "1h0m1s",
		100 * time.Millisecond:               "100ms",
		2*time.Minute + 500*time.Millisecond: "2m0.5s",
	} {
		if got := formatDuration(d); got != want {
			t.Errorf("formatDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestConcurrentUse(t *testing.T) {
	p := mustParse(t, samplePolicy)
	caps := []CapabilityInput{{AppID: "org.pcp.notes", Name: "delete", TrustLevel: "auto"}}
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				p.Decide("org.pcp.notes", "edit", si, "auto", 0)
				p.View(caps, si)
				p.Limits()
				p.ConfirmationExpiry()
			}
		}()
	}
	for range 4 {
		<-done
	}
}
