package scomp

import (
	"fmt"
	"strings"
)

// BindingName is the JavaScript name of the binding of capability id:
// a global function of the sandbox. The mapping is one to one (no two
// ids share a name) and fixed:
//
//   - ASCII letters and digits stay (a leading digit excepted);
//   - "." becomes "_";
//   - every other byte, "_" included, and a leading digit, becomes "$"
//     and its two hexadecimal digits, upper case ("_" is "$5F", "-" is
//     "$2D");
//   - a name that would be a reserved word of JavaScript or a global of
//     the sandbox before any binding (Object, JSON, eval, ...) gets the
//     prefix "$$" (as the empty id would be "").
//
// So pcp.inspection.ping is pcp_inspection_ping, org.example.notes.create
// is org_example_notes_create and org.my-app.do_it is
// org_my$2Dapp_do$5Fit. "_" comes only from ".", "$" is followed by two
// upper-case hex digits except in the prefix "$$", hence one to one.
func BindingName(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9' && i > 0:
			b.WriteByte(c)
		case c == '.':
			b.WriteByte('_')
		default:
			fmt.Fprintf(&b, "$%02X", c)
		}
	}
	n := b.String()
	if n == "" || reserved[n] || sandboxGlobals[n] {
		n = "$$" + n
	}
	return n
}

// isIdentifier reports whether s is a JavaScript identifier of ASCII
// letters, digits, "_" and "$", not a reserved word.
func isIdentifier(s string) bool {
	if s == "" || reserved[s] {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || c == '$' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

var reserved = set("await break case catch class const continue debugger default delete do else enum export extends false finally for function if implements import in instanceof interface let new null package private protected public return static super switch this throw true try typeof var void while with yield arguments")

// sandboxGlobals are the names the sandbox's global object has before
// the bindings (QuickJS's standard library, no std or os module).
var sandboxGlobals = set("globalThis undefined NaN Infinity eval parseInt parseFloat isNaN isFinite decodeURI decodeURIComponent encodeURI encodeURIComponent escape unescape Object Function Error EvalError RangeError ReferenceError SyntaxError TypeError URIError InternalError AggregateError Array Number Boolean String Symbol Math JSON Reflect Date RegExp Promise Proxy Map Set WeakMap WeakSet WeakRef FinalizationRegistry ArrayBuffer SharedArrayBuffer DataView Int8Array Uint8Array Uint8ClampedArray Int16Array Uint16Array Int32Array Uint32Array BigInt64Array BigUint64Array Float16Array Float32Array Float64Array BigInt Atomics Iterator performance queueMicrotask structuredClone")

func set(words string) map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(words) {
		m[w] = true
	}
	return m
}
