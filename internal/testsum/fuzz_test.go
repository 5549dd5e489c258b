package main

import (
	"bytes"
	"strings"
	"testing"
)

// FuzzRun feeds run any input: it never panics, and what it counts
// agrees with what it names.
func FuzzRun(f *testing.F) {
	f.Add([]byte(`{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Test":"TestA","Output":"=== RUN   TestA\n"}
{"Action":"output","Package":"p","Test":"TestA","Output":"--- FAIL: TestA (0.00s)\n"}
{"Action":"fail","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t0.01s\n"}
{"Action":"fail","Package":"p"}
`))
	f.Add([]byte(`{"Action":"run","Package":"p","Test":"TestA"}
{"Action":"run","Package":"p","Test":"TestA/sub"}
{"Action":"skip","Package":"p","Test":"TestA/sub"}
{"Action":"pass","Package":"p","Test":"TestA"}
{"Action":"output","Package":"p","Output":"ok  \tp\t0.01s\n"}
{"Action":"pass","Package":"p"}
`))
	f.Add([]byte(`{"Action":"build-output","ImportPath":"p [p.test]","Output":"x.go:1: undefined\n"}
{"Action":"build-fail","ImportPath":"p [p.test]"}
{"Action":"fail","Package":"p","FailedBuild":"p [p.test]"}
not json at all
`))
	f.Fuzz(func(t *testing.T, in []byte) {
		var out bytes.Buffer
		c, err := run(bytes.NewReader(in), &out, false)
		if err != nil {
			return
		}
		if c.Failed < len(c.FailedTests) || c.Skipped != len(c.SkippedTests) {
			t.Fatalf("counts %+v disagree with the names", c)
		}
		if !strings.Contains(out.String(), "== test summary: ") {
			t.Fatalf("no summary:\n%s", out.String())
		}
	})
}
