package policy

import "testing"

func TestTier3(t *testing.T) {
	p, err := Parse("policy.toml", []byte("[defaults]\ntier3 = \"deny\"\n[apps.\"atspi.gtk4-widget-factory\"]\ntier3 = \"auto\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ app, want, from string }{
		{"atspi.gtk4-widget-factory", "auto", `policy.toml: apps."atspi.gtk4-widget-factory"`},
		{"xterm", "deny", "policy.toml: defaults"},
	} {
		if got := p.Tier3(c.app); got.Value != c.want || got.From != c.from {
			t.Errorf("Tier3(%s) = %+v, want %s from %s", c.app, got, c.want, c.from)
		}
	}
	if got := Default().Tier3("xterm"); got.Value != "confirm" || got.From != FromBuiltin {
		t.Errorf("the default: %+v", got)
	}
	if _, err := Parse("policy.toml", []byte("[apps.x]\ntier3 = \"sometimes\"\n")); err == nil {
		t.Error("an unknown tier3 level loaded")
	}
}

// Tier 3's level is raised, never lowered, by the source's floor and the
// agent's rules: an agent allowed only confirmed actions, or denied an
// app, gets no less through Tier 3.
func TestTier3For(t *testing.T) {
	const file = `[defaults]
tier3 = "auto"
[agents.careful]
trust_level = "confirm"
[agents.kept.apps."atspi.xterm"]
trust_level = "deny"
[agents.loose.apps."atspi.calc"]
trust_level = "auto"
[apps."atspi.calc"]
tier3 = "deny"
`
	p, err := Parse("policy.toml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ agent, app, source, want, from string }{
		{"", "atspi.xterm", "SystemIntelligence", "auto", "policy.toml: defaults"},
		{"careful", "atspi.xterm", "SystemIntelligence", "confirm", "policy.toml: agents.careful"},
		{"kept", "atspi.xterm", "SystemIntelligence", "deny", `policy.toml: agents.kept.apps."atspi.xterm"`},
		{"kept", "atspi.other", "SystemIntelligence", "auto", "policy.toml: defaults"},
		// An agent's rule never lowers what Tier 3 is given.
		{"loose", "atspi.calc", "SystemIntelligence", "deny", `policy.toml: apps."atspi.calc"`},
		{"unknown", "atspi.xterm", "SystemIntelligence", "auto", "policy.toml: defaults"},
	} {
		if got := p.Tier3For(c.agent, c.app, c.source); got.Value != c.want || got.From != c.from {
			t.Errorf("Tier3For(%q, %s) = %+v, want %s from %s", c.agent, c.app, got, c.want, c.from)
		}
	}
	p, err = Parse("policy.toml", []byte(file+"[sources.SystemIntelligence]\ntrust_level = \"confirm\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Tier3For("", "atspi.xterm", "SystemIntelligence"); got.Value != "confirm" || got.From != "policy.toml: sources.SystemIntelligence" {
		t.Errorf("with a source floor: %+v", got)
	}
}
