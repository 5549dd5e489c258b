package core

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

const mailManifest = `{"version":"1.0","capabilities":[
	{"name":"send","tier":1,"trust_level":"confirm","confirmation_type":"send","description":"Send an email","parameters":[{"name":"to","type":"string"}]},
	{"name":"purge","tier":1,"trust_level":"confirm","undo_window_ms":10000,"parameters":[{"name":"folder","type":"string"}]}],"signature":""}`

// mailWorld is a broker with a mail app that records what it runs, an
// agent, a second agent and the user, on a controllable clock.
type mailWorld struct {
	b            *Broker
	clk          *testkit.Clock
	st           *store.Store
	agent, other context.Context
	user         context.Context
	mu           sync.Mutex
	ran          []string // params of every execution the app saw
}

func newMailWorld(t *testing.T, path string) *mailWorld {
	t.Helper()
	w := &mailWorld{clk: testkit.NewClock(time.Unix(1700000000, 0))}
	var err error
	if path == "" {
		w.st, err = store.OpenMemory(context.Background())
	} else {
		w.st, err = store.Open(context.Background(), path)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.st.Close() })
	w.b, err = New(context.Background(), Config{Apps: w.st, Audit: w.st, Journal: w.st, Jobs: w.st, AllowUnsigned: true, RateLimits: &RateLimits{}, LivenessInterval: -1,
		Now: w.clk.Now, AfterFunc: w.clk.AfterFunc, ConfirmationTTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.b.Close)
	app := &recPeer{call: func(ctx context.Context, method string, params any) (json.RawMessage, error) {
		p := params.(*api.InvokeCapabilityParams)
		w.mu.Lock()
		w.ran = append(w.ran, p.CapabilityID+" "+string(p.Params))
		w.mu.Unlock()
		return json.RawMessage(`{"status":"success","data":{"sent":true}}`), nil
	}}
	actx := WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "unix"}, app.endpoint()))
	if _, err := w.b.RegisterCapability(actx, &api.RegisterCapabilityParams{AppID: "org.example.mail", Manifest: json.RawMessage(mailManifest)}); err != nil {
		t.Fatal(err)
	}
	w.agent = WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "unix", UID: 1000, PID: 1}, (&recPeer{}).endpoint()))
	w.other = WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "unix", UID: 1000, PID: 2}, (&recPeer{}).endpoint()))
	w.user = WithSession(context.Background(), w.b.OpenSession(SessionInfo{Role: RoleUser, Transport: "unix", UID: 1000, PID: 3}, (&recPeer{}).endpoint()))
	return w
}

func (w *mailWorld) runs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.ran...)
}

