package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/golden"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/pavo"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// TestPavoGolden runs the transcripts in testdata/pavo: each drives a real
// `pcpctl serve` subprocess over its stdin and stdout, against a real pcpd
// (and, where the transcript starts them, the notes app, a test adapter
// and agents run with pcpctl), and compares every reply line with the
// expected one after normalizing what changes from run to run. Every reply
// is also validated, as it came, against the protocol's JSON Schema.
//
// The "transcript" section of a file holds lines of these forms:
//
//	# text                   a comment
//	> JSON                   a request line written to the driver
//	< JSON                   the driver's next reply line, normalized
//	! start-pcpd             start pcpd (and wait until it answers)
//	! stop-pcpd              stop pcpd with SIGTERM and wait for it
//	! start-notes            start the notes app, wait for its capabilities
//	! wait-notes             wait until the notes capabilities are served
//	! adapter                register a test adapter on the agent socket
//	                         serving surface "surface-demo"
//	! pcpctl ARGS…           run pcpctl ARGS as the agent would; the next
//	                         line is "= OUTCOME"
//	! agent NAME ARGS…       start pcpctl ARGS in the background
//	! wait NAME              wait for agent NAME; the next line is "= OUTCOME"
//	! wait-pending N         wait until N confirmations are pending
//	! wait-job ID STATE      wait until job ID is in STATE
//	! big N                  write a request line of N bytes
//	= OUTCOME                "exit CODE: OUTPUT": a run's exit code and its
//	                         output (stdout as compact JSON on success, else
//	                         stderr, lines joined with " | "), normalized
//
// Normalization, in this order, applies to replies and OUTCOMEs:
//   - the test's temporary directory reads $DIR;
//   - pcpd's and pcpctl's version in a "version" member reads <version>;
//   - ids the daemon makes (conf-…, job-…, sub-…, sess-…) read <conf#1>,
//     <job#1>, … numbered by prefix in order of first appearance; request
//     lines and directive arguments may use these names, which are turned
//     back into the real ids before they are sent;
//   - audit sequence numbers ("seq":N, audit-N) read <seq#1>, … in order
//     of first appearance (the daemon's and the agents' entries
//     interleave differently from run to run);
//   - RFC 3339 timestamps read <time>; 64 hex digits read <hash>;
//   - durations (duration_us, duration_ms, uptime_ms) and Unix-second
//     "timestamp" members read <n>;
//   - uid=N reads uid=<uid>, and pid=N names the process: pid=<serve>,
//     pid=<notes>, pid=<test> (the adapter), pid=<agent NAME>, else
//     pid=<pid>.
//
// go test ./internal/e2e -run TestPavoGolden -update rewrites the expected
// lines.
func TestPavoGolden(t *testing.T) {
	golden.ForEach(t, "testdata/pavo/*.txtar", func(t *testing.T, file string) {
		t.Parallel()
		runPavoGolden(t, file)
	})
}

// pavoSchemas are the protocol's schemas, compiled once.
var pavoSchemas = sync.OnceValues(func() (*jsonschema.Compiler, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(pavo.Schema))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource("wire.schema.json", doc); err != nil {
		return nil, err
	}
	return c, nil
})

var (
	schemaMu    sync.Mutex
	schemaCache = map[string]*jsonschema.Schema{}
)

// pavoSchema compiles the schema $defs/name.
func pavoSchema(t testing.TB, name string) *jsonschema.Schema {
	t.Helper()
	schemaMu.Lock()
	defer schemaMu.Unlock()
	if s, ok := schemaCache[name]; ok {
		return s
	}
	c, err := pavoSchemas()
	if err != nil {
		t.Fatalf("loading the pavo schema: %v", err)
	}
	s, err := c.Compile("wire.schema.json#/$defs/" + name)
	if err != nil {
		t.Fatalf("compiling $defs/%s: %v", name, err)
	}
	schemaCache[name] = s
	return s
}

