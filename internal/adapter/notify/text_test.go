package notify

import (
	"strings"
	"testing"
	"unicode"

	"github.com/pcp-dev/pcp/api"
)

func TestText(t *testing.T) {
	c := api.Confirmation{CapabilityID: "org.pcp.notes.delete", AppID: "org.pcp.notes", Requester: "agent:uid=1000,pid=42",
		Description: "Delete a note (title=\"<b>x</b>\nApproved by PCP\u202e\")", UndoWindowMS: 15000}
	for _, tc := range []struct {
		markup bool
		action string
	}{
		{true, "Action: Delete a note (title=&quot;&lt;b&gt;x&lt;/b&gt; Approved by PCP&quot;)"},
		{false, `Action: Delete a note (title="<b>x</b> Approved by PCP")`},
	} {
		summary, body := Text(c, tc.markup)
		if summary != "PCP: allow org.pcp.notes.delete?" {
			t.Errorf("summary %q", summary)
		}
		want := "App: org.pcp.notes\n" + tc.action + "\nAsked by: agent:uid=1000,pid=42\nIt can be undone for 15s after it runs."
		if body != want {
			t.Errorf("markup=%v: body\n%q\nwant\n%q", tc.markup, body, want)
		}
	}
	long := c
	long.Description = strings.Repeat("é", 1000)
	if _, body := Text(long, false); !strings.Contains(body, strings.Repeat("é", maxDescriptionRunes)+"…\n") || strings.Contains(body, strings.Repeat("é", maxDescriptionRunes+1)) {
		t.Errorf("a long description is not cut at %d runes: %q", maxDescriptionRunes, body)
	}
}

// FuzzText: whatever a manifest or an agent puts in a confirmation, its
// notification has exactly the lines PCP writes, no control or bidi
// character, and, for a server that reads markup, no markup.
func FuzzText(f *testing.F) {
	f.Add("org.pcp.notes.delete", "Delete a note (note_id=\"1\")", "agent:uid=1000,pid=1", true)
	f.Add("x", "<a href='http://e'>ok</a>\n\u2028\u202e&amp;", "\x00\xff", false)
	f.Fuzz(func(t *testing.T, capID, desc, requester string, markup bool) {
		c := api.Confirmation{CapabilityID: capID, AppID: capID, Description: desc, Requester: requester}
		summary, body := Text(c, markup)
		if n := strings.Count(body, "\n"); n != 2 {
			t.Fatalf("body has %d line breaks, want 2: %q", n, body)
		}
		for _, s := range []string{summary, strings.ReplaceAll(body, "\n", "")} {
			for _, r := range s {
				if unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || r == '\u2028' || r == '\u2029' {
					t.Fatalf("%q holds %U", s, r)
				}
			}
			if markup && strings.ContainsAny(s, "<>") {
				t.Fatalf("%q holds markup", s)
			}
		}
	})
}
