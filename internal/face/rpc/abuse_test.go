package rpc

// Regression tests for the core-level attacks on a running daemon: each
// drives a real broker over a socket pair the way the attack did, scaled
// down to run in seconds.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/golden"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/stored"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// abuseEnv is a broker behind the rpc face, as a golden transcript
// drives it, with its store in reach of the test.
type abuseEnv struct {
	*goldenEnv
	st *store.Store
	b  *core.Broker
	n  int // connections dialled
}

func newAbuseEnv(t *testing.T, st *store.Store, limits core.RateLimits) *abuseEnv {
	t.Helper()
	testkit.CheckGoroutines(t)
	if st == nil {
		var err error
		if st, err = store.OpenMemory(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { st.Close() })
	clk := testkit.NewClock(testkit.GoldenTime)
	b, err := core.New(context.Background(), core.Config{
		Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), AllowUnsigned: true, SessionID: "session-1",
		RateLimits: &limits, LivenessInterval: -1, Now: clk.Now, AfterFunc: clk.AfterFunc, NewID: testkit.SeqIDs(),
	})
	if err != nil {
		t.Fatal(err)
	}
	g := &goldenEnv{clk: clk, srv: NewServer(b, Options{Token: "test-token"})}
	g.conns = golden.NewLines(t, g.serve)
	t.Cleanup(func() {
		b.Close()
		g.conns.CloseAll()
	})
	return &abuseEnv{goldenEnv: g, st: st, b: b}
}

// dial opens a connection on the agent socket (as uid 1000) or, with
// user, on the control socket.
func (e *abuseEnv) dial(user bool) *goldenConn {
	e.n++
	name := fmt.Sprintf("agent%d", e.n)
	if user {
		name = "user" + name
	}
	return &goldenConn{e.conns.Conn(name)}
}

// goldenConn is one connection of a golden environment, driven by hand.
type goldenConn struct{ *golden.LineConn }

func (c *goldenConn) send(t *testing.T, line string) {
	t.Helper()
	if err := c.Send(line); err != nil {
		t.Fatalf("send: %v", err)
	}
}

func (c *goldenConn) recv() (string, error) { return c.Recv() }

// call sends one request and decodes its answer's result or error.
func (c *goldenConn) call(t *testing.T, id int, method string, params any) (json.RawMessage, *api.Error) {
	t.Helper()
	p := []byte("{}")
	if params != nil {
		p, _ = json.Marshal(params)
	}
	c.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":%s}`, id, method, p))
	line, err := c.recv()
	if err != nil {
		t.Fatalf("%s: reading the answer: %v", method, err)
	}
	return decodeAnswer(t, line)
}

