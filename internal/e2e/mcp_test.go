package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/adapter/notify"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// nodeDir holds the TypeScript SDK client (interop.mjs) and its
// package-lock.json; scripts/test runs npm ci there.
var nodeDir = filepath.Join("..", "face", "mcp", "testdata", "node")

// TestMCPClients runs one agent's session through each real MCP client
// on one headless desktop (gtk3-widget-factory, gnome-calculator, dunst
// serving org.freedesktop.Notifications), with pcpd showing
// confirmations as notifications and serving MCP on mcp.sock and over
// streamable HTTP, and the real notes app: the Go SDK's client on
// mcp.sock, and the TypeScript SDK's over stdio (a real pcpctl mcp) and
// over HTTP. Each initializes, lists the tools, finds the notes
// capabilities and the GTK apps' windows with pcp_search, creates two
// notes, deletes one after the user approves on the notification and is
// refused the other after the user denies there, then finds the
// calculator's keys with pcp_elements, presses 2 + 3 = with pcp_act and
// reads 5 back. The user's answers are picks in dunst's menu, as a click
// is, and the audit log names the notification as the decider.
func TestMCPClients(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node not found: install Debian's nodejs (scripts/test does)")
	}
	if _, err := os.Stat(filepath.Join(nodeDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed: run npm ci in %s (scripts/test does): %v", nodeDir, err)
	}
	d, err := testkit.StartDesktop(true)
	if err != nil {
		t.Fatalf("the headless desktop did not start: %v", err)
	}
	t.Cleanup(d.Stop)
	dunst, err := d.StartDunst()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(dunst.Stop)
	bus := d.Vars["DBUS_SESSION_BUS_ADDRESS"]
	watch, err := testkit.WatchNotifications(bus)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(watch.Close)
	testkit.CheckGoroutines(t)
	if err := d.WaitApps(60*time.Second, "gtk3-widget-factory", "gnome-calculator"); err != nil {
		t.Fatal(err)
	}

	w := newWorld(t)
	w.env = append(w.env, "DISPLAY="+d.Vars["DISPLAY"], "DBUS_SESSION_BUS_ADDRESS="+bus)
	// Pressing the calculator's keys needs no confirmation; the notes
	// app's delete does (its manifest says confirm).
	policy := "[apps.\"atspi.gnome-calculator\"]\ntrust_level = \"auto\"\n"
	if err := os.WriteFile(filepath.Join(w.config, "pcp", "policy.toml"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	httpAddr := freeLoopbackAddr(t)
	w.pcpdArgs = []string{"--atspi-bus", d.Vars["AT_SPI_BUS_ADDRESS"], "--notify", "--mcp-http", httpAddr}
	w.startPCPD()
	w.startNotes()
	mcpSock := filepath.Join(filepath.Dir(w.socket), "mcp.sock")
	tok, err := os.ReadFile(filepath.Join(filepath.Dir(w.socket), "mcp.token"))
	if err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	agent, err := client.Dial(ctx, w.socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	// The approved deletes run after their undo window, as jobs: the
	// user's connection hears when they are done.
	user, err := client.Dial(ctx, w.control, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer user.Close()
	if _, err := user.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventJobDone, api.EventJobFailed}}); err != nil {
		t.Fatal(err)
	}
	const calc = "atspi.gnome-calculator"
	w.poll("the calculator's window", 15*time.Second, func() (bool, string) {
		sc, err := agent.SessionContext(ctx)
		if err != nil {
			return false, err.Error()
		}
		return slices.Contains(sc.ActiveSurfaces, calc+"/1"), strings.Join(sc.ActiveSurfaces, " ")
	})
	// resetCalculator makes the display read 0 (0 =, over JSON-RPC), so
	// that the 5 a client reads back is its own.
	resetCalculator := func(t *testing.T) {
		t.Helper()
		// Subscribed before the presses, so the display's change cannot
		// come and go unseen between a read and the wait.
		sub, err := agent.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: elementEvents, SurfaceID: calc + "/1"})
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Unsubscribe(ctx, sub.SubscriptionID)
		for _, key := range []string{"0", "="} {
			p, _ := json.Marshal(map[string]any{"role": "push button", "name": key})
			if _, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: calc + ".activate", AppID: calc,
				Source: api.SourceSystemIntelligence, Params: p}); err != nil {
				t.Fatalf("pressing %s: %v", key, err)
			}
		}
		deadline := time.After(10 * time.Second)
		for {
			tree, err := agent.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: calc + "/1"})
			if err != nil {
				t.Fatal(err)
			}
			texts := displayTexts(&tree.Root)
			if slices.Contains(texts, "0") && !slices.Contains(texts, "5") {
				return
			}
			select {
			case <-agent.Notifications(): // the calculator changed: read again
			case <-deadline:
				t.Fatalf("the calculator's display reads %q, not 0, after 0 =", texts)
			}
		}
	}
	// notes lists the notes' titles.
	notes := func(t *testing.T) []string {
		t.Helper()
		res, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: notesApp + ".list", AppID: notesApp,
			Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		var list notesList
		if err := json.Unmarshal(res.Data, &list); err != nil {
			t.Fatal(err)
		}
		return titles(list)
	}

	node := func(args ...string) func(context.Context) (io.ReadCloser, func() error, error) {
		return func(ctx context.Context) (io.ReadCloser, func() error, error) {
			cmd := exec.CommandContext(ctx, "node", append([]string{"interop.mjs", "--desktop"}, args...)...)
			cmd.Dir = nodeDir
			cmd.Stderr = os.Stderr
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				return nil, nil, err
			}
			return stdout, cmd.Wait, cmd.Start()
		}
	}
	clients := []struct {
		name string
		run  func(context.Context) (io.ReadCloser, func() error, error)
	}{
		{"go-sdk", func(ctx context.Context) (io.ReadCloser, func() error, error) {
			r, wr := io.Pipe()
			done := make(chan error, 1)
			go func() {
				err := goSDKScenario(ctx, mcpSock, wr)
				wr.CloseWithError(err)
				done <- err
			}()
			return r, func() error { return <-done }, nil
		}},
		{"stdio", node("stdio", bin(t, "pcpctl"), mcpSock)},
		{"http", node("http", "http://"+httpAddr+"/", strings.TrimSpace(string(tok)))},
	}
	for _, c := range clients {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			resetCalculator(t)
			cctx, ccancel := context.WithTimeout(ctx, 90*time.Second)
			defer ccancel()
			steps := runClient(cctx, t, watch, dunst, c.run)
			t.Logf("%s: the scenario took %v", c.name, time.Since(start).Round(time.Millisecond))
			for step, want := range map[string][]string{
				"initialize":  {`"name":"pcp"`},
				"tools":       {`"pcp_act","pcp_context","pcp_describe","pcp_elements","pcp_events","pcp_invoke","pcp_search"`},
				"search":      {`"id":"org.pcp.notes.create"`, `"id":"org.pcp.notes.delete"`, `"isError":false`},
				"apps":        {`"surfaces":["atspi.gnome-calculator/1"]`, `"surfaces":["atspi.gtk3-widget-factory/1"]`},
				"create":      {`"status":"success"`, `"isError":false`},
				"create_kept": {`"status":"success"`, `"isError":false`},
				"waiting":     {`waiting for the user to approve or deny conf-`, `the desktop notification`},
				"approved":    {`"status":"deferred"`, `"undo_window_ms":10000`, `"isError":false`},
				"denied":      {`"name":"CONFIRMATION_DENIED"`, `"isError":true`},
				"pressed":     {`"keys":["2","+","3","="]`},
				"display":     {`"5"`},
				"done":        {`{"step":"done"}`},
			} {
				for _, part := range want {
					if !strings.Contains(steps[step], part) {
						t.Errorf("%s: got %s, want %s", step, steps[step], part)
					}
				}
			}
			if t.Failed() {
				t.Logf("all steps: %v", steps)
			}
		})
	}

	// The approved deletes ran once their undo window passed, and the
	// denied ones did not.
	for done := 0; done < len(clients); {
		select {
		case n := <-user.Notifications():
			if n.Method == api.EventJobFailed {
				t.Errorf("a job failed: %s", n.Params)
			} else if strings.Contains(string(n.Params), `"`+notesApp+`.delete"`) {
				done++
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of the %d approved deletes done within 30s", done, len(clients))
		}
	}
	got := notes(t)
	for _, c := range clients {
		if !slices.Contains(got, "kept ("+c.name+")") || slices.Contains(got, "groceries ("+c.name+")") {
			t.Errorf("notes at the end: %q, want kept (%s) and no groceries (%[2]s)", got, c.name)
		}
	}

	// Every decision was the user's, on the notification.
	var tail api.AuditTailResult
	w.pcpctlJSON(&tail, "audit", "tail", "-n", "500")
	decided := map[string]int{}
	creators := map[string]int{}
	for _, e := range tail.Entries {
		if e.Kind == api.AuditConfirmation && (e.Outcome == api.ConfirmApproved || e.Outcome == api.ConfirmDenied) {
			decided[e.Outcome+" by "+e.Actor]++
		}
		if e.Kind == api.AuditInvoke && e.CapabilityID == notesApp+".create" {
			creators[e.Actor]++
		}
	}
	if want := map[string]int{api.ConfirmApproved + " by user:notification": 3, api.ConfirmDenied + " by user:notification": 3}; fmt.Sprint(decided) != fmt.Sprint(want) {
		t.Errorf("audit decisions %v, want %v", decided, want)
	}
	// Each client's notes are its own agent session's: mcp.sock's peer
	// (the test, then pcpctl mcp) and the HTTP session.
	if len(creators) != 3 || creators["agent:tcp=mcp-http"] != 2 {
		t.Errorf("audit actors of the creates: %v, want three agents, agent:tcp=mcp-http among them", creators)
	}
	w.auditVerify()
}

