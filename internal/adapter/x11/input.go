package x11

import (
	"context"
	"fmt"
	"time"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"
)

// Input through XTEST. Each method sends its events, then makes a round
// trip, so that when it returns the server has delivered them.

// Mouse buttons.
const (
	ButtonLeft   = 1
	ButtonMiddle = 2
	ButtonRight  = 3
)

// MaxTypeLength bounds the characters one Type call types.
const MaxTypeLength = 10000

// MaxScrollSteps bounds the wheel steps of one Scroll call, each way.
const MaxScrollSteps = 100

// remapGrace is how long typing's temporary keycodes stay mapped after
// the last character that used them: a client looks the keymap up when it
// handles the key event, which may be after Type returns.
const remapGrace = 500 * time.Millisecond

func (c *Conn) fake(typ byte, detail byte, x, y int16) {
	xtest.FakeInput(c.xc, typ, detail, 0, c.root, x, y, 0)
}

func (c *Conn) checkInput(ctx context.Context) error {
	if !c.hasTest {
		return inputFailed("no_xtest", nil, "the X server %q has no XTEST extension", c.display)
	}
	return ctxErr(ctx)
}

func (c *Conn) checkPoint(x, y int) error {
	if x < 0 || y < 0 || x >= c.width || y >= c.height {
		return inputFailed("point_off_screen", map[string]any{"x": x, "y": y, "width": c.width, "height": c.height},
			"point (%d,%d) is outside the %dx%d screen", x, y, c.width, c.height)
	}
	return nil
}

func (c *Conn) finish(what string) error {
	if err := c.sync(); err != nil {
		return inputFailed("connection_lost", nil, "%s: %v", what, err)
	}
	return nil
}

// Move moves the pointer to (x, y) in root coordinates.
func (c *Conn) Move(ctx context.Context, x, y int) error {
	if err := c.checkInput(ctx); err != nil {
		return err
	}
	if err := c.checkPoint(x, y); err != nil {
		return err
	}
	c.inputMu.Lock()
	defer c.inputMu.Unlock()
	c.fake(xproto.MotionNotify, 0, int16(x), int16(y))
	return c.finish("move")
}

// Click moves to (x, y) and clicks button count times (2: a double click).
func (c *Conn) Click(ctx context.Context, x, y, button, count int) error {
	if err := c.checkInput(ctx); err != nil {
		return err
	}
	if err := c.checkPoint(x, y); err != nil {
		return err
	}
	if button < 1 || button > 9 {
		return inputFailed("bad_button", map[string]any{"button": button}, "button %d: must be 1 to 9", button)
	}
	if count < 1 || count > 3 {
		return inputFailed("bad_count", map[string]any{"count": count}, "click count %d: must be 1 to 3", count)
	}
	c.inputMu.Lock()
	defer c.inputMu.Unlock()
	c.fake(xproto.MotionNotify, 0, int16(x), int16(y))
	for i := 0; i < count; i++ {
		c.fake(xproto.ButtonPress, byte(button), 0, 0)
		c.fake(xproto.ButtonRelease, byte(button), 0, 0)
	}
	return c.finish("click")
}

// Drag presses button at (x1, y1), moves to (x2, y2) in steps and
// releases it there.
func (c *Conn) Drag(ctx context.Context, x1, y1, x2, y2, button int) error {
	if err := c.checkInput(ctx); err != nil {
		return err
	}
	if err := c.checkPoint(x1, y1); err != nil {
		return err
	}
	if err := c.checkPoint(x2, y2); err != nil {
		return err
	}
	if button < 1 || button > 9 {
		return inputFailed("bad_button", map[string]any{"button": button}, "button %d: must be 1 to 9", button)
	}
	c.inputMu.Lock()
	defer c.inputMu.Unlock()
	c.fake(xproto.MotionNotify, 0, int16(x1), int16(y1))
	c.fake(xproto.ButtonPress, byte(button), 0, 0)
	// Intermediate motion, so toolkits see a drag start past their
	// threshold.
	const steps = 10
	for i := 1; i <= steps; i++ {
		c.fake(xproto.MotionNotify, 0, int16(x1+(x2-x1)*i/steps), int16(y1+(y2-y1)*i/steps))
	}
	c.fake(xproto.ButtonRelease, byte(button), 0, 0)
	return c.finish("drag")
}