// validateReply checks a reply line against the schema of the request's
// op, and the data of named queries and view bindings against theirs.
func validateReply(t testing.TB, request, reply []byte) error {
	var req struct {
		Op    string `json:"op"`
		Query string `json:"query"`
	}
	json.Unmarshal(request, &req)
	def := "ErrorReply"
	if slices.Contains(pavo.Ops, req.Op) {
		def = strings.ToUpper(req.Op[:1]) + req.Op[1:] + "Reply"
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(reply))
	if err != nil {
		return fmt.Errorf("reply is not JSON: %v", err)
	}
	if err := pavoSchema(t, def).Validate(inst); err != nil {
		return fmt.Errorf("$defs/%s: %v", def, err)
	}
	var rep struct {
		OK     bool `json:"ok"`
		Result struct {
			Data json.RawMessage `json:"data"`
			View struct {
				Queries []pavo.QueryBinding `json:"queries"`
			} `json:"view"`
		} `json:"result"`
	}
	if err := json.Unmarshal(reply, &rep); err != nil || !rep.OK {
		return nil
	}
	check := func(query string, data json.RawMessage, what string) error {
		var be pavo.BindingError
		if json.Unmarshal(data, &be) == nil && be.Error != "" {
			return nil
		}
		if strings.Contains(query, ".") {
			return nil // a raw pcpd method: the daemon's shape
		}
		def := dataDef(query)
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return err
		}
		if err := pavoSchema(t, def).Validate(inst); err != nil {
			return fmt.Errorf("%s: $defs/%s: %v", what, def, err)
		}
		return nil
	}
	switch req.Op {
	case pavo.OpQuery:
		return check(req.Query, rep.Result.Data, "data")
	case pavo.OpView:
		var data map[string]json.RawMessage
		json.Unmarshal(rep.Result.Data, &data)
		for _, b := range rep.Result.View.Queries {
			if err := check(b.Query, data[b.Name], "data."+b.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// dataDef is the schema of a named query's data: audit_chain →
// AuditChainData.
func dataDef(query string) string {
	var b strings.Builder
	for _, p := range strings.Split(query, "_") {
		if p != "" {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
	}
	return b.String() + "Data"
}

// pavoRun is one transcript's run.
type pavoRun struct {
	t    *testing.T
	w    *world
	file string
	norm *normalizer

	serve   *exec.Cmd
	stdin   io.WriteCloser
	replies chan replyLine
	stderr  *testkit.SyncBuffer

	agents  map[string]*agentRun
	adapter *client.Client
	// lastRequest is what the next reply answers, for the schema.
	lastRequest []byte
}

type replyLine struct {
	line []byte
	err  error
}

type agentRun struct {
	args []string
	done chan result
}

func runPavoGolden(t *testing.T, file string) {
	ar := golden.Load(t, file)
	if ar.Section("transcript") == nil {
		t.Fatalf("%s has no transcript section", file)
	}
	w := newWorld(t)
	// No accessibility bus here; liveness checks are left out so that no
	// audit entry or event depends on timing.
	w.pcpdArgs = []string{"--atspi=false", "--liveness-interval", "1h"}
	g := &pavoRun{t: t, w: w, file: file, agents: map[string]*agentRun{}}
	g.norm = newNormalizer(w)
	g.startServe()

	var out bytes.Buffer
	lines := ar.Lines("transcript")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		at := fmt.Sprintf("%s:%d", file, i+1)
		switch {
		case strings.HasPrefix(line, "> "):
			req := g.norm.expand(t, at, line[2:])
			g.send([]byte(req))
		case strings.HasPrefix(line, "< "):
			got := g.reply(at)
			line = g.check(at, line, "< "+got)
		case strings.HasPrefix(line, "! "):
			outcome, ok := g.directive(at, strings.Fields(g.norm.expand(t, at, line[2:])))
			out.WriteString(line + "\n")
			if !ok {
				continue
			}
			i++
			want := ""
			if i < len(lines) {
				want = lines[i]
			}
			if !strings.HasPrefix(want, "= ") {
				if !*golden.Update {
					t.Fatalf("%s: %q must be followed by a \"= OUTCOME\" line", at, line)
				}
				i-- // insert the outcome line
				want = ""
			}
			line = g.check(fmt.Sprintf("%s:%d", file, i+1), want, "= "+outcome)
		case strings.HasPrefix(line, "= "):
			t.Fatalf("%s: an outcome line without a directive before it", at)
		}
		out.WriteString(line + "\n")
	}

	// The end of the input ends the driver, with exit status 0.
	g.stdin.Close()
	select {
	case r := <-g.replies:
		if r.err == nil {
			t.Errorf("after the last request the driver wrote %q", r.line)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the driver did not end within 15s of the end of its input")
	}
	waited := make(chan error, 1)
	go func() { waited <- g.serve.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("pcpctl serve exited with %v at the end of its input, want status 0; stderr:\n%s", err, g.stderr)
		}
	case <-time.After(15 * time.Second):
		g.serve.Process.Kill()
		t.Fatal("pcpctl serve did not exit within 15s of the end of its input")
	}
	if s := g.stderr.String(); s != "" {
		t.Errorf("pcpctl serve wrote to stderr:\n%s", s)
	}

	if *golden.Update {
		ar.Save(t, "transcript", out.Bytes())
	}
}

// check compares got with the expected line want; with -update it
// returns got to be written instead.
func (g *pavoRun) check(at, want, got string) string {
	g.t.Helper()
	if got == want {
		return want
	}
	if *golden.Update {
		return got
	}
	g.t.Fatalf("%s: mismatch\n got: %s\nwant: %s", at, got, want)
	return ""
}

func (g *pavoRun) startServe() {
	t := g.t
	cmd := exec.Command(bin(t, "pcpctl"), "serve")
	cmd.Env = g.w.env
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	g.stderr = &testkit.SyncBuffer{}
	cmd.Stderr = g.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting pcpctl serve: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	g.serve, g.stdin = cmd, stdin
	g.norm.names[cmd.Process.Pid] = "serve"
	// Room for what a failed test leaves unread, so the reader can end.
	g.replies = make(chan replyLine, 16)
	go func() {
		br := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if err != nil {
				if len(line) > 0 {
					err = fmt.Errorf("a reply without its newline: %q", line)
				}
				g.replies <- replyLine{err: err}
				return
			}
			g.replies <- replyLine{line: bytes.TrimSuffix(line, []byte{'\n'})}
		}
	}()
}

func (g *pavoRun) send(line []byte) {
	g.lastRequest = line
	if _, err := g.stdin.Write(append(line, '\n')); err != nil {
		g.t.Fatalf("writing to pcpctl serve: %v", err)
	}
}

// reply reads the driver's next line, validates it and normalizes it.
func (g *pavoRun) reply(at string) string {
	g.t.Helper()
	select {
	case r := <-g.replies:
		if r.err != nil {
			g.t.Fatalf("%s: reading a reply: %v; stderr:\n%s", at, r.err, g.stderr)
		}
		if !json.Valid(r.line) {
			g.t.Fatalf("%s: the reply is not JSON: %q", at, r.line)
		}
		if err := validateReply(g.t, g.lastRequest, r.line); err != nil {
			g.t.Errorf("%s: the reply does not match the schema: %v\nreply: %s", at, err, r.line)
		}
		// A request the driver served is one the schema describes.
		if bytes.HasPrefix(r.line, []byte(`{"ok":true`)) {
			if inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(g.lastRequest)); err != nil {
				g.t.Errorf("%s: the request is not JSON: %v", at, err)
			} else if err := pavoSchema(g.t, "Request").Validate(inst); err != nil {
				g.t.Errorf("%s: the request does not match $defs/Request: %v", at, err)
			}
		}
		return g.norm.apply(string(r.line))
	case <-time.After(60 * time.Second):
		g.t.Fatalf("%s: no reply within 60s", at)
		return ""
	}
}

// directive runs one "!" line; it reports an outcome when the directive
// has one.
func (g *pavoRun) directive(at string, args []string) (string, bool) {
	t, w := g.t, g.w
	if len(args) == 0 {
		t.Fatalf("%s: empty directive", at)
	}
	need := func(n int) {
		if len(args) < n+1 {
			t.Fatalf("%s: %s wants %d arguments", at, args[0], n)
		}
	}
	switch args[0] {
	case "start-pcpd":
		w.startPCPD()
		g.norm.names[w.pcpd.cmd.Process.Pid] = "pcpd"
	case "stop-pcpd":
		if err := w.stop(w.pcpd, syscall.SIGTERM); err != nil {
			t.Fatalf("%s: pcpd exited with %v", at, err)
		}
	case "start-notes":
		w.startNotes()
		g.norm.names[w.notes.cmd.Process.Pid] = "notes"
	case "wait-notes":
		w.waitNotesAvailable(30 * time.Second)
	case "adapter":
		g.startAdapter(at)
	case "pcpctl":
		return g.outcome(w.pcpctl(args[1:]...)), true
	case "agent":
		need(2)
		g.startAgent(at, args[1], args[2:])
	case "wait":
		need(1)
		a := g.agents[args[1]]
		if a == nil {
			t.Fatalf("%s: no agent %s", at, args[1])
		}
		select {
		case r := <-a.done:
			return g.outcome(r), true
		case <-time.After(90 * time.Second):
			t.Fatalf("%s: agent %s did not finish within 90s", at, args[1])
		}
	case "wait-pending":
		need(1)
		n, err := strconv.Atoi(args[1])
		if err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		w.poll(fmt.Sprintf("%d pending confirmations", n), 30*time.Second, func() (bool, string) {
			var res api.ConfirmListResult
			w.pcpctlJSON(&res, "confirm", "list")
			pending := 0
			for _, c := range res.Confirmations {
				if c.State == api.ConfirmPending {
					pending++
				}
			}
			return pending == n, fmt.Sprintf("%+v", res.Confirmations)
		})
	case "wait-job":
		need(2)
		w.poll(fmt.Sprintf("job %s to be %s", args[1], args[2]), 60*time.Second, func() (bool, string) {
			var res api.JobsListResult
			w.pcpctlJSON(&res, "jobs")
			for _, j := range res.Jobs {
				if j.JobID == args[1] {
					return j.State == args[2], j.State
				}
			}
			return false, fmt.Sprintf("no job %s in %+v", args[1], res.Jobs)
		})
	case "big":
		need(1)
		n, err := strconv.Atoi(args[1])
		if err != nil {
			t.Fatalf("%s: %v", at, err)
		}
		const head, tail = `{"op":"manifest","pad":"`, `"}`
		line := append([]byte(head), bytes.Repeat([]byte("x"), n-len(head)-len(tail))...)
		g.send(append(line, tail...))
	default:
		t.Fatalf("%s: unknown directive %q", at, args[0])
	}
	return "", false
}

// outcome renders a pcpctl run as "exit CODE: OUTPUT".
func (g *pavoRun) outcome(r result) string {
	out := strings.TrimSpace(r.stdout)
	if r.code == 0 {
		var buf bytes.Buffer
		if json.Compact(&buf, []byte(out)) == nil {
			out = buf.String()
		}
	} else {
		out = strings.Join(strings.Split(strings.TrimSpace(r.stderr), "\n"), " | ")
	}
	return g.norm.apply(fmt.Sprintf("exit %d: %s", r.code, out))
}

func (g *pavoRun) startAgent(at, name string, args []string) {
	if g.agents[name] != nil {
		g.t.Fatalf("%s: agent %s already started", at, name)
	}
	a := &agentRun{args: args, done: make(chan result, 1)}
	g.agents[name] = a
	cmd := exec.Command(bin(g.t, "pcpctl"), args...)
	cmd.Env = g.w.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		g.t.Fatalf("%s: starting agent %s: %v", at, name, err)
	}
	g.norm.names[cmd.Process.Pid] = "agent " + name
	g.t.Cleanup(func() { cmd.Process.Kill() })
	go func() {
		err := cmd.Wait()
		r := result{args: args, stdout: stdout.String(), stderr: stderr.String(), err: err}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.code = ee.ExitCode()
		} else if err != nil {
			r.code = -1
		}
		a.done <- r
	}()
}

