package policy

import (
	"errors"
	"testing"
)

// fuzzSeeds are the shapes the golden tests use; the corpus in
// testdata/fuzz/FuzzParse adds the awkward ones.
var fuzzSeeds = []string{
	samplePolicy,
	"",
	"[defaults]\nconfirmation_expiry = \"2m\"\nrate_per_app = 50.0\nrate_per_app_burst = 100\n",
	"[apps.\"org.pcp.notes\"]\ntrust_lvl = \"deny\"\n",
	"[apps.a]\ntimeout = 30\n",
	"apps.a.capabilities.c = { trust_level = \"auto\", timeout = \"1s\" }\n",
	"[sources.SystemIntelligence]\ntrust_level = \"deny\"\n",
	"[[apps]]\n",
	"[scomp]\neval_timeout = \"30s\"\nmemory_limit_mib = 64\n[agents.claude.scomp]\nmemory_limit_mib = 256\n",
}

func FuzzParse(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse("policy.toml", data)
		if err != nil {
			if p != nil {
				t.Fatalf("Parse(%q) returned a policy and error %v", data, err)
			}
			var pe *Error
			if !errors.As(err, &pe) || pe.File != "policy.toml" || pe.Err == nil {
				t.Fatalf("Parse(%q): error %T %v is not an *Error naming the file", data, err, err)
			}
			if err.Error() == "" || pe.Err.Error() == "" {
				t.Fatalf("Parse(%q): empty error message", data)
			}
			return
		}
		if !p.Loaded() {
			t.Fatalf("Parse(%q): Loaded() = false", data)
		}
		// Whatever was accepted yields values within bounds for any
		// capability, including the ones the file names.
		var caps []CapabilityInput
		for app, a := range p.apps {
			caps = append(caps, CapabilityInput{AppID: app, Name: "x", TrustLevel: "auto"})
			for c := range a.Capabilities {
				caps = append(caps, CapabilityInput{AppID: app, Name: c, TrustLevel: "confirm", TimeoutMS: 1})
			}
		}
		caps = append(caps, CapabilityInput{AppID: "other", Name: "y", TrustLevel: "bogus", TimeoutMS: 1 << 40})
		v := p.View(caps, "SystemIntelligence")
		for _, c := range v.Capabilities {
			if rank(c.TrustLevel.Value) < 0 || c.TrustLevel.From == "" {
				t.Fatalf("Parse(%q): %s/%s trust level %+v", data, c.AppID, c.Name, c.TrustLevel)
			}
			if c.Timeout.Value < MinTimeout || c.Timeout.Value > MaxTimeout || c.Timeout.From == "" {
				t.Fatalf("Parse(%q): %s/%s timeout %+v", data, c.AppID, c.Name, c.Timeout)
			}
		}
		if e := v.ConfirmationExpiry.Value; e < MinConfirmationExpiry || e > MaxConfirmationExpiry {
			t.Fatalf("Parse(%q): confirmation expiry %v", data, e)
		}
		l := v.Limits
		if l.PerApp.Value < 0 || l.PerConnection.Value < 0 || l.PerAppBurst.Value < 0 || l.PerConnectionBurst.Value < 0 {
			t.Fatalf("Parse(%q): limits %+v", data, l)
		}
		agents := []string{"", "other"}
		for a := range p.agents {
			agents = append(agents, a)
		}
		for _, a := range agents {
			s := p.Scomp(a)
			if e := s.EvalTimeout.Value; e < MinScompEvalTimeout || e > MaxScompEvalTimeout || s.EvalTimeout.From == "" {
				t.Fatalf("Parse(%q): scomp eval timeout of %q %+v", data, a, s.EvalTimeout)
			}
			if m := s.MemoryLimitMiB.Value; m < MinScompMemoryLimitMiB || m > MaxScompMemoryLimitMiB || s.MemoryLimitMiB.From == "" {
				t.Fatalf("Parse(%q): scomp memory limit of %q %+v", data, a, s.MemoryLimitMiB)
			}
		}
	})
}