// runClient runs one client's scenario, reading its steps (one JSON line
// each). At each "waiting" (the first progress notification of a call
// waiting for the user) it waits for dunst to show that confirmation's
// notification and answers it as the user: Approve the first time, Deny
// the second. It returns the steps by name.
func runClient(ctx context.Context, t *testing.T, watch *testkit.NotifyWatch, dunst *testkit.Dunst,
	run func(context.Context) (io.ReadCloser, func() error, error)) map[string]string {
	t.Helper()
	stdout, wait, err := run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stdout.Close()
	steps := map[string]string{}
	var noteIDs []int64
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var st struct {
			Step       string
			Structured struct {
				Data struct{ ID int64 }
			}
		}
		if err := json.Unmarshal(sc.Bytes(), &st); err != nil {
			t.Fatalf("the client printed %q: %v", sc.Text(), err)
		}
		steps[st.Step] = sc.Text()
		switch st.Step {
		case "create", "create_kept":
			noteIDs = append(noteIDs, st.Structured.Data.ID)
		case "waiting":
			answer(ctx, t, watch, dunst, noteIDs)
			noteIDs = noteIDs[1:]
		}
	}
	if err := wait(); err != nil {
		t.Fatalf("the client failed: %v; its steps: %v", err, steps)
	}
	return steps
}

