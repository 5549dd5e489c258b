package main

import (
	"bytes"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// goTestJSON runs the real `go test -json` in dir and returns its output.
func goTestJSON(t *testing.T, dir string, args ...string) []byte {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to produce go test -json: %v", err)
	}
	cmd := exec.Command(gobin, append([]string{"test", "-json", "-count=1"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("go test -json in %s: %v\n%s", dir, err, stderr.String())
	}
	if len(out) == 0 {
		t.Fatalf("go test -json in %s wrote nothing:\n%s", dir, stderr.String())
	}
	return out
}

// The fixture module's packages pass, fail, skip, fail in a subtest,
// panic, hang past -timeout and fail to build; the report shows the
// failures' output as go test would, hides what passed, and counts them.
func TestFixture(t *testing.T) {
	t.Parallel()
	in := goTestJSON(t, "testdata/fixture", "-timeout", "3s", "./...")
	var out bytes.Buffer
	c, err := run(bytes.NewReader(in), &out, false)
	if err != nil {
		t.Fatal(err)
	}
	got := out.String()
	want := &counts{Passed: 5, Failed: 5, Skipped: 1,
		FailedTests: []string{
			"example.com/fixture/good TestFail", "example.com/fixture/good TestSub/bad", "example.com/fixture/good TestSub",
			"example.com/fixture/hangs TestHang (did not finish)", "example.com/fixture/panics TestPanic",
		},
		SkippedTests:   []string{"example.com/fixture/good TestSkip"},
		FailedPackages: []string{"example.com/fixture/broken", "example.com/fixture/good", "example.com/fixture/hangs", "example.com/fixture/panics"},
	}
	// Packages run in parallel: their order is not the test's to fix.
	slices.Sort(c.FailedTests)
	slices.Sort(c.FailedPackages)
	slices.Sort(want.FailedTests)
	if diff := cmp.Diff(want, c); diff != "" {
		t.Errorf("counts (-want +got):\n%s\n%s", diff, got)
	}
	if !c.failed() || c.run() != 11 {
		t.Errorf("failed() = %v, run() = %d", c.failed(), c.run())
	}
	for _, s := range []string{"the reason it fails", "good_test.go:9: boom", "sub boom", "--- FAIL: TestSub/bad", "undefined: undefinedName",
		"panic: the fixture panics", "panic: test timed out after 3s", "FAIL\texample.com/fixture/good", "FAIL\texample.com/fixture/broken [build failed]",
		"== test summary: 11 run, 5 passed, 5 failed, 1 skipped", "SKIPPED  example.com/fixture/good TestSkip"} {
		if !strings.Contains(got, s) {
			t.Errorf("the report lacks %q:\n%s", s, got)
		}
	}
	for _, s := range []string{"quiet when it passes", "quiet subtest", "=== RUN", "no reason to run"} {
		if strings.Contains(got, s) {
			t.Errorf("the report shows %q, which go test without -v does not:\n%s", s, got)
		}
	}
	// A package's ok/FAIL line comes after its tests' output.
	if i, j := strings.Index(got, "sub boom"), strings.Index(got, "FAIL\texample.com/fixture/good"); i < 0 || j < i {
		t.Errorf("the package line comes before its output:\n%s", got)
	}
	var summary bytes.Buffer
	if _, err := run(bytes.NewReader(in), &summary, true); err != nil {
		t.Fatal(err)
	}
	if s := summary.String(); strings.Contains(s, "boom") || !strings.HasPrefix(s, "\n== test summary: 11 run") {
		t.Errorf("-summary printed:\n%s", s)
	}
}

// A package of this module whose tests all pass: one line, nothing
// failed or skipped.
func TestPassingPackage(t *testing.T) {
	t.Parallel()
	in := goTestJSON(t, "../canonjson", ".")
	var out bytes.Buffer
	c, err := run(bytes.NewReader(in), &out, false)
	if err != nil {
		t.Fatal(err)
	}
	if c.failed() || c.Skipped != 0 || c.Passed == 0 || c.run() != c.Passed {
		t.Errorf("counts %+v:\n%s", c, out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if !strings.HasPrefix(lines[0], "ok  \tgithub.com/pcp-dev/pcp/internal/canonjson") || len(lines) != 3 || !strings.HasSuffix(lines[2], " 0 failed, 0 skipped") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestNotGoTestJSON(t *testing.T) {
	var out bytes.Buffer
	if _, err := run(strings.NewReader(""), &out, false); err == nil {
		t.Error("empty input: no error")
	}
	// Plain text go test writes (a package that does not exist) is shown.
	c, err := run(strings.NewReader("no required module provides package ./nope\n"+
		`{"Action":"fail","Package":"./nope"}`+"\n"), &out, false)
	if err != nil || !c.failed() || !strings.Contains(out.String(), "no required module provides package") {
		t.Errorf("got %+v, %v:\n%s", c, err, out.String())
	}
}
