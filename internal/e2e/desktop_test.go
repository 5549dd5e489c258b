package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpsdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// TestDesktop drives real GTK applications on a headless desktop of its
// own (scripts/desktop: Xvfb, a session bus, the accessibility bus,
// gtk3-widget-factory and gnome-calculator) through pcpd's public faces
// only: JSON-RPC, the framed stream and pcpctl. A desktop that cannot
// start fails the test.
func TestDesktop(t *testing.T) {
	d, err := testkit.StartDesktop(true)
	if err != nil {
		t.Fatalf("the headless desktop did not start: %v", err)
	}
	t.Cleanup(d.Stop)
	if err := d.WaitApps(60*time.Second, "gtk3-widget-factory", "gnome-calculator"); err != nil {
		t.Fatal(err)
	}

	// The agent may act in these two apps without asking; everything else
	// detected through accessibility still needs the user's confirmation.
	w, agent := desktopPCPD(t, d, "[apps.\"atspi.gtk3-widget-factory\"]\ntrust_level = \"auto\"\n[apps.\"atspi.gnome-calculator\"]\ntrust_level = \"auto\"\n"+
		"[apps.\"system\".capabilities.capture]\ntrust_level = \"auto\"\n"+
		// One way of pressing a key stays the user's to approve.
		"[apps.\"atspi.gnome-calculator\".capabilities.\"activate.asked\"]\ntrust_level = \"confirm\"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	framed, err := client.DialFramed(ctx, w.socket)
	if err != nil {
		t.Fatal(err)
	}
	defer framed.Close()

	const (
		factory = "atspi.gtk3-widget-factory"
		calc    = "atspi.gnome-calculator"
	)
	// act invokes a capability the registry does not hold: the AT-SPI2
	// adapter detects "<app id>.<action>" and runs it on the element the
	// params name.
	act := func(capability string, params map[string]any) (*api.CapabilityResult, error) {
		raw, _ := json.Marshal(params)
		parts := strings.SplitN(capability, ".", 3)
		return agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: capability, AppID: parts[0] + "." + parts[1], Source: api.SourceSystemIntelligence, Params: raw})
	}
	poll := func(what string, f func() (bool, string)) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ok, last := f()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: still %s after 10s", what, last)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// elementTree is an app's flat tree, over the framed face.
	elementTree := func(appID string) ([]api.ElementInfo, error) {
		var reg api.RegistryResponse
		if _, err := framed.Request(ctx, frame.RegistryQuery, &api.RegistryQuery{Kind: api.KindElementTree, AppID: appID}, &reg); err != nil {
			return nil, err
		}
		if reg.Elements == nil {
			return nil, errors.New("ElementTree answered no elements")
		}
		return *reg.Elements, nil
	}
	// displayShows reports whether a text element of the calculator reads
	// want, for poll; otherwise what the text elements read.
	displayShows := func(want string) func() (bool, string) {
		return func() (bool, string) {
			elems, err := elementTree(calc)
			if err != nil {
				return false, err.Error()
			}
			var texts []string
			for _, e := range elems {
				if e.Role == "text" && e.Text != nil {
					texts = append(texts, *e.Text)
					if strings.TrimSpace(*e.Text) == want {
						return true, ""
					}
				}
			}
			return false, strings.Join(texts, " | ")
		}
	}

	t.Run("health and context", func(t *testing.T) {
		h, err := agent.Health(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// The AT-SPI2 adapter, and the X11 platform adapter of the
		// desktop's display.
		if len(h.Adapters) != 2 || h.Adapters[0].AdapterID != "atspi" || h.Adapters[0].Status != api.HealthOK ||
			h.Adapters[1].AdapterID != "x11" || h.Adapters[1].Status != api.HealthOK {
			t.Fatalf("health adapters = %+v, want atspi ok, x11 ok", h.Adapters)
		}
		poll("both apps' windows in the session context", func() (bool, string) {
			sc, err := agent.SessionContext(ctx)
			if err != nil {
				return false, err.Error()
			}
			s := strings.Join(sc.ActiveSurfaces, " ")
			return strings.Contains(s, factory+"/1") && strings.Contains(s, calc+"/1"), s
		})
		// One window, one surface id: both apps are accessible, so their
		// windows are the AT-SPI2 adapter's, not listed again by X11.
		sc, err := agent.SessionContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range sc.ActiveSurfaces {
			if strings.HasPrefix(id, "x11:") {
				t.Errorf("session context lists %s beside the accessible windows: %v", id, sc.ActiveSurfaces)
			}
		}
		if sc.SystemState["display_server"] != "x11" {
			t.Errorf("session context system_state %v, want display_server x11", sc.SystemState)
		}
		det, err := framed.Request(ctx, frame.DetectRequest, &api.DetectRequest{AppID: factory}, new(api.DetectResponse))
		if err != nil || det != frame.DetectResponse {
			t.Fatalf("DetectRequest: %v, %v", det, err)
		}
	})

	t.Run("element tree", func(t *testing.T) {
		var reg api.RegistryResponse
		if _, err := framed.Request(ctx, frame.RegistryQuery, &api.RegistryQuery{Kind: api.KindElementTree, AppID: factory}, &reg); err != nil {
			t.Fatal(err)
		}
		if reg.Kind != api.KindElements || reg.Elements == nil || len(*reg.Elements) < 200 {
			t.Fatalf("ElementTree of %s: kind %q, %d elements; want about 260", factory, reg.Kind, lenOf(reg.Elements))
		}
		for _, e := range *reg.Elements {
			if e.AccessiblePath == "" || e.BusName == "" || e.Role == "" {
				t.Fatalf("element without path, bus name or role: %+v", e)
			}
		}
		tree, err := agent.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: factory + "/1"})
		if err != nil {
			t.Fatal(err)
		}
		if tree.Root.Role != "frame" || len(tree.Root.Children) == 0 {
			t.Fatalf("query.elements root = %s with %d children", tree.Root.Role, len(tree.Root.Children))
		}
		// pcpctl prints it readably and draws it.
		r := w.mustPCPCTL("elements", factory+"/1")
		if !strings.HasPrefix(r.stdout, "frame") || !strings.Contains(r.stdout, "  push button \"") {
			t.Errorf("pcpctl elements output lacks the frame or buttons:\n%.2000s", r.stdout)
		}
		svg := filepath.Join(w.dir, "factory.svg")
		if r := w.mustPCPCTL("elements", factory+"/1", "--svg", svg); !strings.HasPrefix(r.stdout, svg+": the wireframe of "+factory+"/1, ") {
			t.Errorf("pcpctl elements --svg printed %q, want what it wrote", r.stdout)
		}
		b, err := os.ReadFile(svg)
		if err != nil {
			t.Fatal(err)
		}
		rects, dec := 0, xml.NewDecoder(strings.NewReader(string(b)))
		for {
			tok, err := dec.Token()
			if err != nil {
				if err != io.EOF {
					t.Fatalf("the SVG is not well-formed: %v", err)
				}
				break
			}
			if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
				rects++
			}
		}
		if rects < 50 {
			t.Errorf("the SVG draws %d boxes, want most of the tree", rects)
		}
	})

	t.Run("set an entry's text and read it back", func(t *testing.T) {
		target := map[string]any{"role": "text", "states": []string{"editable", "sensitive", "single-line", "showing"}}
		// There are several such entries: the first attempt must say so.
		_, err := act(factory+".set_value", map[string]any{"target": target, "value": "x"})
		if !errors.Is(err, api.ErrTargetAmbiguous) {
			t.Fatalf("set_value on an ambiguous entry: %v, want TARGET_AMBIGUOUS", err)
		}
		cands, _ := api.AsError(err).DataMap()["candidates"].([]any)
		if len(cands) < 2 {
			t.Fatalf("TARGET_AMBIGUOUS lists %d candidates", len(cands))
		}
		first, _ := cands[0].(map[string]any)
		id, _ := first["element_id"].(string)
		if _, err := act(factory+".set_value", map[string]any{"element_id": id, "value": "typed by pcpd"}); err != nil {
			t.Fatal(err)
		}
		poll("the entry's text", func() (bool, string) {
			res, err := act(factory+".read_text", map[string]any{"element_id": id})
			if err != nil {
				return false, err.Error()
			}
			return strings.Contains(string(res.Data), "typed by pcpd"), string(res.Data)
		})
	})

	t.Run("toggle a check button and read its state", func(t *testing.T) {
		sub, err := agent.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: []string{api.EventElementStateChanged}, AppID: factory})
		if err != nil {
			t.Fatal(err)
		}
		defer agent.Unsubscribe(ctx, sub.SubscriptionID)
		// Two sensitive check boxes are named "checkbutton": take the first
		// the tree lists, by its element id.
		elems, err := elementTree(factory)
		if err != nil {
			t.Fatal(err)
		}
		var path, bus string
		for _, e := range elems {
			if e.Role == "check box" && e.Name != nil && *e.Name == "checkbutton" && contains(e.States, "sensitive") && !contains(e.States, "indeterminate") {
				path, bus = e.AccessiblePath, e.BusName
				break
			}
		}
		if path == "" {
			t.Fatal("no sensitive check box named checkbutton in the tree")
		}
		checked := func() (bool, string) {
			elems, err := elementTree(factory)
			if err != nil {
				return false, err.Error()
			}
			for _, e := range elems {
				if e.AccessiblePath == path {
					return contains(e.States, "checked"), strings.Join(e.States, ",")
				}
			}
			return false, "the check box left the tree"
		}
		box := map[string]any{"element_id": bus + "|" + path}
		before, _ := checked()
		if _, err := act(factory+".activate", box); err != nil {
			t.Fatal(err)
		}
		poll("the check box to change", func() (bool, string) {
			now, states := checked()
			return now != before, states
		})
		select {
		case n := <-agent.Notifications():
			if n.Method != api.EventElementStateChanged {
				t.Errorf("notification %s, want element.state_changed", n.Method)
			}
		case <-time.After(5 * time.Second):
			t.Error("no element.state_changed event after the toggle")
		}
	})

	t.Run("set a spin button", func(t *testing.T) {
		res, err := act(factory+".set_value", map[string]any{"role": "spin button", "states": []string{"sensitive"}, "value": 42})
		if err != nil || res.Status != api.StatusSuccess {
			t.Fatalf("set_value 42: %+v, %v", res, err)
		}
		poll("the spin button's value", func() (bool, string) {
			elems, err := elementTree(factory)
			if err != nil {
				return false, err.Error()
			}
			for _, e := range elems {
				if e.Role == "spin button" && contains(e.States, "sensitive") && e.Text != nil {
					return *e.Text == "42", *e.Text
				}
			}
			return false, "no spin button"
		})
	})

	t.Run("a disabled target", func(t *testing.T) {
		start := time.Now()
		_, err := act(factory+".activate", map[string]any{"role": "check box", "name": "checkbutton", "states": []string{"!sensitive", "!checked", "!indeterminate"}, "timeout_ms": 300})
		e := api.AsError(err)
		if e == nil || !strings.Contains(e.Message, "not SENSITIVE") {
			t.Fatalf("activate a disabled check box: %v, want an error naming the SENSITIVE state", err)
		}
		if time.Since(start) > 5*time.Second {
			t.Errorf("the disabled target took %v to refuse", time.Since(start))
		}
	})

	t.Run("calculator: 2 + 3 = 5, over the framed face", func(t *testing.T) {
		for _, key := range []string{"2", "+", "3", "="} {
			p, _ := json.Marshal(map[string]any{"role": "push button", "name": key})
			if _, err := framed.Execute(ctx, calc+".activate", p, false); err != nil {
				t.Fatalf("press %s: %v", key, err)
			}
		}
		poll("the calculator's display", displayShows("5"))
		// An ambiguous press is refused on the framed face with 409.
		p, _ := json.Marshal(map[string]any{"role": "push button"})
		_, err := framed.Execute(ctx, calc+".activate", p, false)
		var fe *client.FrameError
		if !errors.As(err, &fe) || fe.Status != 409 || !errors.Is(err, api.ErrTargetAmbiguous) {
			t.Fatalf("ambiguous press: %v, want ErrorResponse 409 TARGET_AMBIGUOUS", err)
		}
	})

	t.Run("Tier 2 apps are listed, and a confirmation names the element", func(t *testing.T) {
		var apps api.AppsListResult
		w.pcpctlJSON(&apps, "apps")
		i := slices.IndexFunc(apps.Apps, func(a api.App) bool { return a.AppID == calc })
		if i < 0 || apps.Apps[i].Tier != 2 || apps.Apps[i].Via != "atspi" || apps.Apps[i].State != api.AppRunning || apps.Apps[i].Capabilities != 5 {
			t.Errorf("pcpctl apps: %+v, want %s running, tier 2 via atspi, 5 capabilities", apps.Apps, calc)
		}
		if r := w.mustPCPCTL("apps"); !slices.ContainsFunc(strings.Split(r.stdout, "\n"), func(l string) bool {
			return slices.Equal(strings.Fields(l), []string{calc, "running", "2", "atspi", "5", "no", "-", "-", "-"})
		}) {
			t.Errorf("pcpctl apps lacks the calculator's row (running, tier 2 via atspi, 5 capabilities):\n%s", r.stdout)
		}
		r := w.mustPCPCTL("caps", "--app", calc)
		for _, want := range []string{calc + ".activate", calc + ".read_text", calc + ".select", calc + ".scroll", calc + ".set_value", "auto", "Press, click or toggle"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("pcpctl caps --app %s lacks %q:\n%s", calc, want, r.stdout)
			}
		}
		_, err := act(calc+".activate.asked", map[string]any{"role": "push button", "name": "7"})
		e := api.AsError(err)
		if e == nil || e.Code != api.CodeConfirmationRequired || e.DataMap()["description"] != `Press the "7" button in Calculator` {
			t.Fatalf("a key press the user approves: %v %v, want CONFIRMATION_REQUIRED pressing the \"7\" button", err, e.DataMap())
		}
		if r := w.mustPCPCTL("confirm", "deny", "--last"); !strings.HasPrefix(r.stdout, "denied ") || !strings.Contains(r.stdout, `button in Calculator`) {
			t.Errorf("pcpctl confirm deny --last: %s", r.stdout)
		}
	})

	t.Run("a signed manifest for an app reached through accessibility", func(t *testing.T) {
		// The publisher signs a manifest naming the calculator's accessible
		// application; its auto capability then runs on that tree without
		// asking, under the manifest's own app id.
		const appID = "org.gnome.Calculator"
		src := filepath.Join(w.dir, "calculator.json")
		signed := filepath.Join(w.dir, "calculator.signed.json")
		manifest := `{"version":"1.0","accessible_name":"gnome-calculator","capabilities":[{"name":"activate","tier":2,"trust_level":"auto",` +
			`"description":"Press a key of the calculator.","parameters":[{"name":"role","type":"string"},{"name":"name","type":"string"}]}],"signature":""}`
		if err := os.WriteFile(src, []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		w.mustPCPCTL("manifest", "sign", "--key", w.keyPrefix+".key", "--app", appID, "-o", signed, src)
		raw, err := os.ReadFile(signed)
		if err != nil {
			t.Fatal(err)
		}
		serve := false
		if _, err := agent.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: appID, Manifest: raw, Serve: &serve}); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{"6", "×", "7", "="} {
			res, err := agent.InvokeCapability(ctx, &api.InvokeCapabilityParams{CapabilityID: appID + ".activate", AppID: appID,
				Source: api.SourceSystemIntelligence, Params: json.RawMessage(`{"role":"push button","name":"` + key + `"}`)})
			if err != nil || res.Status != api.StatusSuccess {
				t.Fatalf("press %s as %s: %+v, %v", key, appID, res, err)
			}
		}
		poll("the calculator's display", displayShows("42"))
	})

	t.Run("calculator: 2 + 3 = 5, over MCP", func(t *testing.T) {
		// The Go SDK's MCP client on pcpd's mcp.sock: pcp_search learns the
		// calculator's window, pcp_elements reads its tree, pcp_act presses
		// a key by element id and the others by target.
		conn, err := client.DialMCP(ctx, filepath.Join(filepath.Dir(w.socket), "mcp.sock"))
		if err != nil {
			t.Fatal(err)
		}
		cs, err := mcpsdk.NewClient(&mcpsdk.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcpsdk.IOTransport{Reader: conn, Writer: conn}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		tool := func(name string, args map[string]any) []byte {
			t.Helper()
			res, err := cs.CallTool(ctx, &mcpsdk.CallToolParams{Name: name, Arguments: args})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			out, _ := json.Marshal(res.StructuredContent)
			if res.IsError {
				t.Fatalf("%s: error result %s", name, out)
			}
			return out
		}
		if out := tool("pcp_search", map[string]any{"query": "calculator"}); !strings.Contains(string(out), `"surfaces":["`+calc+`/1"]`) {
			t.Fatalf("pcp_search: %s, want the calculator's window", out)
		}
		var tree struct{ Root api.Element }
		json.Unmarshal(tool("pcp_elements", map[string]any{"surface_id": calc + "/1", "max_depth": 64, "format": "json"}), &tree)
		var two string
		var find func(e *api.Element)
		find = func(e *api.Element) {
			// GTK 4's calculator labels its keys "2 2" (name and
			// description).
			if f := strings.Fields(e.Label); e.Role == "push button" && len(f) > 0 && f[0] == "2" && two == "" {
				two = e.ID
			}
			for i := range e.Children {
				find(&e.Children[i])
			}
		}
		find(&tree.Root)
		if two == "" {
			t.Fatalf("no push button \"2\" in the calculator's tree: %.2000s", tool("pcp_elements", map[string]any{"surface_id": calc + "/1", "max_depth": 64}))
		}
		if text := tool("pcp_elements", map[string]any{"surface_id": calc + "/1", "max_depth": 64}); !strings.Contains(string(text), `[`+two+`]`) {
			t.Errorf("the compact tree lacks the button: %.300s", text)
		}
		tool("pcp_act", map[string]any{"surface_id": calc + "/1", "element_id": two, "action": "activate"})
		for _, key := range []string{"+", "3", "="} {
			tool("pcp_act", map[string]any{"surface_id": calc + "/1", "action": "activate", "target": map[string]any{"role": "push button", "name": key}})
		}
		poll("the calculator's display", displayShows("5"))
	})

	t.Run("calculator: 4 + 3 = 7, from one scomp eval", func(t *testing.T) {
		// One program on pcpd's scomp.sock finds the calculator's window
		// in the session context, reads its tree, presses a key by
		// element id and the others by target: the Tier 2 reach of an
		// eval, each call a core call of its own.
		sc, err := client.DialScomp(ctx, filepath.Join(filepath.Dir(w.socket), "scomp.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		code := `const c = await sessionContext();
const sid = c.active_surfaces.find((s) => s.startsWith("` + calc + `/"));
const tree = await queryElements({surface_id: sid});
let four = null;
const find = (e) => {
  if (four === null && e.role === "push button" && e.label.split(" ")[0] === "4") four = e.id;
  (e.children ?? []).forEach(find);
};
find(tree.root);
await act({surface_id: sid, action: "activate", element_id: four});
for (const key of ["+", "3", "="]) {
  await act({surface_id: sid, action: "activate", target: {role: "push button", name: key}});
}
[sid, four !== null]`
		v, err := sc.Eval(ctx, code)
		if err != nil {
			t.Fatalf("the eval: %v", err)
		}
		if want := `["` + calc + `/1",true]`; string(v) != want {
			t.Fatalf("the eval: %s, want %s", v, want)
		}
		poll("the calculator's display", displayShows("7"))
	})

	t.Run("pcpctl capture: the screen as PNG through a file descriptor", func(t *testing.T) {
		// system.capture on the X11 platform adapter; the PNG crosses the
		// agent socket as a sealed memfd, and pcpctl writes it out.
		out := filepath.Join(w.dir, "screen.png")
		r := w.mustPCPCTL("capture", "-o", out)
		f, err := os.Open(out)
		if err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		defer f.Close()
		img, err := png.Decode(f)
		if err != nil {
			t.Fatalf("the capture is not a PNG: %v", err)
		}
		b := img.Bounds()
		// The 1280x1024 screen scaled to at most 1.15 megapixels.
		if b.Dx()*b.Dy() > 1150000 || b.Dx() < 1100 || !strings.Contains(r.stdout, "scale 0.9") {
			t.Fatalf("capture %dx%d, %s", b.Dx(), b.Dy(), r.stdout)
		}
		colours := map[[3]uint32]bool{}
		for y := b.Min.Y; y < b.Max.Y; y += 7 {
			for x := b.Min.X; x < b.Max.X; x += 7 {
				r, g, bl, _ := img.At(x, y).RGBA()
				colours[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			}
		}
		if len(colours) < 16 {
			t.Fatalf("the capture holds %d colours: blank", len(colours))
		}
	})

	// capturePNG decodes a capture's PNG and checks it has the size its
	// data says and is not blank.
	capturePNG := func(t *testing.T, raw []byte, data json.RawMessage) {
		t.Helper()
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("the capture is not a PNG: %v", err)
		}
		var d struct{ Width, Height int }
		json.Unmarshal(data, &d)
		b := img.Bounds()
		if b.Dx() != d.Width || b.Dy() != d.Height || d.Width == 0 {
			t.Fatalf("the PNG is %dx%d, its data says %dx%d", b.Dx(), b.Dy(), d.Width, d.Height)
		}
		colours := map[[3]uint32]bool{}
		for y := b.Min.Y; y < b.Max.Y; y += 5 {
			for x := b.Min.X; x < b.Max.X; x += 5 {
				r, g, bl, _ := img.At(x, y).RGBA()
				colours[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
			}
		}
		if len(colours) < 16 {
			t.Fatalf("the capture holds %d colours: blank", len(colours))
		}
	}

	t.Run("framed: the screen capture through a file descriptor", func(t *testing.T) {
		// system.capture over the framed stream: the PNG comes as a sealed
		// memfd passed with the ExecuteResponse frame; inline on request.
		for _, mode := range []string{api.AttachmentsFD, api.AttachmentsInline} {
			res, err := framed.ExecuteRequest(ctx, &api.ExecuteRequest{Capability: "system.capture", Params: json.RawMessage(`{"max_long_edge":640}`), Attachments: mode})
			if err != nil {
				t.Fatalf("mode %q: %v", mode, err)
			}
			if len(res.Attachments) != 1 || res.Attachments[0].Name != "image" || res.Attachments[0].MediaType != "image/png" {
				t.Fatalf("mode %q: attachments %+v", mode, res.Attachments)
			}
			capturePNG(t, res.Attachments[0].Data, res.Data)
		}
		// pcpctl --framed capture writes the PNG it received so.
		out := filepath.Join(w.dir, "framed.png")
		r := w.mustPCPCTL("--framed", "capture", "--no-wait", "--max-long-edge", "640", "-o", out)
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatalf("%v: %v", r, err)
		}
		img, err := png.Decode(bytes.NewReader(raw))
		if err != nil || img.Bounds().Dx() != 640 || !strings.Contains(r.stdout, "640x") {
			t.Fatalf("pcpctl --framed capture: %v, %s", err, r.stdout)
		}
	})

	t.Run("scomp: an eval captures the screen and hands the PNG back", func(t *testing.T) {
		sc, err := client.DialScomp(ctx, filepath.Join(filepath.Dir(w.socket), "scomp.sock"))
		if err != nil {
			t.Fatal(err)
		}
		defer sc.Close()
		v, err := sc.Eval(ctx, `const r = await system_capture({max_long_edge: 640});
const a = r.attachments.find((a) => a.media_type === "image/png");
({data: r.data, size: a.size, png: a.data})`)
		if err != nil {
			t.Fatalf("the eval: %v", err)
		}
		var got struct {
			Data json.RawMessage
			Size int
			PNG  string
		}
		if err := json.Unmarshal(v, &got); err != nil {
			t.Fatal(err)
		}
		raw, err := base64.StdEncoding.DecodeString(got.PNG)
		if err != nil || len(raw) != got.Size {
			t.Fatalf("the PNG handed back: %d bytes of %d, %v", len(raw), got.Size, err)
		}
		capturePNG(t, raw, got.Data)
	})

	t.Run("every execution is on the audit chain", func(t *testing.T) {
		var tail api.AuditTailResult
		w.pcpctlJSON(&tail, "audit", "tail", "-n", "50")
		routes := 0
		for _, e := range tail.Entries {
			var detail struct{ Route string }
			json.Unmarshal(e.Detail, &detail)
			if e.Kind == "invoke" && detail.Route == "accessibility:atspi" {
				routes++
			}
		}
		if routes < 9 {
			t.Errorf("%d audit entries with route accessibility:atspi, want every execution", routes)
		}
		if v := w.auditVerify(); !v.OK {
			t.Fatalf("audit chain: %+v", v)
		}
	})
}

func lenOf(p *[]api.ElementInfo) int {
	if p == nil {
		return 0
	}
	return len(*p)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// BenchmarkDesktopElementTree is spec 001's ElementTree of
// gtk3-widget-factory (about 260 nodes) through pcpd, over the framed
// face from another process, beside a pyatspi walk of the same app in
// the same run (Debian's python3-pyatspi, timed by Python's clock).
//
//	cold: each op restarts pcpd (not timed) and times its first
//	      ElementTree: nothing cached, the adapter connects and fetches
//	warm: ElementTree again and again on one pcpd, its cache kept current
//	      by AT-SPI2 events
//
// Both report the node counts of the two readers, pyatspi's time, and
// the ratio pyatspi / pcpd.
func BenchmarkDesktopElementTree(b *testing.B) {
	d, err := testkit.StartDesktop(true)
	if err != nil {
		b.Fatalf("the headless desktop did not start: %v", err)
	}
	b.Cleanup(d.Stop)
	if err := d.WaitApps(60*time.Second, "gtk3-widget-factory"); err != nil {
		b.Fatal(err)
	}
	const app = "atspi.gtk3-widget-factory"
	// pyatspi: the first walk of a fresh process, the median of three.
	var pyMS []float64
	var pyNodes int
	for range 3 {
		n, ms, err := testkit.PyatspiWalk(d.Env, "gtk3-widget-factory", "full", 1)
		if err != nil {
			b.Fatal(err)
		}
		pyNodes, pyMS = n, append(pyMS, ms[0])
	}
	slices.Sort(pyMS)
	py := pyMS[1]

	w := newWorld(b)
	w.env = append(w.env, "DISPLAY="+d.Vars["DISPLAY"], "DBUS_SESSION_BUS_ADDRESS="+d.Vars["DBUS_SESSION_BUS_ADDRESS"])
	w.pcpdArgs = []string{"--atspi-bus", d.Vars["AT_SPI_BUS_ADDRESS"]}
	ctx := context.Background()
	tree := func(fc *client.Framed) int {
		var reg api.RegistryResponse
		if _, err := fc.Request(ctx, frame.RegistryQuery, &api.RegistryQuery{Kind: api.KindElementTree, AppID: app}, &reg); err != nil {
			b.Fatal(err)
		}
		return lenOf(reg.Elements)
	}
	report := func(b *testing.B, perOp time.Duration, nodes int) {
		ms := float64(perOp) / float64(time.Millisecond)
		b.ReportMetric(ms, "ms/tree")
		b.ReportMetric(float64(nodes), "nodes")
		b.ReportMetric(float64(pyNodes), "pyatspi_nodes")
		b.ReportMetric(py, "pyatspi_ms")
		b.ReportMetric(py/ms, "x_vs_pyatspi")
	}

	b.Run("cold", func(b *testing.B) {
		var total time.Duration
		nodes := 0
		for range b.N {
			b.StopTimer()
			w.startPCPD()
			fc, err := client.DialFramed(ctx, w.socket)
			if err != nil {
				b.Fatal(err)
			}
			// Wait until the adapter is connected, so that what is timed
			// is the fetch and not the daemon's start.
			for {
				h, err := w.healthOf(ctx)
				if err == nil && len(h.Adapters) > 0 && h.Adapters[0].Status == api.HealthOK {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			b.StartTimer()
			t0 := time.Now()
			nodes = tree(fc)
			total += time.Since(t0)
			b.StopTimer()
			fc.Close()
			w.stop(w.pcpd, syscall.SIGTERM)
		}
		report(b, total/time.Duration(b.N), nodes)
	})
	b.Run("warm", func(b *testing.B) {
		w.startPCPD()
		b.Cleanup(func() { w.stop(w.pcpd, syscall.SIGTERM) })
		fc, err := client.DialFramed(ctx, w.socket)
		if err != nil {
			b.Fatal(err)
		}
		defer fc.Close()
		tree(fc)
		nodes := 0
		b.ResetTimer()
		t0 := time.Now()
		for range b.N {
			nodes = tree(fc)
		}
		elapsed := time.Since(t0)
		b.StopTimer()
		report(b, elapsed/time.Duration(b.N), nodes)
	})
}

// healthOf asks the daemon's health over JSON-RPC.
func (w *world) healthOf(ctx context.Context) (*api.HealthResult, error) {
	c, err := client.Dial(ctx, w.socket, client.Options{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Health(ctx)
}

// desktopPCPD starts pcpd on desktop d with the policy file policy, and
// an agent's client of it, both ended with the test.
func desktopPCPD(t *testing.T, d *testkit.Desktop, policy string) (*world, *client.Client) {
	t.Helper()
	w := newWorld(t)
	w.env = append(w.env, "DISPLAY="+d.Vars["DISPLAY"], "DBUS_SESSION_BUS_ADDRESS="+d.Vars["DBUS_SESSION_BUS_ADDRESS"])
	if err := os.WriteFile(filepath.Join(w.config, "pcp", "policy.toml"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	w.pcpdArgs = []string{"--atspi-bus", d.Vars["AT_SPI_BUS_ADDRESS"]}
	w.startPCPD()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	agent, err := client.Dial(ctx, w.socket, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { agent.Close() })
	return w, agent
}