// The test adapter serves one surface with a fixed element tree.
const demoSurface = "surface-demo"

var demoTree = api.Element{
	ID: "win", Role: "frame", Label: "Notes", Bounds: &api.Bounds{X: 0, Y: 0, W: 320, H: 200},
	Children: []api.Element{
		{ID: "title", Role: "text", Label: "Title <b>&", Bounds: &api.Bounds{X: 10, Y: 10, W: 300, H: 24}, Actions: []string{"set_text"}, States: []string{"editable", "focused"}},
		{ID: "save", Role: "push button", Label: "Save", Bounds: &api.Bounds{X: 10, Y: 160, W: 80, H: 28}, Actions: []string{"click"}},
		{ID: "hidden", Role: "panel", Label: "no bounds"},
	},
}

func (g *pavoRun) startAdapter(at string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	handler := func(_ context.Context, method string, params json.RawMessage) (any, error) {
		var p struct {
			SurfaceID string `json:"surface_id"`
		}
		json.Unmarshal(params, &p)
		if p.SurfaceID != demoSurface {
			return nil, api.Errorf(api.CodeSurfaceNotFound, map[string]any{"surface_id": p.SurfaceID}, "no surface %s", p.SurfaceID)
		}
		switch method {
		case api.MethodQuerySurface:
			return &api.Surface{SurfaceID: demoSurface, AppID: "org.example.demo", Title: "Demo window", State: "normal",
				Geometry: &api.Bounds{W: 320, H: 200}, Tier: 2}, nil
		case api.MethodQueryElements:
			return &api.QueryElementsResult{Root: demoTree}, nil
		}
		return nil, api.Errorf(api.CodeActionNotSupported, nil, "the test adapter does not serve %s", method)
	}
	cl, err := client.Dial(ctx, g.w.socket, client.Options{Handler: handler})
	if err != nil {
		g.t.Fatalf("%s: %v", at, err)
	}
	g.t.Cleanup(func() { cl.Close() })
	if _, err := cl.RegisterAdapter(ctx, &api.RegisterAdapterParams{SurfaceType: "test", AdapterID: "test-adapter", SupportedTiers: []int{2}}); err != nil {
		g.t.Fatalf("%s: register.adapter: %v", at, err)
	}
	g.adapter = cl
	g.norm.names[os.Getpid()] = "test"
}