func decodeAnswer(t *testing.T, line string) (json.RawMessage, *api.Error) {
	t.Helper()
	var m struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int             `json:"code"`
			Message string          `json:"message"`
			Data    json.RawMessage `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatalf("answer %q: %v", line, err)
	}
	if m.Error == nil {
		return m.Result, nil
	}
	e := &api.Error{Code: api.Code(m.Error.Code), Message: m.Error.Message}
	var data map[string]any
	json.Unmarshal(m.Error.Data, &data)
	e.Data = data
	return nil, e
}

// flood sends n requests made by line on c, pipelined, and reads the n
// answers as they come.
func flood(t *testing.T, c *goldenConn, n int, line func(i int) string) []string {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		var b strings.Builder
		for i := range n {
			b.WriteString(line(i) + "\n")
		}
		c.SetWriteDeadline(time.Now().Add(20 * time.Second))
		_, err := c.Write([]byte(b.String()))
		errc <- err
	}()
	out := make([]string, 0, n)
	for range n {
		l, err := c.recv()
		if err != nil {
			t.Fatalf("answer %d of %d: %v", len(out)+1, n, err)
		}
		out = append(out, l)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return out
}

// refusalsAudited counts the audit entries of kind and the refusals they
// stand for (each entry is one, plus its suppressed_since_last_entry).
func refusalsAudited(t *testing.T, st *store.Store, kind string) (entries, refusals int) {
	t.Helper()
	es, err := st.AuditTail(context.Background(), 100000)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Kind != kind || e.Outcome == "success" {
			continue
		}
		entries++
		var d struct {
			Suppressed int `json:"suppressed_since_last_entry"`
		}
		json.Unmarshal(e.Detail, &d)
		refusals += 1 + d.Suppressed
	}
	return entries, refusals
}

// An invocation of an unknown app and an invalid registration used to
// return before the rate limiter and were audited one row each: one
// connection wrote 189,000 rows in 10 s. Now the connection's limit
// comes first and refusals are audited in aggregate, and the count of
// the last second is written when the broker closes.
func TestRefusalFloodIsAuditedInAggregate(t *testing.T) {
	e := newAbuseEnv(t, nil, core.RateLimits{PerConnection: 50, PerConnectionBurst: 50})
	const invokes, registers = 2000, 500
	agent := e.dial(false)
	got := flood(t, agent, invokes, func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"invoke.capability","params":{"capability_id":"org.example.nobody%d.x","app_id":"org.example.nobody%d","source":"SystemIntelligence"}}`, i, i, i)
	})
	limited := 0
	for _, l := range got {
		if _, err := decodeAnswer(t, l); err == nil {
			t.Fatalf("an unknown app was invoked: %s", l)
		} else if err.Code == api.CodeRateLimited {
			limited++
		}
	}
	if limited != invokes-50 {
		t.Errorf("%d of %d invocations were rate limited, want %d: the limit must come before the lookup", limited, invokes, invokes-50)
	}
	app := e.dial(false)
	flood(t, app, registers, func(i int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"register.capability","params":{"app_id":"org.example.bad","manifest":{"version":"1.0","capabilities":[{"name":"x","tier":9}]}}}`, i)
	})

	// The clock stands still: everything happened in one second.
	for _, k := range []struct {
		kind string
		n    int
	}{{"invoke", invokes}, {"register", registers}} {
		entries, refusals := refusalsAudited(t, e.st, k.kind)
		if entries > 2 {
			t.Errorf("%d refused %s calls wrote %d audit entries, want at most 2 (one per error code and second)", k.n, k.kind, entries)
		}
		if refusals >= k.n {
			t.Errorf("%s: %d refusals already accounted for before Close; the test needs some pending", k.kind, refusals)
		}
	}
	e.b.Close()
	for _, k := range []struct {
		kind string
		n    int
	}{{"invoke", invokes}, {"register", registers}} {
		entries, refusals := refusalsAudited(t, e.st, k.kind)
		if refusals != k.n {
			t.Errorf("after Close the %s entries account for %d refusals, want %d", k.kind, refusals, k.n)
		}
		if entries > 4 {
			t.Errorf("after Close: %d %s entries, want at most 4", entries, k.kind)
		}
	}
	if res, err := e.st.VerifyAudit(context.Background()); err != nil || !res.OK {
		t.Errorf("audit chain after the flood: %+v, %v", res, err)
	}
}

// A refusal in a later second is written, and carries the count of
// those suppressed before it.
func TestRefusalCountLandsInTheNextSecond(t *testing.T) {
	e := newAbuseEnv(t, nil, core.RateLimits{})
	agent := e.dial(false)
	for i := range 5 {
		if _, err := agent.call(t, i, api.MethodInvokeCapability, map[string]any{"capability_id": "org.example.x.y", "app_id": "org.example.x", "source": "SystemIntelligence"}); err == nil || err.Code != api.CodeAppNotFound {
			t.Fatalf("invocation %d: %v, want APP_NOT_FOUND", i, err)
		}
	}
	e.clk.Advance(time.Second)
	agent.call(t, 9, api.MethodInvokeCapability, map[string]any{"capability_id": "org.example.x.y", "app_id": "org.example.x", "source": "SystemIntelligence"})
	es, _ := e.st.AuditTail(context.Background(), 10)
	if len(es) != 2 {
		t.Fatalf("%d entries, want 2: %+v", len(es), es)
	}
	if d := string(es[1].Detail); !strings.Contains(d, `"suppressed_since_last_entry":4`) {
		t.Errorf("the second entry's detail is %s, want suppressed_since_last_entry 4", d)
	}
}

// A batch of audit.verify on one line cost a whole walk each (1,024 of
// them, 19.6 s of CPU). Now an agent's verify checks what was appended
// since the last walk, and concurrent callers share one: the batch costs
// about one walk.
func TestAuditVerifyBatchCostsAboutOneWalk(t *testing.T) {
	e := newAbuseEnv(t, nil, core.RateLimits{})
	ctx := context.Background()
	for i := range 20000 {
		if _, err := e.st.AppendAudit(ctx, audit.Record{Kind: "test", Outcome: "success", Detail: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
	user := e.dial(true)
	start := time.Now()
	raw, aerr := user.call(t, 1, api.MethodAuditVerify, nil)
	one := time.Since(start)
	if aerr != nil || !strings.Contains(string(raw), `"ok":true,"entries":20000`) {
		t.Fatalf("the user's audit.verify: %s %v", raw, aerr)
	}

	const batch = 256
	var b strings.Builder
	b.WriteString("[")
	for i := range batch {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"audit.verify"}`, i)
	}
	b.WriteString("]")
	agent := e.dial(false)
	start = time.Now()
	agent.send(t, b.String())
	line, err := agent.recv()
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var answers []struct {
		Result api.AuditVerifyResult `json:"result"`
	}
	if err := json.Unmarshal([]byte(line), &answers); err != nil || len(answers) != batch {
		t.Fatalf("batch answer: %d answers, %v", len(answers), err)
	}
	for _, a := range answers {
		if !a.Result.OK || a.Result.Entries != 20000 {
			t.Fatalf("a batched verify answered %+v, want ok with 20000 entries", a.Result)
		}
	}
	// A whole walk each would take batch times one walk.
	if took > 20*one+time.Second {
		t.Errorf("a batch of %d verifies took %v; one whole walk takes %v", batch, took, one)
	}
}

