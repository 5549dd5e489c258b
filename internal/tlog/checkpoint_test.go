package tlog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/sumdb/note"
)

func TestCheckpointSignAndOpen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "checkpoint.key")
	k, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v; want 0600", fi.Mode(), err)
	}
	cp := Checkpoint{Origin: k.Origin(), Size: 42}
	cp.Root[0] = 0xab
	text, err := k.Sign(cp)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(text, "\n")
	if lines[0] != k.Origin() || lines[1] != "42" || lines[3] != "" || !strings.HasPrefix(lines[4], "— "+k.Origin()+" ") {
		t.Errorf("checkpoint text:\n%s", text)
	}
	// The note is checkable with x/mod's note package and the verifier key.
	v, err := note.NewVerifier(k.VerifierKey)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open([]byte(text), note.VerifierList(v)); err != nil {
		t.Errorf("note.Open: %v", err)
	}
	again, err := LoadOrCreateKey(path)
	if err != nil || again.VerifierKey != k.VerifierKey {
		t.Fatalf("reloaded key %v, %v", again, err)
	}
	got, err := again.Open(text)
	if err != nil || got != cp {
		t.Errorf("Open = %+v, %v; want %+v", got, err, cp)
	}
	forged := strings.Replace(text, "\n42\n", "\n41\n", 1)
	if _, err := k.Open(forged); err == nil {
		t.Error("a checkpoint with its size changed opened")
	}
	other, err := LoadOrCreateKey(filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Open(text); err == nil || !strings.Contains(err.Error(), "not signed by this log's key") {
		t.Errorf("another log's key opened the checkpoint: %v", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil {
		t.Error("a key readable by others was accepted")
	}
}

func TestParseCheckpoint(t *testing.T) {
	for _, bad := range []string{"", "origin\n", "origin\n12\n", "origin\nx\nAAAA\n", "origin\n012\n" + strings.Repeat("A", 43) + "=\n", "\n1\n" + strings.Repeat("A", 43) + "=\n", "o\n1\nAAAA\n"} {
		if _, err := ParseCheckpoint(bad); err == nil {
			t.Errorf("ParseCheckpoint(%q) succeeded", bad)
		}
	}
	c, err := ParseCheckpoint("o\n7\n" + strings.Repeat("A", 43) + "=\nextension\n")
	if err != nil || c.Size != 7 || c.Origin != "o" {
		t.Errorf("ParseCheckpoint = %+v, %v", c, err)
	}
}

// FuzzParseCheckpoint: the parser never panics, and what it accepts
// prints back to a body it parses to the same checkpoint.
func FuzzParseCheckpoint(f *testing.F) {
	f.Add("o\n7\n" + strings.Repeat("A", 43) + "=\n")
	f.Add("pcp.local/audit/00\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ParseCheckpoint(s)
		if err != nil {
			return
		}
		c2, err := ParseCheckpoint(c.Body())
		if err != nil || c2 != c {
			t.Fatalf("reparsing %q: %+v, %v; want %+v", c.Body(), c2, err, c)
		}
	})
}