// Scroll moves to (x, y) and turns the wheel: dy > 0 down (button 5),
// dy < 0 up (4), dx < 0 left (6), dx > 0 right (7), one click a step.
func (c *Conn) Scroll(ctx context.Context, x, y, dx, dy int) error {
	if err := c.checkInput(ctx); err != nil {
		return err
	}
	if err := c.checkPoint(x, y); err != nil {
		return err
	}
	if dx > MaxScrollSteps || dx < -MaxScrollSteps || dy > MaxScrollSteps || dy < -MaxScrollSteps {
		return inputFailed("too_many_steps", map[string]any{"dx": dx, "dy": dy, "limit": MaxScrollSteps}, "scroll of (%d,%d): at most %d steps each way", dx, dy, MaxScrollSteps)
	}
	c.inputMu.Lock()
	defer c.inputMu.Unlock()
	c.fake(xproto.MotionNotify, 0, int16(x), int16(y))
	wheel := func(n int, neg, pos byte) {
		b := pos
		if n < 0 {
			b, n = neg, -n
		}
		for i := 0; i < n; i++ {
			c.fake(xproto.ButtonPress, b, 0, 0)
			c.fake(xproto.ButtonRelease, b, 0, 0)
		}
	}
	wheel(dy, 4, 5)
	wheel(dx, 6, 7)
	return c.finish("scroll")
}

// loadKeymapLocked reads the keyboard mapping. inputMu is held (or the
// connection is not yet shared).
func (c *Conn) loadKeymapLocked() error {
	s := xproto.Setup(c.xc)
	min, max := byte(s.MinKeycode), byte(s.MaxKeycode)
	r, err := xproto.GetKeyboardMapping(c.xc, xproto.Keycode(min), max-min+1).Reply()
	if err != nil {
		return fmt.Errorf("x11: reading the keyboard mapping: %w", err)
	}
	table := make([]uint32, len(r.Keysyms))
	for i, k := range r.Keysyms {
		table[i] = uint32(k)
	}
	c.km = parseKeymap(min, max, int(r.KeysymsPerKeycode), table)
	return nil
}

// freshKeymapLocked rereads the keymap after a MappingNotify: another
// client (setxkbmap, or this package's own remapping) changed it. The
// keycodes this package remapped stay in c.remapped, to be emptied.
func (c *Conn) freshKeymapLocked() error {
	if !c.keymapStale.Swap(false) {
		return nil
	}
	if err := c.loadKeymapLocked(); err != nil {
		return inputFailed("connection_lost", nil, "%v", err)
	}
	return nil
}

// keyFor finds the keycode and level of keysym ks: in the keymap, or
// among the keycodes typing has remapped. inputMu is held.
func (c *Conn) keyForLocked(ks uint32) (kc byte, level int, ok bool) {
	for k, s := range c.remapped {
		if s == ks {
			return k, 0, true
		}
	}
	if kc, level, ok := c.km.find(ks); ok {
		return kc, level, true
	}
	if r := keysymRune(ks); r >= 0 {
		if l, found := legacyKeysyms[r]; found {
			return c.km.find(l)
		}
	}
	return 0, 0, false
}

func (c *Conn) modifierLocked(ks uint32) (byte, error) {
	kc, _, ok := c.km.find(ks)
	if !ok {
		return 0, inputFailed("no_modifier_key", map[string]any{"keysym": fmt.Sprintf("0x%x", ks)}, "no key of the keymap produces modifier keysym 0x%x", ks)
	}
	return kc, nil
}

// Key presses a chord, "ctrl+s", "ctrl+shift+Tab", "Return": its
// modifiers in order, the key, and releases them in reverse.
func (c *Conn) Key(ctx context.Context, keys string) error {
	if err := c.checkInput(ctx); err != nil {
		return err
	}
	ch, err := parseChord(keys)
	if err != nil {
		return inputFailed("bad_chord", map[string]any{"keys": keys}, "%v", err)
	}
	c.inputMu.Lock()
	defer c.inputMu.Unlock()
	if err := c.freshKeymapLocked(); err != nil {
		return err
	}
	var mods []byte
	for _, m := range ch.mods {
		kc, err := c.modifierLocked(m)
		if err != nil {
			return err
		}
		mods = append(mods, kc)
	}
	kc, level, ok := c.keyForLocked(ch.key)
	if !ok {
		spare, err := c.remapLocked([]uint32{ch.key})
		if err != nil {
			return err
		}
		kc, level = spare[ch.key], 0
	}
	if level == 1 && !containsKS(ch.mods, ksShift) {
		sh, err := c.modifierLocked(ksShift)
		if err != nil {
			return err
		}
		mods = append(mods, sh)
	}
	for _, m := range mods {
		c.fake(xproto.KeyPress, m, 0, 0)
	}
	c.fake(xproto.KeyPress, kc, 0, 0)
	c.fake(xproto.KeyRelease, kc, 0, 0)
	for i := len(mods) - 1; i >= 0; i-- {
		c.fake(xproto.KeyRelease, mods[i], 0, 0)
	}
	c.scheduleRestoreLocked()
	return c.finish("key")
}

