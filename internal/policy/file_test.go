package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name     string
		text     string
		wantKey  string // Error.Key of the (first) error
		wantLine int
		wantMsg  string // substring of the message
	}{
		{"unknown app key", "[apps.\"org.pcp.notes\"]\ntrust_lvl = \"deny\"\n",
			`apps."org.pcp.notes".trust_lvl`, 2, "unknown key, want one of capabilities, tier3, timeout, trust_level"},
		{"key in the wrong case", "[apps.a]\nTrust_Level = \"deny\"\n",
			"apps.a.Trust_Level", 2, "case-sensitive"},
		{"unknown table", "\n[default]\ntimeout = \"1s\"\n",
			"default", 2, "want one of agents, apps, defaults, scomp, sources"},
		{"unknown defaults key", "[defaults]\nrate_per_ap = 1\n",
			"defaults.rate_per_ap", 2, "unknown key"},
		{"unknown capability key", "[apps.a.capabilities.c]\ntrust = \"auto\"\n",
			"apps.a.capabilities.c.trust", 2, "unknown key"},
		{"unknown key in a dotted key", "apps.a.capabilities.c.level = \"auto\"\n",
			"apps.a.capabilities.c.level", 1, "unknown key"},
		{"unknown key in an inline table", "[apps]\na = { trust_level = \"auto\", tmeout = \"1s\" }\n",
			"apps.a.tmeout", 2, "unknown key"},
		{"unknown source", "[sources.Human]\ntrust_level = \"auto\"\n",
			"sources.Human", 1, `unknown invocation source "Human"`},
		{"empty app id", "[apps.\"\"]\ntrust_level = \"auto\"\n",
			`apps.""`, 1, "empty name"},
		{"value where a table belongs", "apps = 5\n",
			"apps", 1, "must be a table, not an integer"},
		{"array of tables", "[[apps]]\ntrust_level = \"deny\"\n",
			"apps", 1, "must be a table, not an array of tables"},
		{"app rule that is a string", "[apps]\n\"org.a\" = \"deny\"\n",
			`apps."org.a"`, 2, "must be a table, not a string"},

		{"unknown key with a multi-line value", "[apps.a]\nnote = \"\"\"\n[apps.b]\ntrust_lvl = 1\n\"\"\"\n",
			"apps.a.note", 2, "unknown key"},
		{"table made by a dotted key where a value belongs", "[apps.\"org.a\"]\n\ntimeout.x = \"1s\"\n",
			`apps."org.a".timeout`, 3, "got a table"},
		{"source named like a wildcard", "[sources.\"*\"]\ntrust_level = \"auto\"\n",
			`sources."*"`, 1, "unknown invocation source"},
		{"table in the wrong case", "[Apps.a]\ntrust_level = \"auto\"\n",
			"Apps", 1, "want one of agents, apps, defaults, scomp, sources"},
		{"bad trust level", "[apps.a]\n\ntrust_level = \"allow\"\n",
			"apps.a.trust_level", 3, `unknown trust level "allow", want "auto", "confirm" or "deny"`},
		{"trust level not a string", "[sources.SystemIntelligence]\ntrust_level = 2\n",
			"sources.SystemIntelligence.trust_level", 2, "want a trust level string, got integer 2"},
		{"table where a trust level belongs", "[apps.a.trust_level]\nx = 1\n",
			"apps.a.trust_level", 1, "got a table"},
		{"bad duration", "[defaults]\ntimeout = \"10 s\"\n",
			"defaults.timeout", 2, `invalid duration "10 s"`},
		{"duration without unit", "[apps.a]\ntimeout = 30\n",
			"apps.a.timeout", 2, `want a duration string such as "30s", got integer 30`},
		{"negative duration", "[apps.a.capabilities.c]\ntimeout = \"-1s\"\n",
			"apps.a.capabilities.c.timeout", 2, `duration "-1s" must be positive`},
		{"zero duration", "[defaults]\nconfirmation_expiry = \"0s\"\n",
			"defaults.confirmation_expiry", 2, `duration "0s" must be positive`},
		{"timeout too long", "[defaults]\ntimeout = \"2h\"\n",
			"defaults.timeout", 2, `duration "2h" out of range, want 100ms to 1h`},
		{"timeout too short", "[apps.a]\ntimeout = \"10ms\"\n",
			"apps.a.timeout", 2, "out of range, want 100ms to 1h"},
		{"expiry too short", "[defaults]\nconfirmation_expiry = \"1s\"\n",
			"defaults.confirmation_expiry", 2, "out of range, want 5s to 24h"},
		{"negative rate", "[defaults]\nrate_per_app = -1.0\n",
			"defaults.rate_per_app", 2, "rate -1 is negative"},
		{"nan rate", "[defaults]\nrate_per_connection = nan\n",
			"defaults.rate_per_connection", 2, "not a finite number"},
		{"infinite rate", "[defaults]\nrate_per_app = inf\n",
			"defaults.rate_per_app", 2, "not a finite number"},
		{"rate as a string", "[defaults]\nrate_per_app = \"50\"\n",
			"defaults.rate_per_app", 2, `got string "50"`},
		{"negative burst", "[defaults]\nrate_per_app_burst = -3\n",
			"defaults.rate_per_app_burst", 2, "burst -3 is negative"},
		{"fractional burst", "[defaults]\nrate_per_connection_burst = 1.5\n",
			"defaults.rate_per_connection_burst", 2, "want an integer burst, got float 1.5"},
		{"huge burst", "[defaults]\nrate_per_connection_burst = 9999999999\n",
			"defaults.rate_per_connection_burst", 2, "too large"},

		{"unknown scomp key", "[scomp]\nmemory_limit = 64\n",
			"scomp.memory_limit", 2, "unknown key, want one of eval_timeout, memory_limit_mib (keys are case-sensitive)"},
		{"scomp key in the wrong case", "[scomp]\nEval_Timeout = \"1s\"\n",
			"scomp.Eval_Timeout", 2, "case-sensitive"},
		{"unknown agent scomp key", "[agents.claude.scomp]\ntimeout = \"1s\"\n",
			"agents.claude.scomp.timeout", 2, "unknown key, want one of eval_timeout, memory_limit_mib"},
		{"scomp that is a value", "scomp = 64\n",
			"scomp", 1, "must be a table, not an integer"},
		{"agent scomp that is a string", "[agents.claude]\nscomp = \"fast\"\n",
			"agents.claude.scomp", 2, "must be a table, not a string"},
		{"scomp table below a leaf", "[scomp.eval_timeout]\nx = 1\n",
			"scomp.eval_timeout", 1, "got a table"},
		{"eval timeout without unit", "[scomp]\neval_timeout = 30\n",
			"scomp.eval_timeout", 2, `want a duration string such as "30s", got integer 30`},
		{"bad eval timeout", "[scomp]\neval_timeout = \"soon\"\n",
			"scomp.eval_timeout", 2, `invalid duration "soon"`},
		{"zero eval timeout", "[agents.claude.scomp]\neval_timeout = \"0s\"\n",
			"agents.claude.scomp.eval_timeout", 2, `duration "0s" must be positive`},
		{"eval timeout too short", "[scomp]\neval_timeout = \"99ms\"\n",
			"scomp.eval_timeout", 2, `duration "99ms" out of range, want 100ms to 1h`},
		{"eval timeout too long", "[agents.claude.scomp]\n\neval_timeout = \"1h0m1s\"\n",
			"agents.claude.scomp.eval_timeout", 3, "out of range, want 100ms to 1h"},
		{"memory limit as a string", "[scomp]\nmemory_limit_mib = \"64\"\n",
			"scomp.memory_limit_mib", 2, `want an integer number of MiB, got string "64"`},
		{"fractional memory limit", "[scomp]\nmemory_limit_mib = 64.5\n",
			"scomp.memory_limit_mib", 2, "want an integer number of MiB, got float 64.5"},
		{"zero memory limit", "[scomp]\nmemory_limit_mib = 0\n",
			"scomp.memory_limit_mib", 2, "memory limit 0 MiB out of range, want 1 to 4096"},
		{"negative memory limit", "[agents.claude.scomp]\nmemory_limit_mib = -1\n",
			"agents.claude.scomp.memory_limit_mib", 2, "memory limit -1 MiB out of range"},
		{"memory limit too large", "agents.claude.scomp.memory_limit_mib = 4097\n",
			"agents.claude.scomp.memory_limit_mib", 1, "memory limit 4097 MiB out of range, want 1 to 4096"},
		{"scomp of a bad agent name", "[agents.\"a b\".scomp]\neval_timeout = \"1s\"\n",
			`agents."a b"`, 1, `agent name "a b"`},

		{"syntax error", "[defaults]\ntimeout = \n",
			"", 2, "expected value"},
		{"unclosed table header", "[apps.a\n", // the parser reports the newline's line
			"", 2, "to end table name"},
		{"duplicate key", "[defaults]\ntimeout = \"1s\"\ntimeout = \"2s\"\n",
			"", 3, "already been defined"},
		{"too big", "#" + strings.Repeat("x", MaxFileSize),
			"", 0, "more than the 1048576 allowed"},
	}
	const file = "/home/u/.config/pcp/policy.toml"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse(file, []byte(tt.text))
			if err == nil {
				t.Fatalf("Parse succeeded (%+v), want an error", p)
			}
			var pe *Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v (%T) is not an *Error", err, err)
			}
			if pe.File != file || pe.Key != tt.wantKey || pe.Line != tt.wantLine {
				t.Errorf("got File, Line, Key = %q, %d, %q; want %q, %d, %q (error: %v)",
					pe.File, pe.Line, pe.Key, file, tt.wantLine, tt.wantKey, err)
			}
			msg := err.Error()
			prefix := "pcp: policy " + file
			if tt.wantLine > 0 {
				prefix += fmt.Sprintf(":%d", tt.wantLine)
			}
			if tt.wantKey != "" {
				prefix += ": " + tt.wantKey + ": "
			}
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("got message %q, want prefix %q", msg, prefix)
			}
			if !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("got message %q, want it to contain %q", msg, tt.wantMsg)
			}
		})
	}
}

