// Command testsum reads `go test -json` on standard input and prints what
// `go test` prints without -v (a line per package, and the whole output
// of each test that failed, with its subtests), then a summary: how many
// tests ran, passed, failed and were skipped, naming the failed and the
// skipped ones. Tests count with their subtests; a fuzz target's seed
// corpus counts as its test.
//
//	go test -json ./... | go run ./internal/testsum
//	go run ./internal/testsum -summary < all.json    only the summary
//
// It exits 1 when a test or a package failed (a build error, a panic
// outside a test, a timeout), 2 when the input is not go test's.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	summaryOnly := flag.Bool("summary", false, "print only the summary")
	flag.Parse()
	c, err := run(os.Stdin, os.Stdout, *summaryOnly)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsum:", err)
		os.Exit(2)
	}
	if c.failed() {
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	ImportPath  string // build-output, build-fail
	FailedBuild string
}

// counts are the tests' outcomes, and the packages that failed.
type counts struct {
	Passed, Failed, Skipped int
	FailedTests             []string // "package TestName/sub"
	SkippedTests            []string
	FailedPackages          []string
}

func (c *counts) run() int { return c.Passed + c.Failed + c.Skipped }

func (c *counts) failed() bool { return c.Failed > 0 || len(c.FailedPackages) > 0 }

// maxLine bounds one line of input: test output is split by test2json
// into lines, but a test may print a very long one.
const maxLine = 16 << 20

// run reads events from r and writes the report to w.
func run(r io.Reader, w io.Writer, summaryOnly bool) (*counts, error) {
	s := &summer{w: w, quiet: summaryOnly, out: map[string]*strings.Builder{}, running: map[string]map[string]bool{}, final: map[string]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	lines := 0
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ev event
		if err := json.Unmarshal(line, &ev); err != nil || ev.Action == "" {
			// Not an event: go test writes some errors (a package that
			// does not exist) as plain text. Show it as it came.
			s.print(string(line) + "\n")
			continue
		}
		lines++
		s.add(&ev)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading go test -json: %w", err)
	}
	if lines == 0 {
		return nil, errors.New("no go test -json events on standard input")
	}
	s.summary()
	return &s.c, nil
}

// summer follows the events. out holds each running test's output (key
// package + " " + test; a package's own output under the package alone)
// until the test ends: it is shown if the test failed. A package's
// ok/FAIL line is held until the package ends, after its output.
type summer struct {
	w       io.Writer
	quiet   bool
	c       counts
	out     map[string]*strings.Builder
	running map[string]map[string]bool // package -> tests not ended
	final   map[string]string          // package -> its ok/FAIL line
}

func (s *summer) print(text string) {
	if !s.quiet {
		io.WriteString(s.w, text)
	}
}

func (s *summer) buf(key string) *strings.Builder {
	b := s.out[key]
	if b == nil {
		b = &strings.Builder{}
		s.out[key] = b
	}
	return b
}

func (s *summer) add(ev *event) {
	switch ev.Action {
	case "build-output":
		s.print(ev.Output)
		return
	case "build-fail":
		return
	}
	key := ev.Package
	if ev.Test != "" {
		key += " " + ev.Test
	}
	switch ev.Action {
	case "run":
		if s.running[ev.Package] == nil {
			s.running[ev.Package] = map[string]bool{}
		}
		s.running[ev.Package][ev.Test] = true
	case "output":
		if ev.Test == "" {
			s.packageOutput(ev)
			return
		}
		if strings.HasPrefix(ev.Output, "=== ") {
			return // -v's progress lines; go test without -v has none
		}
		s.buf(key).WriteString(ev.Output)
	case "pass", "fail", "skip":
		if ev.Test == "" {
			s.packageEnd(ev)
			return
		}
		delete(s.running[ev.Package], ev.Test)
		name := ev.Package + " " + ev.Test
		switch ev.Action {
		case "pass":
			s.c.Passed++
		case "skip":
			s.c.Skipped++
			s.c.SkippedTests = append(s.c.SkippedTests, name)
		case "fail":
			s.c.Failed++
			s.c.FailedTests = append(s.c.FailedTests, name)
			// A failed subtest's output goes with its parent's, which
			// prints it when it ends; a passed one's is dropped, as go
			// test drops it.
			if p := parent(ev.Test); p != "" && s.running[ev.Package][p] {
				s.buf(ev.Package + " " + p).WriteString(s.buf(key).String())
			} else {
				s.print(s.buf(key).String())
			}
		}
		delete(s.out, key)
	}
}

// packageOutput shows a package's own lines as go test does: its
// "ok"/"FAIL" line and whatever a test binary printed outside a test
// (a panic, a timeout); "PASS" and the per-test "--- " lines of tests
// that passed are left out.
func (s *summer) packageOutput(ev *event) {
	line := ev.Output
	switch {
	case line == "PASS\n", strings.HasPrefix(line, "=== "):
		return
	case strings.HasPrefix(line, "ok  \t"), strings.HasPrefix(line, "ok "), strings.HasPrefix(line, "FAIL\t"), strings.HasPrefix(line, "?   \t"):
		s.final[ev.Package] += line // after the rest, when the package ends
		return
	}
	s.buf(ev.Package).WriteString(line)
}

// packageEnd ends a package: a failed one shows its own output and that
// of the tests it did not finish (a panic, a timeout).
func (s *summer) packageEnd(ev *event) {
	if ev.Action == "fail" {
		s.c.FailedPackages = append(s.c.FailedPackages, ev.Package)
		var unfinished []string
		for t := range s.running[ev.Package] {
			if parent(t) == "" {
				unfinished = append(unfinished, t)
			}
		}
		slices.Sort(unfinished)
		for _, t := range unfinished {
			s.print(s.buf(ev.Package + " " + t).String())
			s.c.Failed++
			s.c.FailedTests = append(s.c.FailedTests, ev.Package+" "+t+" (did not finish)")
		}
		if b := s.out[ev.Package]; b != nil {
			s.print(b.String())
		}
	}
	s.print(s.final[ev.Package])
	delete(s.final, ev.Package)
	for k := range s.out {
		if k == ev.Package || strings.HasPrefix(k, ev.Package+" ") {
			delete(s.out, k)
		}
	}
	delete(s.running, ev.Package)
}

func (s *summer) summary() {
	c := &s.c
	fmt.Fprintf(s.w, "\n== test summary: %d run, %d passed, %d failed, %d skipped\n", c.run(), c.Passed, c.Failed, c.Skipped)
	for _, n := range c.FailedTests {
		fmt.Fprintf(s.w, "FAILED   %s\n", n)
	}
	for _, p := range c.FailedPackages {
		fmt.Fprintf(s.w, "FAILED   package %s\n", p)
	}
	for _, n := range c.SkippedTests {
		fmt.Fprintf(s.w, "SKIPPED  %s\n", n)
	}
}

// parent is the name of a subtest's parent, "" for a top-level test.
func parent(test string) string {
	i := strings.LastIndexByte(test, '/')
	if i < 0 {
		return ""
	}
	return test[:i]
}
