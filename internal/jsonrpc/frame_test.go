package jsonrpc

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestLineReader(t *testing.T) {
	long := strings.Repeat("x", 100)
	tests := []struct {
		name  string
		input string
		max   int
		want  []string // "ERR" marks ErrLineTooLong
	}{
		{"plain", "a\nbb\n", 10, []string{"a", "bb"}},
		{"no trailing newline", "a\nbb", 10, []string{"a", "bb"}},
		{"exactly max", "abcd\nx\n", 4, []string{"abcd", "x"}},
		{"one over max", "abcde\nx\n", 4, []string{"ERR", "x"}},
		{"long line spanning buffers", long + "\nok\n", 50, []string{"ERR", "ok"}},
		{"long line at eof", long, 50, []string{"ERR"}},
		{"long line within bound spanning buffer", long + "\n", 200, []string{long}},
		{"empty lines", "\n\n", 4, []string{"", ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lr := NewLineReader(strings.NewReader(tt.input), tt.max)
			// A small buffer exercises the gathering path.
			var got []string
			for {
				line, err := lr.ReadLine()
				if errors.Is(err, io.EOF) {
					break
				}
				if errors.Is(err, ErrLineTooLong) {
					got = append(got, "ERR")
					continue
				}
				if err != nil {
					t.Fatalf("ReadLine: %v", err)
				}
				got = append(got, string(line))
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLineReaderSkippedSize(t *testing.T) {
	lr := NewLineReader(strings.NewReader(strings.Repeat("y", 70000)+"\nz\n"), 1000)
	if _, err := lr.ReadLine(); !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("got %v, want ErrLineTooLong", err)
	}
	if lr.Skipped != 70000 {
		t.Errorf("Skipped = %d, want 70000", lr.Skipped)
	}
	line, err := lr.ReadLine()
	if err != nil || string(line) != "z" {
		t.Errorf("next line = %q, %v; want z", line, err)
	}
}
