package policy

import (
	"strings"
	"testing"
)

const agentPolicy = `
[apps."org.pcp.notes".capabilities.delete]
trust_level = "confirm"

[agents.claude.apps."org.pcp.notes"]
trust_level = "confirm"

[agents.claude.apps."org.pcp.notes".capabilities.list]
trust_level = "auto"

[agents.claude.apps."org.pcp.notes".capabilities.delete]
trust_level = "deny"

[agents.careful]
trust_level = "confirm"

[agents.banned]
trust_level = "deny"
`

func TestDecideForAgent(t *testing.T) {
	p, err := Parse("policy.toml", []byte(agentPolicy))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		agent, capName, declared string
		want, from               string
	}{
		{"", "delete", "auto", "confirm", `policy.toml: apps."org.pcp.notes".capabilities.delete`},
		{"other", "delete", "auto", "confirm", `policy.toml: apps."org.pcp.notes".capabilities.delete`},
		{"claude", "delete", "auto", "deny", `policy.toml: agents.claude.apps."org.pcp.notes".capabilities.delete`},
		{"claude", "create", "auto", "confirm", `policy.toml: agents.claude.apps."org.pcp.notes"`},
		{"claude", "list", "confirm", "auto", `policy.toml: agents.claude.apps."org.pcp.notes".capabilities.list`},
		{"careful", "list", "auto", "confirm", `policy.toml: agents.careful`},
		{"careful", "delete", "auto", "confirm", `policy.toml: apps."org.pcp.notes".capabilities.delete`},
		{"careful", "wipe", "deny", "deny", FromManifest},
		{"banned", "list", "auto", "deny", `policy.toml: agents.banned`},
	}
	for _, tt := range tests {
		d := p.DecideFor(tt.agent, "org.pcp.notes", tt.capName, "SystemIntelligence", tt.declared, 0)
		if d.TrustLevel.Value != tt.want || d.TrustLevel.From != tt.from {
			t.Errorf("DecideFor(%q, %s, declared %s) = %+v, want %s from %s", tt.agent, tt.capName, tt.declared, d.TrustLevel, tt.want, tt.from)
		}
	}
	// A source floor still applies to an agent's own rules.
	p, err = Parse("policy.toml", []byte(agentPolicy+"\n[sources.SystemIntelligence]\ntrust_level = \"confirm\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.DecideFor("claude", "org.pcp.notes", "list", "SystemIntelligence", "auto", 0); d.TrustLevel.Value != "confirm" {
		t.Errorf("source floor over an agent rule: got %+v, want confirm", d.TrustLevel)
	}
}

func TestAgentRulesRefused(t *testing.T) {
	tests := []struct{ doc, want string }{
		{"[agents.\"bad/name\"]\ntrust_level = \"deny\"\n", `agents."bad/name": agent name "bad/name"`},
		{"[agents.\"\"]\ntrust_level = \"deny\"\n", "empty name"},
		{"[agents.claude]\ntimeout = \"1s\"\n", "agents.claude.timeout: unknown key"},
		{"[agents.claude]\ntrust_level = \"maybe\"\n", "unknown trust level"},
		{"[agents.claude.apps.\"org.pcp.notes\"]\ntimeout = \"1s\"\n", "unknown key"},
	}
	for _, tt := range tests {
		_, err := Parse("policy.toml", []byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tt.doc, err, tt.want)
		}
	}
}
