package atspi

import (
	"slices"
	"strings"
)

// stateNames is AT-SPI2's AtspiStateType enumeration: the bit numbers of
// the set Accessible.GetState reports as two 32-bit words, named as the
// state-changed events name them (the enumeration's nicks).
var stateNames = [...]string{
	"invalid", "active", "armed", "busy", "checked", "collapsed", "defunct", "editable",
	"enabled", "expandable", "expanded", "focusable", "focused", "has-tooltip",
	"horizontal", "iconified", "modal", "multi-line", "multiselectable", "opaque",
	"pressed", "resizable", "selectable", "selected", "sensitive", "showing",
	"single-line", "stale", "transient", "vertical", "visible", "manages-descendants",
	"indeterminate", "required", "truncated", "animated", "invalid-entry",
	"supports-autocompletion", "selectable-text", "is-default", "visited", "checkable",
	"has-popup", "read-only",
}

// State bits the adapter reads.
const (
	stActive             = 1
	stChecked            = 4
	stDefunct            = 6
	stEditable           = 7
	stFocused            = 12
	stIconified          = 15
	stSensitive          = 24
	stShowing            = 25
	stVisible            = 30
	stManagesDescendants = 31
	stReadOnly           = 43
)

// stateSet is a decoded GetState bitset: bit n is state n.
type stateSet uint64

// statesFromWords decodes GetState's words; words past the second hold no
// state AT-SPI2 defines and are ignored.
func statesFromWords(w []uint32) stateSet {
	var s stateSet
	if len(w) > 0 {
		s = stateSet(w[0])
	}
	if len(w) > 1 {
		s |= stateSet(w[1]) << 32
	}
	return s
}

func (s stateSet) has(bit int) bool { return bit >= 0 && bit < 64 && s&(1<<uint(bit)) != 0 }

func (s stateSet) with(bit int, on bool) stateSet {
	if bit < 0 || bit >= 64 {
		return s
	}
	if on {
		return s | 1<<uint(bit)
	}
	return s &^ (1 << uint(bit))
}

// names lists the set's states in bit order; bits AT-SPI2 does not define
// are left out.
func (s stateSet) names() []string {
	out := make([]string, 0, 8)
	for i, n := range stateNames {
		if i > 0 && s.has(i) {
			out = append(out, n)
		}
	}
	return out
}

// normState folds a state as a caller or an event may spell it
// ("multi line", "MULTI_LINE", "multi-line") to the table's spelling.
func normState(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.NewReplacer("_", "-", " ", "-").Replace(s)
	return s
}

// stateBit returns the bit of a state name, or -1.
func stateBit(name string) int {
	return slices.Index(stateNames[:], normState(name))
}

// StateNames decodes a GetState reply into AT-SPI2 state names.
func StateNames(words []uint32) []string { return statesFromWords(words).names() }
