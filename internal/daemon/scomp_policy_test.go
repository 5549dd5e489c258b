package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// The user's policy sets the scomp eval limits, over pcpd's flags, and
// a reload applies to the next eval: [scomp] eval_timeout ends a spin
// at the policy's limit, not the flag's, and after a reload to
// memory_limit_mib = 8 (the eval limit the flag's again) an eval
// allocating 2 MiB runs and one allocating 16 MiB is a MemoryError.
func TestScompPolicyLimits(t *testing.T) {
	testkit.CheckGoroutines(t)
	pol := filepath.Join(t.TempDir(), "policy.toml")
	if err := os.WriteFile(pol, []byte("[scomp]\neval_timeout = \"250ms\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := start(t, Config{PolicyFile: pol, Scomp: ScompConfig{EvalTimeout: 20 * time.Second}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc, err := client.DialScomp(ctx, r.cfg.Scomp.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	evalErr := func(code string) *client.ScompError {
		t.Helper()
		v, err := sc.Eval(ctx, code)
		var se *client.ScompError
		if !errors.As(err, &se) {
			t.Fatalf("eval %q: %s, %v; want an eval error", code, v, err)
		}
		return se
	}
	if se := evalErr("while (true) {}"); se.Data.Kind != "TimeoutError" || !strings.Contains(se.Message, "longer than 250ms") {
		t.Fatalf("a spin under the policy's eval_timeout: %s (%s)", se.Message, se.Data.Kind)
	}
	if err := os.WriteFile(pol, []byte("[scomp]\nmemory_limit_mib = 8\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	user, err := client.Dial(ctx, r.cfg.ControlSocket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	if err := user.Call(ctx, "policy.reload", map[string]any{}, nil); err != nil {
		t.Fatal(err)
	}
	// The eval limit is the flag's again: this takes longer than 250ms
	// with the race detector on.
	if v, err := sc.Eval(ctx, "'x'.repeat(2 << 20).length"); err != nil || string(v) != "2097152" {
		t.Fatalf("2 MiB under memory_limit_mib = 8: %s, %v", v, err)
	}
	if se := evalErr("'y'.repeat(16 << 20).length"); se.Data.Kind != "MemoryError" || !strings.Contains(se.Message, "8388608 bytes") {
		t.Fatalf("16 MiB under memory_limit_mib = 8: %s (%s)", se.Message, se.Data.Kind)
	}
	if v, err := sc.Eval(ctx, "1 + 1"); err != nil || string(v) != "2" {
		t.Fatalf("the next eval: %s, %v", v, err)
	}
}
