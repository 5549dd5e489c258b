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