func TestParseReportsEveryUnknownKey(t *testing.T) {
	text := `[defaults]
timout = "1s"
[apps.a]
trust_lvl = "deny"
trust_lvl2 = "deny"
[apps.a.capabilities.c.extra]
x = 1
y = 2
`
	_, err := Parse("policy.toml", []byte(text))
	if err == nil {
		t.Fatal("Parse succeeded, want an error")
	}
	want := `pcp: policy policy.toml:2: defaults.timout: unknown key, want one of confirmation_expiry, rate_per_app, rate_per_app_burst, rate_per_connection, rate_per_connection_burst, tier3, timeout (keys are case-sensitive)
pcp: policy policy.toml:4: apps.a.trust_lvl: unknown key, want one of capabilities, tier3, timeout, trust_level (keys are case-sensitive)
pcp: policy policy.toml:5: apps.a.trust_lvl2: unknown key, want one of capabilities, tier3, timeout, trust_level (keys are case-sensitive)
pcp: policy policy.toml:6: apps.a.capabilities.c.extra: unknown key, want one of timeout, trust_level (keys are case-sensitive)`
	if got := err.Error(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestParseCapsUnknownKeys(t *testing.T) {
	var b strings.Builder
	b.WriteString("[defaults]\n")
	for i := range 25 {
		fmt.Fprintf(&b, "k%d = 1\n", i)
	}
	_, err := Parse("policy.toml", []byte(b.String()))
	if err == nil {
		t.Fatal("Parse succeeded, want an error")
	}
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != maxUnknownReported+1 {
		t.Errorf("got %d lines, want %d", len(lines), maxUnknownReported+1)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "15 more key problems not shown") {
		t.Errorf("last line %q, want a count of the rest", last)
	}
}

func TestParseAcceptsFullExample(t *testing.T) {
	text := `# defaults for everything
[defaults]
confirmation_expiry = "2m"        # how long a confirmation waits for the user
timeout = "30s"                   # execution timeout unless the manifest or a rule says otherwise
rate_per_app = 50.0               # invocations/s per source and app (0 = no limit)
rate_per_app_burst = 100
rate_per_connection = 500.0
rate_per_connection_burst = 1000

[apps."org.pcp.notes"]
trust_level = "confirm"           # every capability of the app, unless a capability rule says otherwise
timeout = "10s"

[apps."org.pcp.notes".capabilities.delete]
trust_level = "deny"

[apps."org.pcp.mail"]
capabilities.send = { trust_level = "auto", timeout = "1m" }

[sources.SystemIntelligence]      # per invocation source; "SystemIntelligence" is the only source today
trust_level = "confirm"           # floor for this source: may only tighten

[scomp]                           # the scomp face's evals
eval_timeout = "30s"
memory_limit_mib = 64

[agents.claude.scomp]
memory_limit_mib = 256
`
	p, err := Parse("policy.toml", []byte(text))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	d := p.Decide("org.pcp.mail", "send", "", "deny", 0)
	want := Decision{lvl("auto", fromSend), dur(60e9, fromSend)}
	if d != want {
		t.Errorf("Decide = %+v, want %+v", d, want)
	}
	l := p.Scomp("claude")
	wantL := ScompLimits{dur(30*time.Second, "policy.toml: scomp"), Valued[int]{256, "policy.toml: agents.claude.scomp"}}
	if l != wantL {
		t.Errorf("Scomp(claude) = %+v, want %+v", l, wantL)
	}
}