// normalizer rewrites what changes from run to run; see TestPavoGolden.
type normalizer struct {
	dir     string
	version string
	ids     map[string]string // real id → <prefix#n>
	back    map[string]string // <prefix#n> → real id
	count   map[string]int
	seqs    map[string]string // audit seq → <seq#n>
	names   map[int]string    // pid → name
	uid     string
}

var (
	idRe       = regexp.MustCompile(`\b(conf|job|sub|sess)-[0-9a-f]{7,}\b`)
	idNameRe   = regexp.MustCompile(`<(conf|job|sub|sess)#[0-9]+>`)
	seqRe      = regexp.MustCompile(`\baudit-([0-9]+)\b|"seq":([0-9]+)`)
	timeRe     = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	hashRe     = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	durationRe = regexp.MustCompile(`"(duration_us|duration_ms|uptime_ms|timestamp)":\d+`)
	durTextRe  = regexp.MustCompile(`\b(duration_us|duration_ms|uptime_ms)=\d+`)
	pidRe      = regexp.MustCompile(`pid=(\d+)`)
	uidRe      = regexp.MustCompile(`uid=(\d+)`)
)

func newNormalizer(w *world) *normalizer {
	n := &normalizer{dir: w.dir, ids: map[string]string{}, back: map[string]string{}, count: map[string]int{},
		seqs: map[string]string{}, names: map[int]string{}, uid: strconv.Itoa(os.Getuid())}
	var v map[string]string
	w.pcpctlJSON(&v, "version")
	n.version = v["pcpctl"]
	return n
}