func (w *mailWorld) send(ctx context.Context, to, confirmationID string) (*api.CapabilityResult, error) {
	return w.b.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.send", AppID: "org.example.mail",
		Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"to":"` + to + `"}`), ConfirmationID: confirmationID})
}

// required asserts CONFIRMATION_REQUIRED and returns its confirmation id.
func required(t *testing.T, err error) string {
	t.Helper()
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired {
		t.Fatalf("got %v, want CONFIRMATION_REQUIRED", err)
	}
	id, _ := pe.DataMap()["confirmation_id"].(string)
	if id == "" {
		t.Fatalf("CONFIRMATION_REQUIRED without a confirmation_id: %v", pe.Data)
	}
	return id
}

func TestAgentCannotDecideOrUndo(t *testing.T) {
	w := newMailWorld(t, "")
	_, err := w.send(w.agent, "a@example.com", "")
	id := required(t, err)
	for _, ctx := range []context.Context{w.agent, w.other, context.Background()} {
		if _, err := w.b.ApproveConfirmation(ctx, &api.ConfirmDecisionParams{ConfirmationID: id}); !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("agent approve: got %v, want PERMISSION_DENIED", err)
		}
		if _, err := w.b.DenyConfirmation(ctx, &api.ConfirmDecisionParams{ConfirmationID: id}); !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("agent deny: got %v, want PERMISSION_DENIED", err)
		}
		if _, err := w.b.UndoJob(ctx, &api.JobsUndoParams{JobID: "job-1"}); !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("agent undo: got %v, want PERMISSION_DENIED", err)
		}
		if _, err := w.b.AllowApp(ctx, &api.AppsAllowParams{AppID: "org.example.mail"}); !errors.Is(err, api.ErrPermissionDenied) {
			t.Errorf("agent allow: got %v, want PERMISSION_DENIED", err)
		}
	}
	// Still pending: re-invoking answers the same confirmation, and
	// nothing ran.
	_, err = w.send(w.agent, "a@example.com", id)
	if got := required(t, err); got != id {
		t.Errorf("re-invoke while pending gave %s, want the same %s", got, id)
	}
	if r := w.runs(); len(r) != 0 {
		t.Errorf("the app ran %v without the user's approval", r)
	}
	if n := w.b.PendingConfirmations(); n != 1 {
		t.Errorf("pending = %d, want 1", n)
	}
}

func TestApprovalIsSingleUseAndBound(t *testing.T) {
	w := newMailWorld(t, "")
	_, err := w.send(w.agent, "a@example.com", "")
	id := required(t, err)
	if _, err := w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: id}); err != nil {
		t.Fatal(err)
	}
	if n := w.b.PendingConfirmations(); n != 0 {
		t.Errorf("pending after approval = %d, want 0", n)
	}
	// Another connection presenting the id gets a fresh confirmation.
	_, err = w.send(w.other, "a@example.com", id)
	if got := required(t, err); got == id {
		t.Error("another connection got the approved confirmation")
	}
	// Swapped parameters get a fresh confirmation.
	_, err = w.send(w.agent, "evil@example.com", id)
	if got := required(t, err); got == id {
		t.Error("changed parameters got the approved confirmation")
	}
	// The real thing runs once.
	res, err := w.send(w.agent, "a@example.com", id)
	if err != nil || res.Status != api.StatusSuccess {
		t.Fatalf("approved invocation: %+v, %v", res, err)
	}
	// A replay gets a fresh confirmation, never the action.
	_, err = w.send(w.agent, "a@example.com", id)
	if got := required(t, err); got == id {
		t.Error("replayed approval was accepted")
	}
	if r := w.runs(); len(r) != 1 || r[0] != `org.example.mail.send {"to":"a@example.com"}` {
		t.Errorf("app ran %v, want exactly the approved send", r)
	}
}

func TestDenyAndExpire(t *testing.T) {
	w := newMailWorld(t, "")
	_, err := w.send(w.agent, "a@example.com", "")
	denied := required(t, err)
	if _, err := w.b.DenyConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: denied, Reason: "not now"}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.send(w.agent, "a@example.com", denied); !errors.Is(err, api.ErrConfirmationDenied) {
		t.Errorf("after deny: got %v, want CONFIRMATION_DENIED", err)
	}
	_, err = w.send(w.agent, "b@example.com", "")
	expiring := required(t, err)
	w.clk.Advance(time.Minute)
	if _, err := w.send(w.agent, "b@example.com", expiring); !errors.Is(err, api.ErrConfirmationExpired) {
		t.Errorf("after expiry: got %v, want CONFIRMATION_EXPIRED", err)
	}
	if _, err := w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: expiring}); !errors.Is(err, api.ErrConfirmationExpired) {
		t.Errorf("approving an expired one: got %v, want CONFIRMATION_EXPIRED", err)
	}
	// An approval not used in time expires too.
	_, err = w.send(w.agent, "c@example.com", "")
	late := required(t, err)
	w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: late})
	w.clk.Advance(time.Minute)
	if _, err := w.send(w.agent, "c@example.com", late); !errors.Is(err, api.ErrConfirmationExpired) {
		t.Errorf("stale approval: got %v, want CONFIRMATION_EXPIRED", err)
	}
	if r := w.runs(); len(r) != 0 {
		t.Errorf("app ran %v", r)
	}
	v, _ := w.b.AuditVerify(context.Background())
	tail, _ := w.b.AuditTail(context.Background(), &api.AuditTailParams{Limit: 100})
	states := map[string]int{}
	for _, e := range tail.Entries {
		if e.Kind == "confirmation" {
			states[e.Outcome]++
		}
	}
	if !v.OK || states["pending"] != 3 || states["denied"] != 1 || states["expired"] != 2 || states["approved"] != 1 {
		t.Errorf("audit ok=%v confirmation entries %v, want 3 pending, 1 denied, 1 approved, 2 expired", v.OK, states)
	}
}

func TestWaitForDecision(t *testing.T) {
	w := newMailWorld(t, "")
	_, err := w.send(w.agent, "a@example.com", "")
	id := required(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.send", AppID: "org.example.mail",
			Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"to":"a@example.com"}`), ConfirmationID: id, WaitMS: 30000})
		done <- err
	}()
	waitFor(t, func() bool { return w.b.PendingConfirmations() == 1 })
	if _, err := w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: id}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("waiting invocation: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting invocation did not run after approval")
	}
}

