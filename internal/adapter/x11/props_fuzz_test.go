package x11

import (
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		utf8 bool
		want string
	}{
		{"xterm", false, "xterm"},
		{"caf\xe9", false, "café"},
		{"café 中文", true, "café 中文"},
		{"bad \xff end", true, "bad \ufffd end"},
		{"cut\x00here", true, "cut"},
		{"", true, ""},
	} {
		if got := parseText([]byte(tc.in), tc.utf8); got != tc.want {
			t.Errorf("parseText(%q, %v): got %q, want %q", tc.in, tc.utf8, got, tc.want)
		}
	}
	if got := parseText([]byte(strings.Repeat("x", 10000)), true); len(got) != maxTitle {
		t.Errorf("long title: got %d bytes, want %d", len(got), maxTitle)
	}
}

func TestParseWMClass(t *testing.T) {
	for _, tc := range []struct{ in, inst, class string }{
		{"xterm\x00XTerm\x00", "xterm", "XTerm"},
		{"xterm\x00XTerm", "xterm", "XTerm"},
		{"only", "only", ""},
		{"\x00", "", ""},
		{"", "", ""},
	} {
		i, c := parseWMClass([]byte(tc.in))
		if i != tc.inst || c != tc.class {
			t.Errorf("parseWMClass(%q): got %q/%q, want %q/%q", tc.in, i, c, tc.inst, tc.class)
		}
	}
}

func TestParseCard32s(t *testing.T) {
	v := binary.LittleEndian.AppendUint32(nil, 0x1e00007)
	v = binary.LittleEndian.AppendUint32(v, 42)
	v = append(v, 1, 2) // a partial item
	got := parseCard32s(v, 32)
	if len(got) != 2 || got[0] != 0x1e00007 || got[1] != 42 {
		t.Errorf("parseCard32s: got %v, want [0x1e00007 42]", got)
	}
	if got := parseCard32s(v, 8); got != nil {
		t.Errorf("format 8: got %v, want nil", got)
	}
}

func TestKeymap(t *testing.T) {
	// keycodes 8..11: a/A, b (one column), empty, é.
	km := parseKeymap(8, 11, 2, []uint32{'a', 'A', 'b', 0, 0, 0, 0xe9, 0xc9})
	for _, tc := range []struct {
		ks    uint32
		kc    byte
		level int
		ok    bool
	}{
		{'a', 8, 0, true}, {'A', 8, 1, true}, {'b', 9, 0, true}, {'B', 9, 1, true},
		{0xc9, 11, 1, true}, {'z', 0, 0, false}, {0, 0, 0, false},
	} {
		kc, level, ok := km.find(tc.ks)
		if kc != tc.kc || level != tc.level || ok != tc.ok {
			t.Errorf("find(0x%x): got %d,%d,%v, want %d,%d,%v", tc.ks, kc, level, ok, tc.kc, tc.level, tc.ok)
		}
	}
	if got := km.spare(5); len(got) != 1 || got[0] != 10 {
		t.Errorf("spare: got %v, want [10]", got)
	}
	// A short table leaves the rest empty.
	km = parseKeymap(8, 255, 4, []uint32{'a'})
	if len(km.syms) != 248 || len(km.spare(300)) != 247 {
		t.Errorf("short table: got %d rows, %d spare", len(km.syms), len(km.spare(300)))
	}
}