func (n *normalizer) apply(s string) string {
	s = strings.ReplaceAll(s, n.dir, "$DIR")
	if n.version != "" {
		quoted, _ := json.Marshal(n.version)
		s = strings.ReplaceAll(s, `"version":`+string(quoted), `"version":"<version>"`)
	}
	s = idRe.ReplaceAllStringFunc(s, func(id string) string {
		if name, ok := n.ids[id]; ok {
			return name
		}
		prefix, _, _ := strings.Cut(id, "-")
		n.count[prefix]++
		name := fmt.Sprintf("<%s#%d>", prefix, n.count[prefix])
		n.ids[id], n.back[name] = name, id
		return name
	})
	s = seqRe.ReplaceAllStringFunc(s, func(m string) string {
		sub := seqRe.FindStringSubmatch(m)
		num := sub[1] + sub[2]
		name, ok := n.seqs[num]
		if !ok {
			name = fmt.Sprintf("<seq#%d>", len(n.seqs)+1)
			n.seqs[num] = name
		}
		if sub[1] != "" {
			return "audit-" + name
		}
		return `"seq":"` + name + `"`
	})
	s = timeRe.ReplaceAllString(s, "<time>")
	s = hashRe.ReplaceAllString(s, "<hash>")
	s = durationRe.ReplaceAllString(s, `"$1":"<n>"`)
	s = durTextRe.ReplaceAllString(s, `$1=<n>`)
	s = uidRe.ReplaceAllStringFunc(s, func(m string) string {
		if m == "uid="+n.uid {
			return "uid=<uid>"
		}
		return m
	})
	s = pidRe.ReplaceAllStringFunc(s, func(m string) string {
		pid, _ := strconv.Atoi(m[len("pid="):])
		if name, ok := n.names[pid]; ok {
			return "pid=<" + name + ">"
		}
		return "pid=<pid>"
	})
	return s
}

// expand turns <prefix#n> names back into the ids they stand for.
func (n *normalizer) expand(t *testing.T, at, s string) string {
	return idNameRe.ReplaceAllStringFunc(s, func(name string) string {
		id, ok := n.back[name]
		if !ok {
			t.Fatalf("%s: %s has not appeared in a reply yet", at, name)
		}
		return id
	})
}
