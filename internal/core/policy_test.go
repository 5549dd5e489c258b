package core

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/policy"
)

func TestPolicyDecidesTrustAndReloads(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.toml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The user loosens mail.send (declared confirm) and forbids mail.purge.
	write(`
[apps."org.example.mail".capabilities.send]
trust_level = "auto"
[apps."org.example.mail".capabilities.purge]
trust_level = "deny"
`)
	pol, err := policy.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	w := newMailWorld(t, "")
	w.b.setPolicy(pol)
	if _, err := w.send(w.agent, "a@example.com", ""); err != nil {
		t.Fatalf("send, loosened to auto by the user: %v", err)
	}
	_, err = w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.purge", AppID: "org.example.mail",
		Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"folder":"x"}`)})
	if !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("purge, denied by the user: got %v", err)
	}
	caps, _ := w.b.QueryCapabilities(w.agent, &api.QueryCapabilitiesParams{AppID: "org.example.mail"})
	for _, c := range caps.Capabilities {
		if want := map[string]string{"purge": "deny", "send": "auto"}[c.Name]; c.TrustLevel != want {
			t.Errorf("query shows %s as %s, want the effective %s", c.Name, c.TrustLevel, want)
		}
	}
	view, err := w.b.PolicyShow(w.agent, &api.PolicyShowParams{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range view.Capabilities {
		if c.Name == "send" && (c.Declared != "confirm" || c.TrustLevel.Value != "auto" || c.TrustLevel.From == "manifest") {
			t.Errorf("policy show for send = %+v", c)
		}
	}

	// A source floor tightens everything back to confirm; only the user reloads.
	write(`
[sources.SystemIntelligence]
trust_level = "confirm"
`)
	if _, err := w.b.ReloadPolicy(w.agent); !errors.Is(err, api.ErrPermissionDenied) {
		t.Fatalf("agent reload: got %v, want PERMISSION_DENIED", err)
	}
	if _, err := w.b.ReloadPolicy(w.user); err != nil {
		t.Fatal(err)
	}
	if _, err := w.send(w.agent, "a@example.com", ""); !errors.Is(err, api.ErrConfirmationRequired) {
		t.Fatalf("after the floor: got %v, want CONFIRMATION_REQUIRED", err)
	}

	// A broken file leaves the policy in force and says where it broke.
	write("[sources.SystemIntelligence]\ntrust_lvl = \"auto\"\n")
	_, err = w.b.ReloadPolicy(w.user)
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodeInvalidParams || pe.DataMap()["key"] == "" {
		t.Fatalf("broken policy: got %v, want INVALID_PARAMS naming the key", err)
	}
	if _, err := w.send(w.agent, "a@example.com", ""); !errors.Is(err, api.ErrConfirmationRequired) {
		t.Fatalf("after a failed reload the floor must stay: got %v", err)
	}
	tail, _ := w.b.AuditTail(context.Background(), &api.AuditTailParams{Limit: 50})
	outcomes := []string{}
	for _, e := range tail.Entries {
		if e.Kind == "policy" {
			outcomes = append(outcomes, e.Outcome)
		}
	}
	if len(outcomes) != 2 || outcomes[0] != "loaded" || outcomes[1] != "load_failed" {
		t.Errorf("policy audit entries = %v, want [loaded load_failed]", outcomes)
	}
}

func TestPolicyRateLimits(t *testing.T) {
	pol, err := policy.Parse("policy.toml", []byte("[defaults]\nrate_per_app = 1.0\nrate_per_app_burst = 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := newMailWorld(t, "")
	w.b.setPolicy(pol)
	_, err = w.send(w.agent, "a@example.com", "")
	required(t, err)
	_, err = w.send(w.agent, "b@example.com", "")
	if !errors.Is(err, api.ErrRateLimited) {
		t.Errorf("second invocation under a 1/s policy: got %v, want RATE_LIMITED", err)
	}
}

func TestPolicyShowScomp(t *testing.T) {
	pol, err := policy.Parse("policy.toml", []byte("[scomp]\neval_timeout = \"5s\"\n[agents.claude.scomp]\nmemory_limit_mib = 256\n"))
	if err != nil {
		t.Fatal(err)
	}
	w := newMailWorld(t, "")
	w.b.setPolicy(pol)
	tests := []struct {
		agent string
		want  api.PolicyScomp
	}{
		{"", api.PolicyScomp{
			EvalTimeout:    api.Valued{Value: "5s", From: "policy.toml: scomp"},
			MemoryLimitMiB: api.Valued{Value: float64(64), From: policy.FromBuiltin},
		}},
		{"claude", api.PolicyScomp{
			EvalTimeout:    api.Valued{Value: "5s", From: "policy.toml: scomp"},
			MemoryLimitMiB: api.Valued{Value: float64(256), From: "policy.toml: agents.claude.scomp"},
		}},
	}
	for _, tt := range tests {
		view, err := w.b.PolicyShow(w.user, &api.PolicyShowParams{Agent: tt.agent})
		if err != nil {
			t.Fatal(err)
		}
		if view.Scomp != tt.want {
			t.Errorf("policy show for agent %q: scomp %+v, want %+v", tt.agent, view.Scomp, tt.want)
		}
	}
}
