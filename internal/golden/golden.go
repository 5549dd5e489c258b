// Package golden is what the project's golden-file tests share: the
// -update flag, one subtest per transcript file, reading and rewriting
// the sections of a txtar archive, and playing a transcript of named
// connections against a face (transcript.go; line connections in
// lines.go). What a line's text means stays with each face's test. Only
// tests import it.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/tools/txtar"
)

// Update makes golden tests rewrite their expected output from what the
// code under test produces (go test ./... -update), for review in the diff.
var Update = flag.Bool("update", false, "rewrite the golden files (and the docs generated with them) from the code under test")

// ForEach runs f as a subtest, named after the file, for every file
// matching pattern; no file at all fails the test.
func ForEach(t *testing.T, pattern string, f func(t *testing.T, file string)) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files match %s: %v", pattern, err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txtar"), func(t *testing.T) { f(t, file) })
	}
}

// Archive is a txtar file read from disk.
type Archive struct {
	*txtar.Archive
	path string
}

// Load reads the txtar file at path.
func Load(t testing.TB, path string) *Archive {
	t.Helper()
	ar, err := txtar.ParseFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return &Archive{Archive: ar, path: path}
}

// Section returns the data of the named section, nil when there is none.
func (a *Archive) Section(name string) []byte {
	for _, f := range a.Files {
		if f.Name == name {
			return f.Data
		}
	}
	return nil
}

// Lines returns the named section's lines, without the final newline's
// empty one.
func (a *Archive) Lines(name string) []string {
	s := strings.TrimSuffix(string(a.Section(name)), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Save replaces the named section's data and writes the archive back.
func (a *Archive) Save(t testing.TB, name string, data []byte) {
	t.Helper()
	for i := range a.Files {
		if a.Files[i].Name == name {
			a.Files[i].Data = data
		}
	}
	Write(t, a.path, a.Archive)
}

// Write writes ar to path.
func Write(t testing.TB, path string, ar *txtar.Archive) {
	t.Helper()
	if err := os.WriteFile(path, txtar.Format(ar), 0o644); err != nil {
		t.Fatal(err)
	}
}
