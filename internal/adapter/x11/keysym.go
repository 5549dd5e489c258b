package x11

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Keysyms of the keys a chord names, by their X11 names (keysymdef.h) and
// a few common aliases. Names are matched case-insensitively.
var namedKeysyms = map[string]uint32{
	"return": 0xff0d, "enter": 0xff0d, "tab": 0xff09, "escape": 0xff1b, "esc": 0xff1b,
	"backspace": 0xff08, "delete": 0xffff, "del": 0xffff, "insert": 0xff63,
	"home": 0xff50, "end": 0xff57, "left": 0xff51, "up": 0xff52, "right": 0xff53, "down": 0xff54,
	"page_up": 0xff55, "pageup": 0xff55, "prior": 0xff55, "page_down": 0xff56, "pagedown": 0xff56, "next": 0xff56,
	"space": 0x20, "menu": 0xff67, "print": 0xff61, "pause": 0xff13,
	"caps_lock": 0xffe5, "num_lock": 0xff7f, "scroll_lock": 0xff14,
	"kp_enter": 0xff8d, "plus": '+', "minus": '-', "comma": ',', "period": '.',
	"f1": 0xffbe, "f2": 0xffbf, "f3": 0xffc0, "f4": 0xffc1, "f5": 0xffc2, "f6": 0xffc3,
	"f7": 0xffc4, "f8": 0xffc5, "f9": 0xffc6, "f10": 0xffc7, "f11": 0xffc8, "f12": 0xffc9,
}

// Modifier keysyms, the left keys.
const (
	ksShift   = 0xffe1
	ksControl = 0xffe3
	ksAlt     = 0xffe9
	ksSuper   = 0xffeb
)

var modifierNames = map[string]uint32{
	"ctrl": ksControl, "control": ksControl, "shift": ksShift, "alt": ksAlt, "meta": ksAlt,
	"super": ksSuper, "win": ksSuper, "cmd": ksSuper,
}

// maxChordKeys bounds a chord's keys.
const maxChordKeys = 8

// chord is a parsed key chord: modifiers held (keysyms), then key.
type chord struct {
	mods []uint32
	key  uint32
}

// parseChord parses "ctrl+s", "ctrl+shift+Tab", "Return", "+", "ctrl++":
// modifiers and one key joined by '+', the key last. A key is a keysym
// name, one character, or "0x" and a hexadecimal keysym.
func parseChord(s string) (chord, error) {
	var c chord
	if s == "" {
		return c, fmt.Errorf("empty key chord")
	}
	var parts []string
	// A trailing "+" after a "+" is the plus key: "ctrl++".
	if strings.HasSuffix(s, "++") {
		parts = append(strings.Split(strings.TrimSuffix(s, "++"), "+"), "+")
	} else if s == "+" {
		parts = []string{"+"}
	} else {
		parts = strings.Split(s, "+")
	}
	if len(parts) > maxChordKeys {
		return c, fmt.Errorf("key chord %q: more than %d keys", s, maxChordKeys)
	}
	for i, p := range parts {
		if p == "" {
			return c, fmt.Errorf("key chord %q: empty key", s)
		}
		last := i == len(parts)-1
		if m, ok := modifierNames[strings.ToLower(p)]; ok && !last {
			c.mods = append(c.mods, m)
			continue
		}
		if !last {
			return c, fmt.Errorf("key chord %q: %q is not a modifier", s, p)
		}
		ks, err := keysymOf(p)
		if err != nil {
			return c, fmt.Errorf("key chord %q: %w", s, err)
		}
		c.key = ks
	}
	return c, nil
}

// keysymOf is the keysym of a key name, a modifier name, a single
// character or a "0x..." keysym.
func keysymOf(name string) (uint32, error) {
	if ks, ok := namedKeysyms[strings.ToLower(name)]; ok {
		return ks, nil
	}
	if ks, ok := modifierNames[strings.ToLower(name)]; ok {
		return ks, nil
	}
	if r, n := utf8.DecodeRuneInString(name); n == len(name) && r != utf8.RuneError {
		return runeKeysym(r), nil
	}
	if h, ok := strings.CutPrefix(strings.ToLower(name), "0x"); ok && len(h) > 0 && len(h) <= 8 {
		var v uint32
		if _, err := fmt.Sscanf(h, "%x", &v); err == nil && v != 0 {
			return v, nil
		}
	}
	return 0, fmt.Errorf("unknown key %q", name)
}

// runeKeysym is the keysym that types r: Latin-1 characters are their own
// keysyms, control characters the function keys, every other character
// its Unicode keysym (0x1000000 + code point).
func runeKeysym(r rune) uint32 {
	switch {
	case r == '\n' || r == '\r':
		return 0xff0d
	case r == '\t':
		return 0xff09
	case r == '\b':
		return 0xff08
	case r >= 0x20 && r <= 0x7e, r >= 0xa0 && r <= 0xff:
		return uint32(r)
	}
	return 0x1000000 + uint32(r)
}

// legacyKeysyms are keysyms outside Latin-1 that keymaps carry for
// characters with a Unicode keysym too.
var legacyKeysyms = map[rune]uint32{'€': 0x20ac}

// keysymRune is the character keysym ks types, or -1.
func keysymRune(ks uint32) rune {
	switch {
	case ks >= 0x20 && ks <= 0x7e, ks >= 0xa0 && ks <= 0xff:
		return rune(ks)
	case ks >= 0x1000100 && ks <= 0x110ffff:
		return rune(ks - 0x1000000)
	}
	for r, l := range legacyKeysyms {
		if l == ks {
			return r
		}
	}
	return -1
}