// Two daemons on one state dir: the first one's appends failed (UNIQUE
// seq) yet its actions ran. Now the first failed append stops every
// later action, and health reports why.
func TestActionsStopWhenTheAuditLogFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := store.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	e := newAbuseEnv(t, st, core.RateLimits{})
	app := e.dial(false)
	if _, err := app.call(t, 1, api.MethodRegisterCapability, map[string]any{"app_id": "org.example.notes",
		"manifest": json.RawMessage(`{"version":"1.0","capabilities":[{"name":"create","tier":1,"trust_level":"auto"}],"signature":""}`)}); err != nil {
		t.Fatal(err)
	}
	// Another process writes to the log behind the daemon's back.
	seg, err := os.OpenFile(filepath.Join(store.AuditDir(path), "00000000000000000000.log"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := seg.Write([]byte("not a record")); err != nil {
		t.Fatal(err)
	}
	seg.Close()

	agent := e.dial(false)
	invoked := make(chan struct{}, 10)
	go func() {
		// The app answers each invocation it gets.
		for {
			line, err := app.recv()
			if err != nil {
				return
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			json.Unmarshal([]byte(line), &m)
			invoked <- struct{}{}
			app.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":{"status":"success"}}`, m.ID))
		}
	}()
	invoke := map[string]any{"capability_id": "org.example.notes.create", "app_id": "org.example.notes", "source": "SystemIntelligence"}
	// The first action passed the gate before its entry failed (the
	// residual case docs/security.md states); it is answered as failed.
	if _, err := agent.call(t, 1, api.MethodInvokeCapability, invoke); err == nil || err.Code != api.CodeInternalError {
		t.Fatalf("first invocation after the failure: %v, want INTERNAL_ERROR", err)
	}
	<-invoked
	for i := 2; i < 5; i++ {
		_, err := agent.call(t, i, api.MethodInvokeCapability, invoke)
		if err == nil || err.Code != api.CodeInternalError || err.DataMap()["audit"] != "unavailable" {
			t.Fatalf("invocation %d: %v, want INTERNAL_ERROR with data.audit unavailable", i, err)
		}
	}
	if _, err := agent.call(t, 9, api.MethodRegisterCapability, map[string]any{"app_id": "org.example.other",
		"manifest": json.RawMessage(`{"version":"1.0","capabilities":[{"name":"x","tier":1,"trust_level":"auto"}],"signature":""}`)}); err == nil || err.DataMap()["audit"] != "unavailable" {
		t.Errorf("registration with the audit log down: %v, want refused", err)
	}
	select {
	case <-invoked:
		t.Fatal("the app was invoked after the audit log failed")
	default:
	}
	raw, _ := agent.call(t, 10, api.MethodHealthCheck, nil)
	var h api.HealthResult
	json.Unmarshal(raw, &h)
	if h.Status != api.HealthDegraded || !strings.Contains(h.AuditError, "audit log unavailable") {
		t.Errorf("health: status %q, audit_error %q; want degraded with the reason", h.Status, h.AuditError)
	}
}

// 40 connections × 33 requests left 1,280 prompts pending, and closed
// connections' prompts stayed listed. Now prompts are bounded per agent
// and in total, and end with the connection that asked.
func TestConfirmationFloodIsBounded(t *testing.T) {
	e := newAbuseEnv(t, nil, core.RateLimits{})
	mail := e.dial(false)
	if _, err := mail.call(t, 1, api.MethodRegisterCapability, map[string]any{"app_id": "org.example.mail",
		"manifest": json.RawMessage(`{"version":"1.0","capabilities":[{"name":"send","tier":1,"trust_level":"confirm","parameters":[{"name":"n","type":"number"}]}],"signature":""}`)}); err != nil {
		t.Fatal(err)
	}
	var conns []*goldenConn
	perAgent := 0
	for c := range 40 {
		agent := e.dial(false)
		conns = append(conns, agent)
		got := flood(t, agent, 33, func(i int) string {
			return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"invoke.capability","params":{"capability_id":"org.example.mail.send","app_id":"org.example.mail","source":"SystemIntelligence","params":{"n":%d}}}`, i, c*100+i)
		})
		for _, l := range got {
			_, err := decodeAnswer(t, l)
			if err != nil && err.Code == api.CodeRateLimited && err.DataMap()["per"] == "agent" {
				perAgent++
			}
		}
	}
	user := e.dial(true)
	pending := func() int {
		raw, err := user.call(t, 1, api.MethodConfirmList, nil)
		if err != nil {
			t.Fatal(err)
		}
		var l api.ConfirmListResult
		json.Unmarshal(raw, &l)
		n := 0
		for _, c := range l.Confirmations {
			if c.State == api.ConfirmPending {
				n++
			}
		}
		return n
	}
	// Every connection here is uid 1000: one agent.
	if n := pending(); n != 64 {
		t.Errorf("%d confirmations pending, want the per-agent bound 64", n)
	}
	if perAgent == 0 {
		t.Error("no request was refused with per=agent")
	}
	for _, c := range conns {
		c.Close()
		<-c.Served()
	}
	if n := pending(); n != 0 {
		t.Errorf("%d confirmations still pending after their connections closed, want 0", n)
	}
}

// events.history with limit 10⁸ produced a 2.3 MB frame, above the
// 1 MiB limit a client may enforce. Now the limit is clamped and pages
// are cut to fit, with a cursor to the next; audit.tail and jobs.list
// likewise.
func TestHistoryPagesFitAFrame(t *testing.T) {
	e := newAbuseEnv(t, nil, core.RateLimits{})
	big := strings.Repeat("x", 8<<10)
	const events = 300
	for i := range events {
		e.b.Publish("test.event", "", "", map[string]any{"i": i, "pad": big})
	}
	ctx := context.Background()
	for i := range events {
		if _, err := e.st.AppendAudit(ctx, audit.Record{Kind: "test", Outcome: "success", Detail: json.RawMessage(fmt.Sprintf(`{"i":%d,"pad":%q}`, i, big))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range events {
		if err := e.st.SaveJob(ctx, stored.Job{ID: fmt.Sprintf("job-%03d", i), CapabilityID: "org.example.mail.send", AppID: "org.example.mail",
			Result: json.RawMessage(fmt.Sprintf(`{"status":"success","data":{"pad":%q}}`, big)), State: api.JobDone, RunAt: testkit.GoldenTime,
			CreatedAt: testkit.GoldenTime.Add(time.Duration(i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	agent := e.dial(false)
	for _, m := range []struct {
		method, items, cursor string
	}{{api.MethodEventsHistory, "events", "sequence"}, {api.MethodAuditTail, "entries", "seq"}, {api.MethodJobsList, "jobs", "job_id"}} {
		seen := map[string]bool{}
		var before json.RawMessage
		pages := 0
		for {
			params := map[string]any{"limit": 100000000}
			if before != nil {
				params["before"] = before
			}
			p, _ := json.Marshal(params)
			agent.send(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":%q,"params":%s}`, m.method, p))
			line, err := agent.recv()
			if err != nil {
				t.Fatal(err)
			}
			if len(line) >= 1<<20 {
				t.Fatalf("%s: a %d-byte answer, above the 1 MiB frame limit", m.method, len(line))
			}
			raw, aerr := decodeAnswer(t, line)
			if aerr != nil {
				t.Fatal(aerr)
			}
			var page map[string]json.RawMessage
			json.Unmarshal(raw, &page)
			var items []map[string]json.RawMessage
			json.Unmarshal(page[m.items], &items)
			for _, it := range items {
				id := string(it[m.cursor])
				if seen[id] {
					t.Fatalf("%s: %s listed twice", m.method, id)
				}
				seen[id] = true
			}
			pages++
			if before = page["next"]; before == nil {
				break
			}
		}
		if len(seen) < events || pages < 2 {
			t.Errorf("%s: %d items in %d pages, want at least %d in several", m.method, len(seen), pages, events)
		}
	}
}