func TestUndoWindow(t *testing.T) {
	w := newMailWorld(t, "")
	purge := func(folder, id string) (*api.CapabilityResult, error) {
		return w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.purge", AppID: "org.example.mail",
			Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"folder":"` + folder + `"}`), ConfirmationID: id})
	}
	deferred := func(folder string) string {
		_, err := purge(folder, "")
		id := required(t, err)
		if _, err := w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: id}); err != nil {
			t.Fatal(err)
		}
		res, err := purge(folder, id)
		if err != nil || res.Status != api.StatusDeferred {
			t.Fatalf("approved purge: %+v, %v; want deferred", res, err)
		}
		var d struct {
			JobID string `json:"job_id"`
		}
		json.Unmarshal(res.Data, &d)
		return d.JobID
	}
	kept := deferred("spam")
	undone := deferred("inbox")
	if r := w.runs(); len(r) != 0 {
		t.Fatalf("ran before the window closed: %v", r)
	}
	if _, err := w.b.UndoJob(w.user, &api.JobsUndoParams{JobID: undone}); err != nil {
		t.Fatal(err)
	}
	w.clk.Advance(10 * time.Second)
	waitFor(t, func() bool { return len(w.runs()) == 1 })
	if r := w.runs(); r[0] != `org.example.mail.purge {"folder":"spam"}` {
		t.Errorf("ran %v, want only the spam purge", r)
	}
	jobs, _ := w.b.Jobs(context.Background(), &api.JobsListParams{})
	states := map[string]string{}
	for _, j := range jobs.Jobs {
		states[j.JobID] = j.State
	}
	if states[kept] != api.JobDone || states[undone] != api.JobUndone {
		t.Errorf("job states %v, want %s done and %s undone", states, kept, undone)
	}
	if _, err := w.b.UndoJob(w.user, &api.JobsUndoParams{JobID: kept}); !errors.Is(err, api.ErrInvalidParams) {
		t.Errorf("undo of a finished job: got %v, want INVALID_PARAMS", err)
	}
}

// A daemon that stops with a job queued neither loses it silently nor
// runs it after the restart: the job is cancelled, audited and listed.
func TestQueuedJobsAreCancelledByARestart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pcp.db")
	w := newMailWorld(t, path)
	_, err := w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.purge", AppID: "org.example.mail",
		Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"folder":"x"}`)})
	id := required(t, err)
	w.b.ApproveConfirmation(w.user, &api.ConfirmDecisionParams{ConfirmationID: id})
	res, err := w.b.InvokeCapability(w.agent, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.purge", AppID: "org.example.mail",
		Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"folder":"x"}`), ConfirmationID: id})
	if err != nil || res.Status != api.StatusDeferred {
		t.Fatalf("%+v, %v", res, err)
	}
	w.b.Close()
	w.st.Close()

	w2 := newMailWorld(t, path)
	w2.clk.Advance(time.Hour)
	jobs, _ := w2.b.Jobs(context.Background(), &api.JobsListParams{})
	if len(jobs.Jobs) != 1 || jobs.Jobs[0].State != api.JobCancelled || jobs.Jobs[0].Reason == "" {
		t.Fatalf("jobs after restart = %+v, want one cancelled with a reason", jobs.Jobs)
	}
	if r := w2.runs(); len(r) != 0 {
		t.Errorf("a job ran after the restart: %v", r)
	}
	tail, _ := w2.b.AuditTail(context.Background(), &api.AuditTailParams{Limit: 20})
	found := false
	for _, e := range tail.Entries {
		found = found || (e.Kind == "job" && e.Outcome == api.JobCancelled)
	}
	if !found {
		t.Error("no audit entry for the cancelled job")
	}
}

// Expired confirmations are forgotten even when nobody lists them.
func TestConfirmationTableStaysBounded(t *testing.T) {
	w := newMailWorld(t, "")
	for i := range 200 {
		_, err := w.send(w.agent, fmt.Sprintf("%d@example.com", i), "")
		required(t, err)
		if i%20 == 19 {
			w.clk.Advance(3 * time.Minute) // past expiry and the grace after it
		}
	}
	w.b.confMu.Lock()
	n := len(w.b.confs)
	w.b.confMu.Unlock()
	if n > 40 {
		t.Errorf("%d confirmations kept for 200 requests, want at most 40", n)
	}
}

// Each TCP session is an agent of its own; the total bound still holds.
func TestConfirmationsBoundedInTotal(t *testing.T) {
	w := newMailWorld(t, "")
	refused := map[string]int{}
	for s := range 6 {
		ctx := WithSession(context.Background(), w.b.OpenSession(SessionInfo{Transport: "tcp", Remote: fmt.Sprintf("127.0.0.1:%d", 5000+s), UID: -1, PID: -1}, (&recPeer{}).endpoint()))
		for i := range 33 {
			_, err := w.send(ctx, fmt.Sprintf("%d-%d@example.com", s, i), "")
			var pe *api.Error
			if errors.As(err, &pe) && pe.Code == api.CodeRateLimited {
				refused[fmt.Sprint(pe.DataMap()["per"])]++
			}
		}
	}
	if n := w.b.PendingConfirmations(); n != maxPendingTotal {
		t.Errorf("%d confirmations pending, want the total bound %d", n, maxPendingTotal)
	}
	if refused["connection"] != 4 || refused["daemon"] != 6*33-maxPendingTotal-4 {
		t.Errorf("refusals by bound: %v", refused)
	}
}

// A confirmation that a request waits on by id outlives the connection
// that asked until the request leaves; then it ends.
func TestConfirmationEndsAfterItsLastWaiter(t *testing.T) {
	w := newMailWorld(t, "")
	sess := w.b.OpenSession(SessionInfo{Transport: "unix", UID: 1000, PID: 7}, (&recPeer{}).endpoint())
	ctx, cancel := context.WithCancel(WithSession(context.Background(), sess))
	_, err := w.send(ctx, "a@example.com", "")
	id := required(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := w.b.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: "org.example.mail.send", AppID: "org.example.mail",
			Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"to":"a@example.com"}`), ConfirmationID: id, WaitMS: 30000})
		done <- err
	}()
	waitFor(t, func() bool {
		w.b.confMu.Lock()
		defer w.b.confMu.Unlock()
		return w.b.confs[id].waiters == 1
	})
	sess.Close()
	if n := w.b.PendingConfirmations(); n != 1 {
		t.Fatalf("%d pending after the close, want 1: a request still waits on it", n)
	}
	cancel()
	if err := <-done; !errors.Is(err, api.ErrConfirmationExpired) {
		t.Errorf("the waiter got %v, want CONFIRMATION_EXPIRED", err)
	}
	if n := w.b.PendingConfirmations(); n != 0 {
		t.Errorf("%d pending after the last waiter left, want 0", n)
	}
	res, _ := w.b.Confirmations(w.user)
	for _, c := range res.Confirmations {
		if c.ConfirmationID == id && (c.State != api.ConfirmExpired || c.Reason != endedReason) {
			t.Errorf("the confirmation is %s (%q), want expired: %s", c.State, c.Reason, endedReason)
		}
	}
}