func containsKS(l []uint32, ks uint32) bool {
	for _, v := range l {
		if v == ks {
			return true
		}
	}
	return false
}

// Type types text, any characters: those the keymap lacks are typed on
// spare keycodes mapped to their keysyms for the duration.
func (c *Conn) Type(ctx context.Context, text string) error {
	if err := c.checkInput(ctx); err != nil {
		return err
	}
	runes := []rune(text)
	if len(runes) > MaxTypeLength {
		return inputFailed("text_too_long", map[string]any{"length": len(runes), "limit": MaxTypeLength}, "text of %d characters: at most %d", len(runes), MaxTypeLength)
	}
	c.inputMu.Lock()
	defer c.inputMu.Unlock()
	if err := c.freshKeymapLocked(); err != nil {
		return err
	}
	shift, err := c.modifierLocked(ksShift)
	if err != nil {
		return err
	}
	for start := 0; start < len(runes); {
		if err := ctxErr(ctx); err != nil {
			return err
		}
		// The longest run from start whose missing keysyms fit the
		// free spare keycodes.
		free := len(c.km.spare(255))
		var missing []uint32
		seen := map[uint32]bool{}
		end := start
		for ; end < len(runes); end++ {
			ks := runeKeysym(runes[end])
			if _, _, ok := c.keyForLocked(ks); ok || seen[ks] {
				continue
			}
			if len(missing) >= free {
				break
			}
			seen[ks] = true
			missing = append(missing, ks)
		}
		if end == start {
			// The next character needs a keycode and none is free.
			if len(c.remapped) == 0 {
				return inputFailed("no_spare_keycode", map[string]any{"character": string(runes[start])},
					"the keymap has no spare keycode to type %q", runes[start])
			}
			if err := c.releaseRemapsLocked(ctx); err != nil {
				return err
			}
			continue
		}
		if len(missing) > 0 {
			if _, err := c.remapLocked(missing); err != nil {
				return err
			}
		}
		for _, r := range runes[start:end] {
			kc, level, ok := c.keyForLocked(runeKeysym(r))
			if !ok {
				return inputFailed("no_key", map[string]any{"character": string(r)}, "no key types %q", r)
			}
			if level == 1 {
				c.fake(xproto.KeyPress, shift, 0, 0)
			}
			c.fake(xproto.KeyPress, kc, 0, 0)
			c.fake(xproto.KeyRelease, kc, 0, 0)
			if level == 1 {
				c.fake(xproto.KeyRelease, shift, 0, 0)
			}
		}
		start = end
	}
	c.scheduleRestoreLocked()
	return c.finish("type")
}

// remapLocked maps keysyms onto spare keycodes (keeping those already
// mapped) and waits until the server has applied the change, so clients
// receive the MappingNotify before the key events that follow. It
// returns each keysym's keycode.
func (c *Conn) remapLocked(keysyms []uint32) (map[uint32]byte, error) {
	out := map[uint32]byte{}
	var need []uint32
	for _, ks := range keysyms {
		if kc, _, ok := c.keyForLocked(ks); ok {
			out[ks] = kc
			continue
		}
		need = append(need, ks)
	}
	if len(need) == 0 {
		return out, nil
	}
	free := c.km.spare(len(need))
	if len(free) < len(need) {
		return nil, inputFailed("no_spare_keycode", map[string]any{"needed": len(need), "spare": len(free)},
			"the keymap has %d spare keycodes, %d are needed", len(free), len(need))
	}
	per := c.km.per
	if per < 2 {
		per = 2
	}
	for i, ks := range need {
		kc := free[i]
		syms := make([]xproto.Keysym, per)
		syms[0], syms[1] = xproto.Keysym(ks), xproto.Keysym(ks)
		if err := xproto.ChangeKeyboardMappingChecked(c.xc, 1, xproto.Keycode(kc), byte(per), syms).Check(); err != nil {
			return nil, inputFailed("remap_failed", map[string]any{"keycode": kc}, "mapping keycode %d: %v", kc, err)
		}
		row := c.km.at(kc)
		for j := range row {
			row[j] = 0
		}
		if len(row) >= 2 {
			row[0], row[1] = ks, ks
		}
		c.remapped[kc] = ks
		out[ks] = kc
	}
	return out, nil
}

