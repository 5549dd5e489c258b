package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// table writes aligned columns. Cells are cleaned of control characters:
// app ids, labels and descriptions come from apps and must not be able to
// drive the user's terminal or break the columns.
//
// A table fits the terminal's width (termWidth): when its rows are wider,
// the columns marked free (free text: descriptions, reasons, actors) are
// cut, the widest first, with an ellipsis, but never below minFreeWidth
// runes (or their header's width); the other columns (ids, states, times)
// are never cut. Without a known width the rows are as wide as they need.
type table struct {
	w     io.Writer
	rows  [][]string
	free  map[int]cut
	width int // 0: no limit
	names []string
}

// cut is how a free column is cut: its end, or for ids whose end says
// most (a capability's name after its app id), its start.
type cut int

const (
	cutEnd cut = iota + 1
	cutStart
)

// Table layout: the gap between columns, and the narrowest a free column
// is cut to.
const (
	columnGap    = 2
	minFreeWidth = 12
)

func newTable(w io.Writer, header ...string) *table {
	t := &table{w: w, width: termWidth(w), free: map[int]cut{}, names: header}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

// fit marks the columns, by header name, that may be cut at their end to
// fit the terminal's width.
func (t *table) fit(names ...string) { t.mark(cutEnd, names) }

// fitStart marks the columns that may be cut at their start.
func (t *table) fitStart(names ...string) { t.mark(cutStart, names) }

func (t *table) mark(how cut, names []string) {
	for _, n := range names {
		for i, h := range t.names {
			if h == n {
				t.free[i] = how
			}
		}
	}
}

func (t *table) row(cells ...string) {
	r := make([]string, len(cells))
	for i, c := range cells {
		r[i] = clean(c)
	}
	t.rows = append(t.rows, r)
}

func (t *table) flush() error {
	widths := t.widths()
	tw := tabwriter.NewWriter(t.w, 0, 8, columnGap, ' ', 0)
	for _, r := range t.rows {
		for i, c := range r {
			if i > 0 {
				tw.Write([]byte{'\t'})
			}
			switch t.free[i] {
			case cutEnd:
				c = truncate(c, widths[i])
			case cutStart:
				c = truncateStart(c, widths[i])
			}
			io.WriteString(tw, c)
		}
		tw.Write([]byte{'\n'})
	}
	t.rows = nil
	return tw.Flush()
}

// widths returns each column's width once the free columns are cut to
// fit t.width.
func (t *table) widths() []int {
	var widths, floor []int
	for _, r := range t.rows {
		for i, c := range r {
			if i >= len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], utf8.RuneCountInString(c))
		}
	}
	if t.width <= 0 || len(t.free) == 0 {
		return widths
	}
	total := (len(widths) - 1) * columnGap
	for i, w := range widths {
		total += w
		f := minFreeWidth
		if i < len(t.names) {
			f = max(f, utf8.RuneCountInString(t.names[i]))
		}
		floor = append(floor, f)
	}
	for total > t.width {
		widest := -1
		for i, w := range widths {
			if t.free[i] != 0 && w > floor[i] && (widest < 0 || w > widths[widest]) {
				widest = i
			}
		}
		if widest < 0 {
			break // as narrow as it reads
		}
		widths[widest]--
		total--
	}
	return widths
}

// termWidth is the width tables fit: $COLUMNS when set, else the width of
// the terminal w writes to, else 0 (no limit: a pipe or a file gets whole
// rows).
func termWidth(w io.Writer) int {
	if v := os.Getenv("COLUMNS"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n > 0 {
			return n
		}
	}
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 0
	}
	return int(ws.Col)
}

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
	if n < 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return strings.TrimRight(string(r[:n-1]), " ") + "…"
}

// tierCell shows an app's tier, "-" for none (builtins, revoked apps).
func tierCell(tier int) string {
	if tier == 0 {
		return "-"
	}
	return strconv.Itoa(tier)
}

// truncateStart shortens s to at most n runes from its end, marking the
// cut.
func truncateStart(s string, n int) string {
	if n < 1 || utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return "…" + strings.TrimLeft(string(r[len(r)-n+1:]), " ")
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
