package x11

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// The tests share one desktop (Xvfb 1280x1024, openbox, the GTK apps).
var desk *testkit.Desktop

func TestMain(m *testing.M) {
	d, err := testkit.StartDesktop(true)
	if err != nil {
		fmt.Fprintln(os.Stderr, "x11 tests: the desktop did not start:", err)
		os.Exit(1)
	}
	desk = d
	// The apps map their windows, and take the focus, as they come up:
	// the tests start once they have.
	if err := waitClasses(d.Vars["DISPLAY"], "Gtk3-widget-factory", "gnome-calculator"); err != nil {
		fmt.Fprintln(os.Stderr, "x11 tests:", err)
		d.Stop()
		os.Exit(1)
	}
	code := m.Run()
	d.Stop()
	os.Exit(code)
}

func waitClasses(display string, classes ...string) error {
	c, err := Open(display, nil)
	if err != nil {
		return err
	}
	defer c.Close()
	n := 0
	err = waitSurfaces(c, 60*time.Second, func(all []*Surface) bool {
		n = 0
		for _, want := range classes {
			for _, s := range all {
				if s.Class == want && s.Mapped {
					n++
					break
				}
			}
		}
		return n == len(classes)
	})
	if err != nil {
		return fmt.Errorf("windows of %v not all mapped: %d of them: %w", classes, n, err)
	}
	return nil
}

// waitSurfaces calls done with the display's surfaces now and after each
// change Watch reports, until it returns true or timeout passes.
func waitSurfaces(c *Conn, timeout time.Duration, done func([]*Surface) bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	events := c.Watch(ctx) // before the first look: no change is missed
	for {
		all, err := c.Surfaces(ctx)
		if err != nil {
			return err
		}
		if done(all) {
			return nil
		}
		select {
		case _, ok := <-events:
			if !ok {
				return ctx.Err()
			}
		case <-ctx.Done():
			return fmt.Errorf("not within %v", timeout)
		}
	}
}

func open(t testing.TB) *Conn {
	t.Helper()
	c, err := Open(desk.Vars["DISPLAY"], nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitEvent waits for an event that match accepts.
func waitEvent(t testing.TB, ch <-chan Event, what string, match func(Event) bool) Event {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed while waiting for %s", what)
			}
			if match(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("no %s event within 20s", what)
		}
	}
}

// startXterm starts an xterm titled title running the shell command
// script (none: no command) and waits for its window and, with a command,
// for the command to have started: xterm discards what is typed before
// its child has set the terminal up. It returns the window and the app.
func startXterm(t testing.TB, c *Conn, title string, script string) (*Surface, *testkit.App) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev := c.Watch(ctx)
	args := []string{"-title", title, "-u8"}
	ready := ""
	if script != "" {
		dir, err := os.MkdirTemp(desk.Dir, "xterm")
		if err != nil {
			t.Fatal(err)
		}
		ready = filepath.Join(dir, "ready")
		args = append(args, "-e", "sh", "-c", "touch "+ready+"; "+script)
	}
	app, err := desk.StartApp("xterm", args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Stop)
	pid := app.Cmd.Process.Pid
	e := waitEvent(t, ev, "created "+title, func(e Event) bool {
		return e.Type == EventCreated && e.Surface.PID == pid
	})
	if e.Surface.Title != title {
		t.Errorf("created: got title %q, want %q", e.Surface.Title, title)
	}
	if ready != "" {
		waitFile(t, ready, func(string) bool { return true })
	}
	return e.Surface, app
}

