package atspi

import "testing"

func TestAlias(t *testing.T) {
	a := New(Config{Aliases: map[string]string{"org.example.fixed": "atspi.fixed"}})
	defer a.Close()
	a.Alias("org.gnome.Calculator", "GNOME Calculator")
	for _, tt := range []struct{ id, want string }{
		{"org.gnome.Calculator", "atspi.gnome-calculator"},
		{"org.example.fixed", "atspi.fixed"},
		{"atspi.gtk3-widget-factory", "atspi.gtk3-widget-factory"},
		{"org.example.other", "org.example.other"},
	} {
		if got := a.canonical(tt.id); got != tt.want {
			t.Errorf("canonical(%q) = %q, want %q", tt.id, got, tt.want)
		}
	}
	a.Alias("org.gnome.Calculator", "")
	a.Alias("org.example.blank", "!!!") // nothing usable in the name
	if got := a.canonical("org.gnome.Calculator"); got != "org.gnome.Calculator" {
		t.Errorf("after removing the alias: canonical = %q", got)
	}
	if got := a.canonical("org.example.blank"); got != "org.example.blank" {
		t.Errorf("an unusable name made an alias: %q", got)
	}
}
