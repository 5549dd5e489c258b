package x11

import (
	"encoding/binary"
	"strings"
	"unicode/utf8"
)

// Decoders of the property values and reply tables this package reads.
// Every input comes from the X server or from another client (any client
// may set any property on its window), so each decoder accepts any bytes:
// it bounds what it returns and never panics. They are fuzzed
// (props_fuzz_test.go).

// maxTitle bounds a decoded title, in bytes.
const maxTitle = 4096

// maxListItems bounds a decoded list of atoms or windows.
const maxListItems = 65536

// parseText decodes a STRING (Latin-1) or UTF8_STRING property value to
// valid UTF-8, up to its first NUL, at most maxTitle bytes. utf8Value says
// the value is UTF8_STRING: its invalid sequences become U+FFFD.
func parseText(v []byte, utf8Value bool) string {
	if i := indexNUL(v); i >= 0 {
		v = v[:i]
	}
	var b strings.Builder
	if utf8Value {
		for len(v) > 0 && b.Len() < maxTitle {
			r, n := utf8.DecodeRune(v)
			v = v[n:]
			if r == utf8.RuneError && n == 1 {
				r = utf8.RuneError
			}
			b.WriteRune(r)
		}
	} else {
		for _, c := range v {
			if b.Len() >= maxTitle {
				break
			}
			b.WriteRune(rune(c))
		}
	}
	return b.String()
}

func indexNUL(v []byte) int {
	for i, c := range v {
		if c == 0 {
			return i
		}
	}
	return -1
}

// parseWMClass decodes WM_CLASS: two NUL-terminated Latin-1 strings,
// the instance then the class. A missing part is "".
func parseWMClass(v []byte) (instance, class string) {
	inst, rest := v, []byte(nil)
	if i := indexNUL(v); i >= 0 {
		inst, rest = v[:i], v[i+1:]
	}
	return parseText(inst, false), parseText(rest, false)
}

// parseCard32s decodes a format-32 property value (ATOM, WINDOW,
// CARDINAL lists) in the server's byte order, little-endian here as xgb
// speaks it. A value of another format, or a trailing partial item, is
// ignored; at most maxListItems items are returned.
func parseCard32s(v []byte, format byte) []uint32 {
	if format != 32 {
		return nil
	}
	n := len(v) / 4
	if n > maxListItems {
		n = maxListItems
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(v[4*i:])
	}
	return out
}

// keymap is the core keyboard mapping: for each keycode from min, its
// keysyms by level (column).
type keymap struct {
	min, max byte
	per      int
	syms     [][]uint32 // syms[keycode-min]
}

// parseKeymap builds a keymap from a GetKeyboardMapping reply's table:
// per keysyms for each keycode from min up to max. Keycodes the table
// does not cover have no keysyms; a per outside 1..255 yields an empty
// map.
func parseKeymap(min, max byte, per int, table []uint32) *keymap {
	km := &keymap{min: min, max: max, per: per}
	if per <= 0 || per > 255 || max < min {
		km.per = 0
		return km
	}
	n := int(max) - int(min) + 1
	km.syms = make([][]uint32, n)
	for i := 0; i < n; i++ {
		lo := i * per
		if lo >= len(table) {
			km.syms[i] = make([]uint32, per)
			continue
		}
		hi := lo + per
		if hi > len(table) {
			hi = len(table)
		}
		row := make([]uint32, per)
		copy(row, table[lo:hi])
		km.syms[i] = row
	}
	return km
}

// at returns the keysyms of keycode kc, nil outside the map.
func (km *keymap) at(kc byte) []uint32 {
	if kc < km.min || int(kc-km.min) >= len(km.syms) {
		return nil
	}
	return km.syms[kc-km.min]
}

// find returns a keycode and level (0 plain, 1 shifted) producing keysym
// ks; ok is false when no keycode has it at level 0 or 1. The lowest
// keycode wins, so the result is stable.
func (km *keymap) find(ks uint32) (kc byte, level int, ok bool) {
	if ks == 0 {
		return 0, 0, false
	}
	for i, row := range km.syms {
		for l := 0; l < len(row) && l < 2; l++ {
			got := row[l]
			// A keycode whose second column is empty produces the
			// first column's keysym shifted (X11 keysym rules): for a
			// letter the upper case, which the case check below finds.
			if got == ks {
				return km.min + byte(i), l, true
			}
		}
		if len(row) > 0 && (len(row) < 2 || row[1] == 0) && row[0] != 0 {
			lower, upper := caseOf(row[0])
			if ks == upper && upper != lower {
				return km.min + byte(i), 1, true
			}
		}
	}
	return 0, 0, false
}

// spare returns up to n keycodes that have no keysym at all, from the
// highest down: the keycodes free for a temporary remap.
func (km *keymap) spare(n int) []byte {
	var out []byte
	for i := len(km.syms) - 1; i >= 0 && len(out) < n; i-- {
		empty := true
		for _, s := range km.syms[i] {
			if s != 0 {
				empty = false
				break
			}
		}
		if empty {
			out = append(out, km.min+byte(i))
		}
	}
	return out
}

// caseOf returns the lower and upper case keysyms of a Latin-1 letter
// keysym; any other keysym is returned twice.
func caseOf(ks uint32) (lower, upper uint32) {
	switch {
	case ks >= 'a' && ks <= 'z':
		return ks, ks - 32
	case ks >= 'A' && ks <= 'Z':
		return ks + 32, ks
	case ks >= 0xe0 && ks <= 0xfe && ks != 0xf7:
		return ks, ks - 32
	case ks >= 0xc0 && ks <= 0xde && ks != 0xd7:
		return ks + 32, ks
	}
	return ks, ks
}
