package notify

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/pcp-dev/pcp/api"
)

// Bounds on what a notification shows of a confirmation, in runes.
const (
	maxIDRunes          = 128
	maxDescriptionRunes = 600
	maxRequesterRunes   = 128
)

// Text is a confirmation's notification: the summary and the body, one
// fact a line. Everything in it came from an app's manifest or an agent's
// parameters, so each value is made one line of printable text, bounded,
// and escaped when the server reads markup: no value can add a line, a
// link or a style that looks like PCP's own.
func Text(c api.Confirmation, markup bool) (summary, body string) {
	esc := func(s string, max int) string {
		s = oneLine(s, max)
		if markup {
			s = escapeMarkup(s)
		}
		return s
	}
	summary = "PCP: allow " + esc(c.CapabilityID, maxIDRunes) + "?"
	lines := []string{
		"App: " + esc(c.AppID, maxIDRunes),
		"Action: " + esc(c.Description, maxDescriptionRunes),
		"Asked by: " + esc(c.Requester, maxRequesterRunes),
	}
	if c.UndoWindowMS > 0 {
		lines = append(lines, fmt.Sprintf("It can be undone for %s after it runs.", time.Duration(c.UndoWindowMS)*time.Millisecond))
	}
	if t, err := time.Parse(time.RFC3339Nano, c.ExpiresAt); err == nil {
		lines = append(lines, "Expires at "+t.Local().Format("15:04:05")+"; until then pcpctl confirm also answers it.")
	}
	return summary, strings.Join(lines, "\n")
}

// oneLine makes s one line of at most max runes: invalid UTF-8, control
// characters and line or paragraph separators become spaces, bidi
// controls are dropped (they could reorder the line), and a longer value
// ends in "…".
func oneLine(s string, max int) string {
	var b strings.Builder
	n := 0
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validAt(s, i), unicode.IsControl(r), r == '\u2028', r == '\u2029':
			r = ' '
		case unicode.Is(unicode.Bidi_Control, r):
			continue
		}
		if n == max {
			b.WriteString("…")
			break
		}
		b.WriteRune(r)
		n++
	}
	return b.String()
}

// validAt reports whether the U+FFFD at s[i] was in s, not a decoding
// error.
func validAt(s string, i int) bool { return strings.HasPrefix(s[i:], "\uFFFD") }

var markupEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;")

func escapeMarkup(s string) string { return markupEscaper.Replace(s) }
