package atspi

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStateDecoding(t *testing.T) {
	for _, tc := range []struct {
		words []uint32
		want  []string
	}{
		{nil, []string{}},
		{[]uint32{0, 0}, []string{}},
		{[]uint32{1}, []string{}}, // bit 0 is "invalid", never reported
		// gtk3-widget-factory's "Page 2" radio button: enabled, focusable,
		// sensitive, showing, visible.
		{[]uint32{0x43000900, 0}, []string{"enabled", "focusable", "sensitive", "showing", "visible"}},
		{[]uint32{1 << 31, 1 | 1<<11}, []string{"manages-descendants", "indeterminate", "read-only"}},
		// Words past the second and bits past the table are ignored.
		{[]uint32{0, 1 << 30, 0xffffffff}, []string{}},
	} {
		if diff := cmp.Diff(tc.want, StateNames(tc.words)); diff != "" {
			t.Errorf("StateNames(%#x) (-want +got):\n%s", tc.words, diff)
		}
	}
}

func TestStateSet(t *testing.T) {
	var s stateSet
	s = s.with(stChecked, true).with(stSensitive, true).with(99, true).with(-1, true)
	if !s.has(stChecked) || !s.has(stSensitive) || s.has(stFocused) || s.has(99) || s.has(-1) {
		t.Errorf("set %v: got has(checked)=%v has(sensitive)=%v has(focused)=%v", s.names(), s.has(stChecked), s.has(stSensitive), s.has(stFocused))
	}
	if s = s.with(stChecked, false); s.has(stChecked) {
		t.Errorf("with(checked, false) left checked set")
	}
}

func TestStateBit(t *testing.T) {
	for _, tc := range []struct {
		name string
		want int
	}{
		{"checked", stChecked}, {"CHECKED", stChecked}, {"multi-line", 17}, {"multi line", 17},
		{"MULTI_LINE", 17}, {"manages-descendants", stManagesDescendants}, {"read-only", stReadOnly},
		{"nonsense", -1}, {"", -1},
	} {
		if got := stateBit(tc.name); got != tc.want {
			t.Errorf("stateBit(%q) = %d, want %d", tc.name, got, tc.want)
		}
	}
}
