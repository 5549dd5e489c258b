// Package x11 is PCP's X11 platform: the top-level windows of an X
// display as surfaces (EWMH, or the window tree without a window
// manager), input through the XTEST extension, and captures through
// MIT-SHM or GetImage. It speaks the X protocol with
// github.com/jezek/xgb; decoding the property values and tables that
// other clients control is this package's own (props.go, fuzzed).
//
// Conn is one connection to a display: Surfaces, Watch, the input
// methods and Capture. Platform (platform.go) puts a Conn behind the
// core's PlatformAdapter (the system and compositor capabilities) and
// Adapter (query.surface of every top-level window).
//
// Concurrency: Conn's methods may be called concurrently. inputMu
// serializes input, which shares the pointer, the keyboard state and the
// keymap; captureMu the shared-memory segment; mu guards the watch state and the subscribers. Lock order:
// inputMu before mu.
package x11

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/shm"
	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"

	"github.com/pcp-dev/pcp/api"
)

// atomNames are the atoms Conn interns at Open.
var atomNames = []string{
	"_NET_CLIENT_LIST", "_NET_ACTIVE_WINDOW", "_NET_WM_NAME", "UTF8_STRING", "_NET_WM_PID",
	"_NET_WM_STATE", "_NET_WM_STATE_HIDDEN", "_NET_WM_STATE_MAXIMIZED_VERT", "_NET_WM_STATE_MAXIMIZED_HORZ",
	"_NET_WM_STATE_FULLSCREEN", "_NET_SUPPORTING_WM_CHECK", "WM_STATE", "WM_CHANGE_STATE", "WM_NAME", "WM_CLASS",
	"_NET_FRAME_EXTENTS",
}

// Conn is a connection to one X display.
type Conn struct {
	xc      *xgb.Conn
	display string
	root    xproto.Window
	width   int
	height  int
	depth   byte
	atoms   map[string]xproto.Atom
	hasShm  bool
	hasTest bool
	log     *slog.Logger

	inputMu sync.Mutex
	km      *keymap // the keymap as last read; guarded by inputMu
	// remapped are the spare keycodes mapped to other keysyms for
	// typing, and restore the timer that puts them back; inputMu.
	remapped map[byte]uint32
	restore  *time.Timer
	// restored is closed, and replaced, each time the remapped keycodes
	// are put back; inputMu.
	restored chan struct{}

	captureMu sync.Mutex
	seg       shmSeg // captureMu

	mu      sync.Mutex
	subs    map[int]chan Event
	nextSub int
	known   map[xproto.Window]*Surface // the last snapshot the watch diffed; mu
	active  xproto.Window              // mu
	// activeKnown: active was a surface at the last snapshot; primed:
	// the first snapshot was taken. mu.
	activeKnown, primed bool
	watched             map[xproto.Window]bool // windows whose PropertyChange we selected; mu

	// kick wakes the rescanner; pendDestroyed, guarded by pendMu, are
	// the windows destroyed since its last rescan; evDone is closed when
	// the event reader ends.
	kick          chan struct{}
	pendMu        sync.Mutex
	pendDestroyed map[xproto.Window]bool
	evDone        chan struct{}
	// keymapStale: the keyboard mapping changed; input rereads it.
	keymapStale atomic.Bool

	done chan struct{}
	wg   sync.WaitGroup
}