// releaseRemapsLocked frees the remapped keycodes for reuse, after the
// grace the clients need to look up the keys just typed on them.
func (c *Conn) releaseRemapsLocked(ctx context.Context) error {
	if err := c.sync(); err != nil {
		return inputFailed("connection_lost", nil, "type: %v", err)
	}
	t := time.NewTimer(remapGrace)
	select {
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	case <-t.C:
	}
	c.restoreKeymapLocked()
	return nil
}

// scheduleRestoreLocked puts the remapped keycodes back remapGrace from
// now, unless more typing uses them first.
func (c *Conn) scheduleRestoreLocked() {
	if len(c.remapped) == 0 {
		return
	}
	if c.restore != nil {
		c.restore.Stop()
	}
	c.restore = time.AfterFunc(remapGrace, func() {
		c.inputMu.Lock()
		defer c.inputMu.Unlock()
		c.restoreKeymapLocked()
	})
}

// restoreKeymapLocked empties the keycodes typing remapped.
func (c *Conn) restoreKeymapLocked() {
	if c.restore != nil {
		c.restore.Stop()
		c.restore = nil
	}
	per := c.km.per
	if per < 2 {
		per = 2
	}
	for kc := range c.remapped {
		xproto.ChangeKeyboardMapping(c.xc, 1, xproto.Keycode(kc), byte(per), make([]xproto.Keysym, per))
		for j, row := 0, c.km.at(kc); j < len(row); j++ {
			row[j] = 0
		}
		delete(c.remapped, kc)
	}
	c.sync()
	close(c.restored)
	c.restored = make(chan struct{})
}

// keymapRestored returns whether no keycode is remapped now, and else
// the channel closed when they are put back.
func (c *Conn) keymapRestored() (bool, <-chan struct{}) {
	c.inputMu.Lock()
	defer c.inputMu.Unlock()
	return len(c.remapped) == 0, c.restored
}

// clientMessage sends a 32-bit client message about window w to the root,
// as EWMH and ICCCM ask window managers to be sent.
func (c *Conn) clientMessage(w xproto.Window, typ string, data ...uint32) error {
	d := make([]uint32, 5)
	copy(d, data)
	ev := xproto.ClientMessageEvent{Format: 32, Window: w, Type: c.atoms[typ], Data: xproto.ClientMessageDataUnionData32New(d)}
	return xproto.SendEventChecked(c.xc, false, c.root, xproto.EventMaskSubstructureRedirect|xproto.EventMaskSubstructureNotify, string(ev.Bytes())).Check()
}

// Focus activates window w: a _NET_ACTIVE_WINDOW request to the window
// manager, or, without one, SetInputFocus and raising it. It waits up to
// timeout for the window to be the active one.
func (c *Conn) Focus(ctx context.Context, w uint32, timeout time.Duration) error {
	s, err := c.Surface(ctx, w)
	if err != nil {
		return err
	}
	if s.Minimized || !s.Mapped {
		xproto.MapWindow(c.xc, xproto.Window(w))
	}
	if _, wm := c.windowProp(c.root, "_NET_SUPPORTING_WM_CHECK"); wm {
		// Source 2: a pager, which window managers obey.
		if err := c.clientMessage(xproto.Window(w), "_NET_ACTIVE_WINDOW", 2, 0, 0); err != nil {
			return inputFailed("focus_failed", map[string]any{"surface_id": SurfaceID(w)}, "activating %s: %v", SurfaceID(w), err)
		}
	} else {
		xproto.ConfigureWindow(c.xc, xproto.Window(w), xproto.ConfigWindowStackMode, []uint32{xproto.StackModeAbove})
		xproto.SetInputFocus(c.xc, xproto.InputFocusPointerRoot, xproto.Window(w), 0)
	}
	deadline := time.Now().Add(timeout)
	for {
		if uint32(c.activeWindow()) == w {
			return nil
		}
		if time.Now().After(deadline) {
			return inputFailed("focus_refused", map[string]any{"surface_id": SurfaceID(w)}, "%s did not become the active window within %v", SurfaceID(w), timeout)
		}
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Iconify asks the window manager to minimize window w (ICCCM
// WM_CHANGE_STATE, IconicState).
func (c *Conn) Iconify(ctx context.Context, w uint32) error {
	if _, err := c.Surface(ctx, w); err != nil {
		return err
	}
	if err := c.clientMessage(xproto.Window(w), "WM_CHANGE_STATE", 3); err != nil {
		return inputFailed("iconify_failed", map[string]any{"surface_id": SurfaceID(w)}, "minimizing %s: %v", SurfaceID(w), err)
	}
	return nil
}