func TestSurfacesComeAndGo(t *testing.T) {
	c := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev := c.Watch(ctx)
	s, app := startXterm(t, c, "pcp-surfaces", "")
	if s.Class != "XTerm" || s.Instance != "xterm" {
		t.Errorf("WM_CLASS: got %q/%q, want xterm/XTerm", s.Instance, s.Class)
	}
	if s.PID != app.Cmd.Process.Pid {
		t.Errorf("pid: got %d, want %d", s.PID, app.Cmd.Process.Pid)
	}
	if s.Width < 100 || s.Height < 100 || s.X < 0 || s.Y < 0 {
		t.Errorf("geometry: got %d,%d %dx%d", s.X, s.Y, s.Width, s.Height)
	}
	all, err := c.Surfaces(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, o := range all {
		found = found || o.Window == s.Window
	}
	if !found {
		t.Errorf("Surfaces does not list %s", s.ID())
	}
	byPID, err := c.ByPID(ctx, app.Cmd.Process.Pid)
	if err != nil || len(byPID) != 1 || byPID[0].Window != s.Window {
		t.Errorf("ByPID: got %v, %v; want [%s]", byPID, err, s.ID())
	}
	// openbox focuses a new window.
	waitEvent(t, ev, "focus_changed to "+s.ID(), func(e Event) bool {
		return e.Type == EventFocusChanged && e.Surface != nil && e.Surface.Window == s.Window
	})
	if a, _ := c.Active(ctx); a == nil || a.Window != s.Window {
		t.Errorf("Active: got %v, want %s", a, s.ID())
	}
	if got, err := c.Surface(ctx, s.Window); err != nil || got.State != StateFocused {
		t.Errorf("Surface: got %+v, %v; want state focused", got, err)
	}
	app.Stop()
	waitEvent(t, ev, "destroyed "+s.ID(), func(e Event) bool { return e.Type == EventDestroyed && e.Surface.Window == s.Window })
	if _, err := c.Surface(ctx, s.Window); !errors.Is(err, api.ErrSurfaceNotFound) {
		t.Errorf("Surface of a closed window: got %v, want SURFACE_NOT_FOUND", err)
	}
}

func TestTitleChanged(t *testing.T) {
	c := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _ := startXterm(t, c, "pcp-title", "exec sh")
	ev := c.Watch(ctx)
	if err := c.Focus(ctx, s.Window, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// xterm sets its title from the OSC 2 sequence.
	if err := c.Type(ctx, "printf '\\033]2;pcp-renamed\\007'\n"); err != nil {
		t.Fatal(err)
	}
	e := waitEvent(t, ev, "title_changed", func(e Event) bool { return e.Type == EventTitleChanged && e.Surface.Window == s.Window })
	if e.Surface.Title != "pcp-renamed" || e.Previous != "pcp-title" {
		t.Errorf("title_changed: got %q (was %q), want pcp-renamed (was pcp-title)", e.Surface.Title, e.Previous)
	}
}

// waitFile waits, on inotify, for path's contents to satisfy want.
func waitFile(t testing.TB, path string, want func(string) bool) string {
	t.Helper()
	return testkit.WaitFile(t, path, 20*time.Second, want)
}

func TestTypeIntoXterm(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	s, _ := startXterm(t, c, "pcp-type", "exec sh")
	if err := c.Focus(ctx, s.Window, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "ok")
	if err := c.Type(ctx, "echo ok > "+file); err != nil {
		t.Fatal(err)
	}
	if err := c.Key(ctx, "Return"); err != nil {
		t.Fatal(err)
	}
	waitFile(t, file, func(s string) bool { return s == "ok\n" })
}

func TestTypeUnicode(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "text")
	s, _ := startXterm(t, c, "pcp-unicode", "exec cat > "+file)
	if err := c.Focus(ctx, s.Window, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	const text = "é€中文 Ünïcödé ß ~!@#$%^&*()_+{}|:\"<>? AZaz09\n"
	if err := c.Type(ctx, text); err != nil {
		t.Fatal(err)
	}
	got := waitFile(t, file, func(s string) bool { return strings.HasSuffix(s, "\n") })
	if got != text {
		t.Errorf("typed: got %q, want %q", got, text)
	}
	// The spare keycodes go back to empty.
	if empty, restored := c.keymapRestored(); !empty {
		select {
		case <-restored:
		case <-time.After(5 * time.Second):
			t.Fatal("the remapped keycodes were not put back within 5s")
		}
	}
	if empty, _ := c.keymapRestored(); !empty {
		t.Fatal("keycodes still remapped after the keymap was restored")
	}
	c2 := open(t)
	for kc := range c2.km.syms {
		for _, ks := range c2.km.syms[kc] {
			if r := keysymRune(ks); r == '中' || r == '€' && ks != 0x20ac {
				t.Errorf("keycode %d still maps keysym 0x%x", kc+int(c2.km.min), ks)
			}
		}
	}
}

func TestKeyChord(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "chord")
	s, _ := startXterm(t, c, "pcp-chord", "exec cat > "+file)
	if err := c.Focus(ctx, s.Window, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// shift+a types A; ctrl+d at the start of a line ends cat.
	for _, k := range []string{"shift+a", "b", "Return", "ctrl+d"} {
		if err := c.Key(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	waitFile(t, file, func(s string) bool { return s == "Ab\n" })
	if err := c.Key(ctx, "ctrl+nosuchkey"); !errors.Is(err, api.ErrInputSimulationFailed) {
		t.Errorf("bad chord: got %v, want INPUT_SIMULATION_FAILED", err)
	}
	if err := c.Click(ctx, -1, 5, 1, 1); !errors.Is(err, api.ErrInputSimulationFailed) {
		t.Errorf("click off screen: got %v, want INPUT_SIMULATION_FAILED", err)
	}
}

func findClass(t *testing.T, c *Conn, class string) *Surface {
	t.Helper()
	var found *Surface
	err := waitSurfaces(c, 20*time.Second, func(all []*Surface) bool {
		for _, s := range all {
			if s.Class == class && s.Mapped {
				found = s
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("no mapped %s window: %v", class, err)
	}
	return found
}

// variance is the variance of the image's luma.
func variance(img image.Image) float64 {
	b := img.Bounds()
	var sum, sq float64
	n := float64(b.Dx() * b.Dy())
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			l := (0.299*float64(r) + 0.587*float64(g) + 0.114*float64(bl)) / 257
			sum += l
			sq += l * l
		}
	}
	m := sum / n
	return sq/n - m*m
}

func TestCaptureWindow(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	s := findClass(t, c, "Gtk3-widget-factory")
	if err := c.Focus(ctx, s.Window, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	shot, err := c.Capture(ctx, s.Window, CaptureOptions{NoScale: true})
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(shot.PNG))
	if err != nil {
		t.Fatal(err)
	}
	w, h := min(s.Width, 1280-s.X), min(s.Height, 1024-s.Y)
	if got := img.Bounds().Size(); got.X != w || got.Y != h || shot.Width != w || shot.Height != h || shot.Scale != 1 {
		t.Errorf("capture size: got %v (shot %dx%d, scale %v), want %dx%d", got, shot.Width, shot.Height, shot.Scale, w, h)
	}
	if v := variance(img); v < 100 {
		t.Errorf("capture looks blank: luma variance %.1f", v)
	}
	if !shot.SHM {
		t.Errorf("Xvfb offers MIT-SHM, but the capture did not use it")
	}
}

func TestCaptureRoot(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	shot, err := c.Capture(ctx, 0, CaptureOptions{NoScale: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(shot.PNG))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Width != 1280 || cfg.Height != 1024 {
		t.Errorf("root capture: got %dx%d, want 1280x1024", cfg.Width, cfg.Height)
	}
	// The default limits: ≤ 1.15 MP, the scale maps back.
	shot, err = c.Capture(ctx, 0, CaptureOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if shot.Width*shot.Height > DefaultMaxPixels || shot.Width > DefaultMaxLongEdge || shot.Scale >= 1 {
		t.Errorf("scaled capture: got %dx%d scale %v", shot.Width, shot.Height, shot.Scale)
	}
	if got := int(float64(shot.Width)/shot.Scale + 0.5); got != 1280 {
		t.Errorf("width / scale: got %d, want 1280", got)
	}
	shot, err = c.Capture(ctx, 0, CaptureOptions{MaxLongEdge: 640})
	if err != nil {
		t.Fatal(err)
	}
	if shot.Width != 640 || shot.Height != 512 || shot.Scale != 0.5 {
		t.Errorf("long edge 640: got %dx%d scale %v, want 640x512 scale 0.5", shot.Width, shot.Height, shot.Scale)
	}
}

func TestCaptureMinimized(t *testing.T) {
	c := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, _ := startXterm(t, c, "pcp-minimized", "")
	ev := c.Watch(ctx)
	if err := c.Iconify(ctx, s.Window); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ev, "minimized", func(e Event) bool {
		return e.Type == EventStateChanged && e.Surface.Window == s.Window && e.Surface.Minimized
	})
	_, err := c.Capture(ctx, s.Window, CaptureOptions{})
	if !errors.Is(err, api.ErrCaptureFailed) {
		t.Fatalf("capture of a minimized window: got %v, want CAPTURE_FAILED", err)
	}
	if r := api.AsError(err).Data; r == nil || !strings.Contains(fmt.Sprint(r), "minimized") {
		t.Errorf("CAPTURE_FAILED data: got %v, want reason minimized", r)
	}
}

// TestNoWindowManager: on a display without a window manager the
// surfaces are the root's mapped children, and focusing one sets the
// input focus.
func TestNoWindowManager(t *testing.T) {
	display := startXvfb(t, "800x600x24")
	c := open2(t, display)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev := c.Watch(ctx)
	cmd := exec.Command("xterm", "-title", "pcp-bare", "-geometry", "40x10+30+40", "-bw", "0")
	cmd.Env = append(os.Environ(), "DISPLAY="+display)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	e := waitEvent(t, ev, "created pcp-bare", func(e Event) bool { return e.Type == EventCreated && e.Surface.Title == "pcp-bare" })
	if e.Surface.X != 30 || e.Surface.Y != 40 || e.Surface.Class != "XTerm" || !e.Surface.Mapped {
		t.Errorf("surface without a window manager: got %+v, want XTerm at 30,40", e.Surface)
	}
	if err := c.Focus(ctx, e.Surface.Window, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if a, _ := c.Active(ctx); a == nil || a.Window != e.Surface.Window {
		t.Errorf("Active: got %v, want %s", a, e.Surface.ID())
	}
	cmd.Process.Kill()
	waitEvent(t, ev, "destroyed pcp-bare", func(x Event) bool { return x.Type == EventDestroyed && x.Surface.Window == e.Surface.Window })
}

// entryScript prints the desktop extents and the text of each of
// gtk3-widget-factory's showing, editable text fields, a line each, read
// with pyatspi: an independent reader of what the typing produced.
const entryScript = `
import pyatspi, sys
app = [a for a in pyatspi.Registry.getDesktop(0) if a is not None and a.name == "gtk3-widget-factory"][0]
def walk(a, depth=0):
    if a is None or depth > 40: return
    st = a.getState()
    if a.getRole() == pyatspi.ROLE_TEXT and st.contains(pyatspi.STATE_EDITABLE) and st.contains(pyatspi.STATE_SHOWING):
        x = a.queryComponent().getExtents(pyatspi.DESKTOP_COORDS)
        t = a.queryText().getText(0, -1).replace("\n", " ")
        sys.stdout.write("%d %d %d %d %d %s\n" % (x.x, x.y, x.width, x.height, st.contains(pyatspi.STATE_FOCUSED), t))
    for i in range(a.childCount):
        walk(a[i], depth+1)
walk(app)
`

type field struct {
	x, y, w, h, focused int
	text                string
}

// entries lists gtk3-widget-factory's editable text fields.
func entries(t *testing.T) []field {
	t.Helper()
	cmd := exec.Command("/usr/bin/python3", "-c", entryScript)
	cmd.Env = append(os.Environ(), desk.Env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("pyatspi: %v\n%s", err, out)
	}
	var fs []field
	for _, line := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		p := strings.SplitN(line, " ", 6)
		if len(p) < 5 {
			continue
		}
		var f field
		fmt.Sscan(strings.Join(p[:5], " "), &f.x, &f.y, &f.w, &f.h, &f.focused)
		if len(p) == 6 {
			f.text = p[5]
		}
		fs = append(fs, f)
	}
	return fs
}

// TestTypeUnicodeGTK types Unicode into gtk3-widget-factory's focused
// entry, over its selected text, and reads it back through AT-SPI2.
func TestTypeUnicodeGTK(t *testing.T) {
	c := open(t)
	ctx := context.Background()
	if err := desk.WaitApps(60*time.Second, "gtk3-widget-factory"); err != nil {
		t.Fatal(err)
	}
	s := findClass(t, c, "Gtk3-widget-factory")
	if err := c.Focus(ctx, s.Window, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var target *field
	for _, f := range entries(t) {
		if f.focused == 1 {
			target = &f
			break
		}
	}
	if target == nil {
		t.Fatal("gtk3-widget-factory has no focused entry")
	}
	// Select the entry's text, then type over it.
	if err := c.Key(ctx, "ctrl+a"); err != nil {
		t.Fatal(err)
	}
	const want = "é€中文 ok"
	if err := c.Type(ctx, want); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		var got []field
		for _, f := range entries(t) {
			if f.x == target.x && f.y == target.y {
				got = append(got, f)
			}
		}
		if len(got) == 1 && got[0].text == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("entry at %d,%d: got %+v, want %q", target.x, target.y, got, want)
		}
	}
}