// answer waits for dunst to show the notification of the delete of the
// first of ids, then picks Approve in it when two deletes are left and
// Deny when one is.
func answer(ctx context.Context, t *testing.T, watch *testkit.NotifyWatch, dunst *testkit.Dunst, ids []int64) {
	t.Helper()
	if len(ids) == 0 {
		t.Fatal("a call waits for the user before any note was created")
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nc, err := watch.Next(wctx, "Notify")
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("(id=%d)", ids[0]); nc.Summary != "PCP: allow "+notesApp+".delete?" ||
		!strings.Contains(nc.Body, "App: "+notesApp) || !strings.Contains(nc.Body, want) {
		t.Errorf("notification %q: %q, want the delete of note %d by %s", nc.Summary, nc.Body, ids[0], notesApp)
	}
	for {
		n, err := dunst.Displayed()
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		select {
		case <-wctx.Done():
			t.Fatal("dunst shows no notification")
		case <-time.After(20 * time.Millisecond):
		}
	}
	key := notify.ActionApprove
	if len(ids) == 1 {
		key = notify.ActionDeny
	}
	if err := dunst.Answer(nc.ID, key); err != nil {
		t.Fatal(err)
	}
}

// goSDKScenario is interop.mjs's --desktop scenario with the Go SDK's
// client on mcp.sock, printing the same steps to out.
func goSDKScenario(ctx context.Context, sock string, out io.Writer) error {
	var mu sync.Mutex
	var werr error
	emit := func(step string, v map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		line := map[string]any{"step": step}
		for k, x := range v {
			line[k] = x
		}
		b, _ := json.Marshal(line)
		if _, err := out.Write(append(b, '\n')); err != nil && werr == nil {
			werr = err
		}
	}
	var armed sync.Mutex // held while a call awaits its first progress
	waitingFor := false
	cl := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "e2e", Version: "1"}, &mcpsdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcpsdk.ProgressNotificationClientRequest) {
			armed.Lock()
			first := waitingFor
			waitingFor = false
			armed.Unlock()
			if first {
				emit("waiting", map[string]any{"message": req.Params.Message})
			}
		},
	})
	conn, err := client.DialMCP(ctx, sock)
	if err != nil {
		return err
	}
	cs, err := cl.Connect(ctx, &mcpsdk.IOTransport{Reader: conn, Writer: conn}, nil)
	if err != nil {
		return err
	}
	defer cs.Close()
	emit("initialize", map[string]any{"server": cs.InitializeResult().ServerInfo})
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		return err
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	emit("tools", map[string]any{"names": names})

	tool := func(name string, args map[string]any, waits bool) (*mcpsdk.CallToolResult, error) {
		p := &mcpsdk.CallToolParams{Name: name, Arguments: args}
		if waits {
			p.SetProgressToken(name)
			armed.Lock()
			waitingFor = true
			armed.Unlock()
		}
		return cs.CallTool(ctx, p)
	}
	call := func(step, name string, args map[string]any, waits bool) (json.RawMessage, error) {
		res, err := tool(name, args, waits)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", step, err)
		}
		raw, _ := json.Marshal(res.StructuredContent)
		emit(step, map[string]any{"isError": res.IsError, "structured": json.RawMessage(raw)})
		return raw, nil
	}
	if _, err := call("search", "pcp_search", map[string]any{"query": "note create"}, false); err != nil {
		return err
	}
	raw, err := call("apps", "pcp_search", map[string]any{"query": "calculator widget factory"}, false)
	if err != nil {
		return err
	}
	var found struct {
		Tier2Apps []struct {
			AppID    string   `json:"app_id"`
			Surfaces []string `json:"surfaces"`
		} `json:"tier2_apps"`
	}
	json.Unmarshal(raw, &found)
	surface := ""
	for _, a := range found.Tier2Apps {
		if strings.HasSuffix(a.AppID, "calculator") && len(a.Surfaces) > 0 {
			surface = a.Surfaces[0]
		}
	}
	if surface == "" {
		return fmt.Errorf("pcp_search lists no calculator window: %s", raw)
	}

	created := func(step, title string) (int64, error) {
		raw, err := call(step, "pcp_invoke", map[string]any{"capability_id": notesApp + ".create", "params": map[string]any{"title": title, "body": "from go-sdk"}}, false)
		if err != nil {
			return 0, err
		}
		var res struct{ Data struct{ ID int64 } }
		json.Unmarshal(raw, &res)
		return res.Data.ID, nil
	}
	gone, err := created("create", "groceries (go-sdk)")
	if err != nil {
		return err
	}
	kept, err := created("create_kept", "kept (go-sdk)")
	if err != nil {
		return err
	}
	if _, err := call("approved", "pcp_invoke", map[string]any{"capability_id": notesApp + ".delete", "params": map[string]any{"id": gone}}, true); err != nil {
		return err
	}
	if _, err := call("denied", "pcp_invoke", map[string]any{"capability_id": notesApp + ".delete", "params": map[string]any{"id": kept}}, true); err != nil {
		return err
	}

	// The keys, from the JSON tree this time.
	tree := func() (*api.Element, error) {
		res, err := tool("pcp_elements", map[string]any{"surface_id": surface, "max_depth": 64, "format": "json"}, false)
		if err != nil {
			return nil, err
		}
		raw, _ := json.Marshal(res.StructuredContent)
		var t struct{ Root api.Element }
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, err
		}
		return &t.Root, nil
	}
	root, err := tree()
	if err != nil {
		return err
	}
	keys := map[string]string{}
	var walk func(e *api.Element)
	walk = func(e *api.Element) {
		// GTK 4's calculator labels a key "2 2" (name and description).
		if f := strings.Fields(e.Label); e.Role == "push button" && len(f) > 0 && keys[f[0]] == "" {
			keys[f[0]] = e.ID
		}
		for i := range e.Children {
			walk(&e.Children[i])
		}
	}
	walk(root)
	var pressed []string
	for _, key := range []string{"2", "+", "3", "="} {
		if keys[key] == "" {
			return fmt.Errorf("no key %s in the calculator's tree", key)
		}
		res, err := tool("pcp_act", map[string]any{"surface_id": surface, "element_id": keys[key], "action": "activate"}, false)
		if err != nil {
			return err
		}
		if res.IsError {
			raw, _ := json.Marshal(res.StructuredContent)
			return fmt.Errorf("pressing %s: %s", key, raw)
		}
		pressed = append(pressed, key)
	}
	emit("pressed", map[string]any{"surface": surface, "keys": pressed})
	// The display is read back until it shows the result; between reads
	// the client waits, as an agent would, with pcp_events for the next
	// change of the calculator's elements. A change that lands between a
	// read and the wait costs one bounded wait, never the answer.
	var texts []string
	for end := time.Now().Add(10 * time.Second); ; {
		root, err := tree()
		if err != nil {
			return err
		}
		if texts = displayTexts(root); slices.Contains(texts, "5") || time.Now().After(end) {
			break
		}
		if _, err := tool("pcp_events", map[string]any{"types": elementEvents, "surface_id": surface, "wait_ms": 2000}, false); err != nil {
			return err
		}
	}
	emit("display", map[string]any{"texts": texts})
	cs.Close() // its error is the connection's close
	emit("done", nil)
	mu.Lock()
	defer mu.Unlock()
	return werr
}

// elementEvents are the events an element's change is published as.
var elementEvents = []string{api.EventElementValueChanged, api.EventElementChildrenChanged, api.EventElementStateChanged}

// displayTexts are the texts of a tree's text elements, trimmed: the
// calculator's display among them.
func displayTexts(e *api.Element) []string {
	var out []string
	if e.Role == "text" {
		var s string
		if json.Unmarshal(e.Value, &s) == nil {
			out = append(out, strings.TrimSpace(s))
		}
	}
	for i := range e.Children {
		out = append(out, displayTexts(&e.Children[i])...)
	}
	return out
}

// freeLoopbackAddr is a loopback TCP address free at the time of the
// call, for pcpd's --mcp-http.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
