package core

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pcp-dev/pcp/api"
)

// recPrompter records the prompter calls, as "prompt <id> <description>"
// and "withdraw <id>".
type recPrompter struct {
	mu    sync.Mutex
	calls []string
}

func (p *recPrompter) Prompt(ctx context.Context, c api.Confirmation) {
	p.mu.Lock()
	p.calls = append(p.calls, "prompt "+c.ConfirmationID+" "+c.Description)
	p.mu.Unlock()
}

func (p *recPrompter) Withdraw(id string) {
	p.mu.Lock()
	p.calls = append(p.calls, "withdraw "+id)
	p.mu.Unlock()
}

func (p *recPrompter) got() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

// TestPrompter: every confirmation is prompted when requested and
// withdrawn once decided, expired or ended, whoever decided it.
func TestPrompter(t *testing.T) {
	w := newMailWorld(t, "")
	p := &recPrompter{}
	w.b.SetConfirmationPrompter(p)

	_, err := w.send(w.agent, "a@example.com", "")
	approved := required(t, err)
	if _, err := w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: approved}); err != nil {
		t.Fatal(err)
	}
	_, err = w.send(w.agent, "b@example.com", "")
	denied := required(t, err)
	if _, err := w.b.DenyConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: denied}); err != nil {
		t.Fatal(err)
	}
	_, err = w.send(w.agent, "c@example.com", "")
	expired := required(t, err)
	w.clk.Advance(2 * time.Minute)
	_, err = w.send(w.other, "d@example.com", "")
	ended := required(t, err)
	SessionFrom(w.other).Close()

	want := []string{
		"prompt " + approved + ` Send an email (to="a@example.com")`, "withdraw " + approved,
		"prompt " + denied + ` Send an email (to="b@example.com")`, "withdraw " + denied,
		"prompt " + expired + ` Send an email (to="c@example.com")`, "withdraw " + expired,
		"prompt " + ended + ` Send an email (to="d@example.com")`, "withdraw " + ended,
	}
	// An approval left unused expires too: Withdraw may come again.
	if diff := cmp.Diff(want, firstOfEach(p.got())); diff != "" {
		t.Errorf("prompter calls (-want +got):\n%s", diff)
	}
	n := len(p.got())

	// Once removed, nothing more is shown.
	w.b.SetConfirmationPrompter(nil)
	_, err = w.send(w.agent, "e@example.com", "")
	required(t, err)
	if got := len(p.got()); got != n {
		t.Errorf("got %d calls after the prompter was removed, want %d", got, n)
	}
}

// firstOfEach drops the calls seen before.
func firstOfEach(calls []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, c := range calls {
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// TestPromptChangedSkipsDecided: a confirmation decided before its
// prompt went out is not shown.
func TestPromptChangedSkipsDecided(t *testing.T) {
	w := newMailWorld(t, "")
	_, err := w.send(w.agent, "a@example.com", "")
	id := required(t, err)
	list, _ := w.b.Confirmations(w.user)
	info := list.Confirmations[0]
	if _, err := w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: id}); err != nil {
		t.Fatal(err)
	}
	p := &recPrompter{}
	w.b.SetConfirmationPrompter(p)
	w.b.promptChanged(context.Background(), info) // the late pending change
	if got := p.got(); len(got) != 0 {
		t.Errorf("a decided confirmation was prompted: %v", got)
	}
}

// TestDescribeDetected: a detected (Tier 2) capability declares no
// parameters, so its description lists what the caller sent: which
// element, which value.
func TestDescribeDetected(t *testing.T) {
	c := detected("atspi.notes.set_value", "atspi.notes")
	for _, tc := range []struct{ params, want string }{
		{`{}`, "atspi.notes.set_value"},
		{`{"target":{"role":"text","name":"Title"},"value":"rm -rf"}`, `atspi.notes.set_value (target={"name":"Title","role":"text"}, value="rm -rf")`},
		{`{"element_id":":1.3|/org/a11y/atspi/accessible/7","action":"activate"}`, `atspi.notes.set_value (action="activate", element_id=":1.3|/org/a11y/atspi/accessible/7")`},
	} {
		if got := describe(&c, json.RawMessage(tc.params)); got != tc.want {
			t.Errorf("describe(%s) = %q, want %q", tc.params, got, tc.want)
		}
	}
	var many strings.Builder
	many.WriteString("{")
	for i := range 20 {
		if i > 0 {
			many.WriteString(",")
		}
		many.WriteString(`"p` + string(rune('a'+i)) + `":1`)
	}
	many.WriteString("}")
	if got := describe(&c, json.RawMessage(many.String())); !strings.HasSuffix(got, "pp=1, and 4 more)") {
		t.Errorf("describe of 20 params = %q, want 16 listed and 4 more", got)
	}
}