// Open connects to display ("" means $DISPLAY). The XTEST extension is
// required for input; MIT-SHM is used for captures when the server has it.
func Open(display string, log *slog.Logger) (*Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	xc, err := xgb.NewConnDisplay(display)
	if err != nil {
		return nil, fmt.Errorf("x11: display %q: %w", display, err)
	}
	setup := xproto.Setup(xc)
	scr := setup.DefaultScreen(xc)
	c := &Conn{xc: xc, display: display, root: scr.Root, width: int(scr.WidthInPixels), height: int(scr.HeightInPixels),
		depth: scr.RootDepth, atoms: map[string]xproto.Atom{}, log: log, subs: map[int]chan Event{},
		known: map[xproto.Window]*Surface{}, watched: map[xproto.Window]bool{}, remapped: map[byte]uint32{}, restored: make(chan struct{}), done: make(chan struct{}),
		kick: make(chan struct{}, 1), pendDestroyed: map[xproto.Window]bool{}, evDone: make(chan struct{})}
	cookies := make([]xproto.InternAtomCookie, len(atomNames))
	for i, n := range atomNames {
		cookies[i] = xproto.InternAtom(xc, false, uint16(len(n)), n)
	}
	for i, ck := range cookies {
		r, err := ck.Reply()
		if err != nil {
			xc.Close()
			return nil, fmt.Errorf("x11: interning %s: %w", atomNames[i], err)
		}
		c.atoms[atomNames[i]] = r.Atom
	}
	if err := xtest.Init(xc); err == nil {
		if _, err := xtest.GetVersion(xc, 2, 2).Reply(); err == nil {
			c.hasTest = true
		}
	}
	if err := shm.Init(xc); err == nil {
		if _, err := shm.QueryVersion(xc).Reply(); err == nil {
			c.hasShm = true
		}
	}
	// Root: the client list, the active window, and top-level windows
	// coming and going (the fallback without a window manager).
	if err := xproto.ChangeWindowAttributesChecked(xc, c.root, xproto.CwEventMask,
		[]uint32{xproto.EventMaskPropertyChange | xproto.EventMaskSubstructureNotify}).Check(); err != nil {
		xc.Close()
		return nil, fmt.Errorf("x11: selecting the root window's events: %w", err)
	}
	if err := c.loadKeymapLocked(); err != nil {
		xc.Close()
		return nil, err
	}
	c.rescan(nil)
	c.wg.Add(2)
	go c.events()
	go c.rescanner()
	return c, nil
}

// Close restores the keymap, stops the watch and closes the connection.
func (c *Conn) Close() error {
	c.inputMu.Lock()
	c.restoreKeymapLocked()
	c.inputMu.Unlock()
	c.detachShm()
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	c.xc.Close()
	c.wg.Wait()
	c.mu.Lock()
	for id, ch := range c.subs {
		close(ch)
		delete(c.subs, id)
	}
	c.mu.Unlock()
	return nil
}

// Info describes the display: its name, the root's size, the extensions.
type Info struct {
	Display       string `json:"display"`
	Width         int    `json:"width"`
	Height        int    `json:"height"`
	XTest         bool   `json:"xtest"`
	MITSHM        bool   `json:"mit_shm"`
	WindowManager string `json:"window_manager,omitempty"`
}

// Info reports the display.
func (c *Conn) Info() Info {
	in := Info{Display: c.display, Width: c.width, Height: c.height, XTest: c.hasTest, MITSHM: c.hasShm}
	if w, ok := c.windowProp(c.root, "_NET_SUPPORTING_WM_CHECK"); ok {
		in.WindowManager = c.title(w)
	}
	return in
}

// sync makes a round trip: every request sent before it has been
// processed by the server when it returns.
func (c *Conn) sync() error {
	_, err := xproto.GetInputFocus(c.xc).Reply()
	return err
}

func inputFailed(reason string, data map[string]any, format string, args ...any) error {
	if data == nil {
		data = map[string]any{}
	}
	data["reason"] = reason
	return api.Errorf(api.CodeInputSimulationFailed, data, format, args...)
}

func captureFailed(reason string, data map[string]any, format string, args ...any) error {
	if data == nil {
		data = map[string]any{}
	}
	data["reason"] = reason
	return api.Errorf(api.CodeCaptureFailed, data, format, args...)
}

// ctxErr returns ctx's error, if it is done.
func ctxErr(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}

func init() {
	// xgb logs to stderr when a display has no authority file, which a
	// local display needs none for.
	xgb.Logger = stdlog.New(io.Discard, "", 0)
}
