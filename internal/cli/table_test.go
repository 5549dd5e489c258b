package cli

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

// A table fits $COLUMNS by cutting its free columns, the widest first,
// never below their floor; without a width it keeps whole rows.
func TestTableFitsWidth(t *testing.T) {
	long := strings.TrimSpace(strings.Repeat("description ", 8))
	render := func(columns string) []string {
		t.Setenv("COLUMNS", columns)
		var b bytes.Buffer
		tb := newTable(&b, "ID", "STATE", "REQUESTER", "DESCRIPTION")
		tb.fit("REQUESTER", "DESCRIPTION")
		tb.row("conf-0123456789abcdef", "pending", "agent:uid=1000,pid=4242", long)
		tb.row("conf-1", "approved", "user", "short")
		if err := tb.flush(); err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	}
	full := render("")
	if !strings.Contains(full[1], long) || !strings.Contains(full[1], "agent:uid=1000,pid=4242") {
		t.Fatalf("without a width the rows are cut:\n%s", strings.Join(full, "\n"))
	}
	for _, tc := range []struct {
		columns string
		widest  int    // the longest line, in runes
		want    string // in the first row
	}{
		// The widest free column is cut first, then the two in turn.
		{"80", 80, "agent:uid=1000,pid=42…  description descriptio…"},
		{"60", 59, "agent:uid=1…  description…"}, // a cut ends on a word, not a space
		// Narrower than the ids and the free columns' floors: as narrow
		// as it reads, the ids whole.
		{"20", 21 + 2 + 8 + 2 + 12 + 2 + 12, "conf-0123456789abcdef  pending   agent:uid=1…  description…"},
		{"500", utf8.RuneCountInString(full[1]), long},
		{"junk", utf8.RuneCountInString(full[1]), long},
	} {
		lines := render(tc.columns)
		widest := 0
		for _, l := range lines {
			widest = max(widest, utf8.RuneCountInString(strings.TrimRight(l, " ")))
		}
		if widest != tc.widest {
			t.Errorf("COLUMNS=%s: widest line %d runes, want %d:\n%s", tc.columns, widest, tc.widest, strings.Join(lines, "\n"))
		}
		if !strings.Contains(lines[1], tc.want) || !strings.HasPrefix(lines[1], "conf-0123456789abcdef") {
			t.Errorf("COLUMNS=%s: first row %q lacks %q or its whole id", tc.columns, lines[1], tc.want)
		}
		if !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "DESCRIPTION") {
			t.Errorf("COLUMNS=%s: header %q", tc.columns, lines[0])
		}
	}
}

// A table written to something that is not a terminal, with no $COLUMNS,
// has no width to fit.
func TestTermWidthNotATerminal(t *testing.T) {
	t.Setenv("COLUMNS", "")
	if w := termWidth(&bytes.Buffer{}); w != 0 {
		t.Errorf("termWidth(buffer) = %d, want 0", w)
	}
	t.Setenv("COLUMNS", "132")
	if w := termWidth(&bytes.Buffer{}); w != 132 {
		t.Errorf("termWidth with COLUMNS=132 = %d", w)
	}
}

func TestTruncateStart(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"org.example.mail.send_message", 13, "…send_message"},
		{"a b", 2, "…b"},
	} {
		if got := truncateStart(tc.in, tc.n); got != tc.want {
			t.Errorf("truncateStart(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}