func TestParseChord(t *testing.T) {
	for _, tc := range []struct {
		in   string
		mods []uint32
		key  uint32
		err  bool
	}{
		{"ctrl+s", []uint32{ksControl}, 's', false},
		{"ctrl+shift+Tab", []uint32{ksControl, ksShift}, 0xff09, false},
		{"Return", nil, 0xff0d, false},
		{"ctrl++", []uint32{ksControl}, '+', false},
		{"+", nil, '+', false},
		{"é", nil, 0xe9, false},
		{"0xff0d", nil, 0xff0d, false},
		{"super+F4", []uint32{ksSuper}, 0xffc1, false},
		{"shift", nil, ksShift, false},
		{"", nil, 0, true},
		{"ctrl+", nil, 0, true},
		{"s+ctrl", nil, 0, true},
		{"ctrl+nosuchkey", nil, 0, true},
	} {
		c, err := parseChord(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("parseChord(%q): got error %v, want error %v", tc.in, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if c.key != tc.key || len(c.mods) != len(tc.mods) {
			t.Errorf("parseChord(%q): got %v/0x%x, want %v/0x%x", tc.in, c.mods, c.key, tc.mods, tc.key)
		}
	}
}

func TestRuneKeysym(t *testing.T) {
	for _, r := range "aZ~é€中文\n\t" {
		ks := runeKeysym(r)
		if r == '\n' || r == '\t' {
			continue
		}
		if got := keysymRune(ks); got != r {
			t.Errorf("keysymRune(runeKeysym(%q)) = %q", r, got)
		}
	}
	if keysymRune(0x20ac) != '€' {
		t.Errorf("EuroSign does not type €")
	}
}

func FuzzParseText(f *testing.F) {
	for _, s := range []string{"xterm", "caf\xe9", "café 中文", "bad \xff", "a\x00b"} {
		f.Add([]byte(s), true)
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, v []byte, isUTF8 bool) {
		s := parseText(v, isUTF8)
		if !utf8.ValidString(s) || len(s) > maxTitle+utf8.UTFMax {
			t.Fatalf("parseText(%q): %q is not valid or too long", v, s)
		}
		i, c := parseWMClass(v)
		if !utf8.ValidString(i) || !utf8.ValidString(c) {
			t.Fatalf("parseWMClass(%q): invalid UTF-8", v)
		}
	})
}

func FuzzParseCard32s(f *testing.F) {
	f.Add([]byte{7, 0, 0xe0, 1, 42, 0, 0, 0}, byte(32))
	f.Add([]byte{1, 2, 3}, byte(32))
	f.Add([]byte{}, byte(8))
	f.Fuzz(func(t *testing.T, v []byte, format byte) {
		got := parseCard32s(v, format)
		if format != 32 && got != nil || len(got) > len(v)/4 {
			t.Fatalf("parseCard32s(%d bytes, %d): %d items", len(v), format, len(got))
		}
	})
}

func FuzzKeymap(f *testing.F) {
	f.Add(byte(8), byte(11), 2, []byte{'a', 0, 0, 0, 'A', 0, 0, 0, 0, 0, 0, 0}, uint32('A'))
	f.Add(byte(8), byte(255), 7, []byte{}, uint32(0x1004e2d))
	f.Add(byte(200), byte(10), 0, []byte{1}, uint32(1))
	f.Fuzz(func(t *testing.T, min, max byte, per int, raw []byte, ks uint32) {
		if len(raw) > 1<<16 {
			return
		}
		table := make([]uint32, len(raw)/4)
		for i := range table {
			table[i] = binary.LittleEndian.Uint32(raw[4*i:])
		}
		km := parseKeymap(min, max, per, table)
		if kc, level, ok := km.find(ks); ok {
			row := km.at(kc)
			if row == nil || level > 1 {
				t.Fatalf("find(0x%x) = %d,%d: no such row", ks, kc, level)
			}
		}
		for _, kc := range km.spare(300) {
			for _, s := range km.at(kc) {
				if s != 0 {
					t.Fatalf("spare keycode %d has keysym 0x%x", kc, s)
				}
			}
		}
	})
}

func FuzzParseChord(f *testing.F) {
	for _, s := range []string{"ctrl+s", "ctrl+shift+Tab", "Return", "ctrl++", "+", "é", "0xff0d", "a+b+c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := parseChord(s)
		if err == nil && (c.key == 0 || len(c.mods) >= maxChordKeys) {
			t.Fatalf("parseChord(%q) = %+v without error", s, c)
		}
	})
}
