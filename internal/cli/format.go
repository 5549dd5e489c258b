package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// table writes aligned columns. Cells are cleaned of control characters:
// app ids, labels and descriptions come from apps and must not be able to
// drive the user's terminal or break the columns.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if i > 0 {
			t.tw.Write([]byte{'\t'})
		}
		io.WriteString(t.tw, clean(c))
	}
	t.tw.Write([]byte{'\n'})
}

func (t *table) flush() error { return t.tw.Flush() }

// clean makes s safe to print on a terminal: control characters, bidi
// overrides and invalid UTF-8 are shown as Go escapes.
func clean(s string) string {
	ok := true
	for _, r := range s {
		if unsafeRune(r) {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && validAt(s, i):
			b.WriteRune(r)
		case r == utf8.RuneError:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r):
			q := strconv.QuoteRuneToASCII(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func unsafeRune(r rune) bool {
	return r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) ||
		r == '\u2028' || r == '\u2029'
}

// validAt reports whether the RuneError at s[i] is a real U+FFFD.
func validAt(s string, i int) bool {
	r, n := utf8.DecodeRuneInString(s[i:])
	return r == utf8.RuneError && n == 3
}

// truncate shortens s to at most n runes, marking the cut.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// orDash shows an empty cell as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// unixTime renders a journal timestamp (Unix seconds) in local time.
func unixTime(sec int64) string {
	if sec == 0 {
		return "-"
	}
	return time.Unix(sec, 0).Format(time.RFC3339)
}

// indentJSON pretty-prints raw JSON; raw that does not parse is returned
// as it is.
func indentJSON(raw []byte) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

// kvPairs renders the members of a JSON object as key=value pairs sorted
// by key. Simple strings are bare, other strings quoted, anything else
// compact JSON.
func kvPairs(members map[string]json.RawMessage) string {
	keys := make([]string, 0, len(members))
	for k := range members {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(kvValue(k))
		b.WriteByte('=')
		b.WriteString(jsonValue(members[k]))
	}
	return b.String()
}

// jsonValue renders one JSON value for a key=value pair.
func jsonValue(raw json.RawMessage) string {
	var s string
	if len(raw) > 0 && raw[0] == '"' && json.Unmarshal(raw, &s) == nil {
		return kvValue(s)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return strconv.Quote(string(raw))
	}
	return clean(buf.String())
}

// kvValue leaves s bare when that cannot be misread, and quotes it
// otherwise.
func kvValue(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._:/@+-,*", r)) {
			return strconv.Quote(s)
		}
	}
	return s
}
