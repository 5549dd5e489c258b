package policy

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func mib(v int, from string) Valued[int] { return Valued[int]{v, from} }

func TestScomp(t *testing.T) {
	const (
		fromScomp  = "policy.toml: scomp"
		fromClaude = "policy.toml: agents.claude.scomp"
		fromSlow   = "policy.toml: agents.slow.scomp"
		fromQuoted = `policy.toml: agents."x.y".scomp`
	)
	builtin := ScompLimits{dur(DefaultScompEvalTimeout, FromBuiltin), mib(DefaultScompMemoryLimitMiB, FromBuiltin)}
	agentsOnly := `
[agents.claude.scomp]
eval_timeout = "5s"
memory_limit_mib = 128

[agents.slow.scomp]
eval_timeout = "10m"

[agents.careful]
trust_level = "confirm"

[agents."x.y".scomp]
memory_limit_mib = 1
`
	global := "[scomp]\neval_timeout = \"1m\"\nmemory_limit_mib = 512\n" + agentsOnly
	tests := []struct {
		name, doc, agent string
		want             ScompLimits
	}{
		{"no file", "", "", builtin},
		{"no file, an agent", "", "claude", builtin},
		{"other tables only", samplePolicy, "claude", builtin},
		{"scomp sets one key", "[scomp]\nmemory_limit_mib = 32\n", "",
			ScompLimits{dur(DefaultScompEvalTimeout, FromBuiltin), mib(32, fromScomp)}},
		{"scomp, no agent", global, "", ScompLimits{dur(time.Minute, fromScomp), mib(512, fromScomp)}},
		{"scomp, an agent without rules", global, "other", ScompLimits{dur(time.Minute, fromScomp), mib(512, fromScomp)}},
		{"scomp, an agent without scomp rules", global, "careful", ScompLimits{dur(time.Minute, fromScomp), mib(512, fromScomp)}},
		{"agent over scomp", global, "claude", ScompLimits{dur(5*time.Second, fromClaude), mib(128, fromClaude)}},
		{"agent sets the timeout, scomp the memory", global, "slow", ScompLimits{dur(10*time.Minute, fromSlow), mib(512, fromScomp)}},
		{"agent sets the memory, scomp the timeout", global, "x.y", ScompLimits{dur(time.Minute, fromScomp), mib(1, fromQuoted)}},
		{"agent over built-in", agentsOnly, "slow", ScompLimits{dur(10*time.Minute, fromSlow), mib(DefaultScompMemoryLimitMiB, FromBuiltin)}},
		{"agent rules are not global", agentsOnly, "", builtin},
		{"bounds", "[scomp]\neval_timeout = \"100ms\"\nmemory_limit_mib = 4096\n[agents.a.scomp]\neval_timeout = \"1h\"\nmemory_limit_mib = 1\n", "a",
			ScompLimits{dur(time.Hour, "policy.toml: agents.a.scomp"), mib(1, "policy.toml: agents.a.scomp")}},
		{"bounds, no agent", "[scomp]\neval_timeout = \"100ms\"\nmemory_limit_mib = 4096\n", "",
			ScompLimits{dur(100*time.Millisecond, fromScomp), mib(4096, fromScomp)}},
		{"inline tables", "scomp = { eval_timeout = \"2s\" }\nagents = { claude = { scomp = { memory_limit_mib = 8 } } }\n", "claude",
			ScompLimits{dur(2*time.Second, fromScomp), mib(8, fromClaude)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("/etc/pcp/policy.toml", []byte(tt.doc))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if diff := cmp.Diff(tt.want, p.Scomp(tt.agent)); diff != "" {
				t.Errorf("Scomp(%q) mismatch (-want +got):\n%s", tt.agent, diff)
			}
		})
	}
}

func TestScompDefault(t *testing.T) {
	want := ScompLimits{dur(30*time.Second, FromBuiltin), mib(64, FromBuiltin)}
	for _, agent := range []string{"", "claude"} {
		if got := Default().Scomp(agent); got != want {
			t.Errorf("Default().Scomp(%q) = %+v, want %+v", agent, got, want)
		}
	}
}
