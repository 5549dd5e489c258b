package cli_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestScompEval: pcpctl scomp eval runs code given as an argument or in a
// file on pcpd's scomp socket (beside --socket), prints the value as
// JSON, and reports a failed eval with its kind and a non-zero exit.
func TestScompEval(t *testing.T) {
	d := startDaemon(t)
	if out := d.mustRun(t, "scomp", "eval", "1 + 1"); out != "2\n" {
		t.Errorf("eval 1 + 1 printed %q, want 2", out)
	}
	if out := d.mustRun(t, "scomp", "eval", "const r = await pcp_inspection_ping({payload: [1, 'x']}); r.data"); out != `{"pong":true,"payload":[1,"x"]}`+"\n" {
		t.Errorf("a binding call printed %q", out)
	}
	file := filepath.Join(t.TempDir(), "prog.js")
	os.WriteFile(file, []byte("const xs = [];\nfor (let i = 0; i < 3; i++) xs.push((await pcp_inspection_ping({payload: i})).data.payload);\nxs\n"), 0o600)
	if out := d.mustRun(t, "scomp", "eval", "-f", file); out != "[0,1,2]\n" {
		t.Errorf("eval -f printed %q", out)
	}
	_, errOut, err := d.run(t, "scomp", "eval", "nope()")
	if err == nil || !strings.Contains(err.Error(), "the eval failed (EvalError)") || !strings.HasPrefix(errOut, "ReferenceError: 'nope' is not defined\n") {
		t.Errorf("a failing eval: %v, stderr %q", err, errOut)
	}
	if _, _, err := d.run(t, "scomp", "eval"); err == nil {
		t.Error("eval without code succeeded")
	}
}
