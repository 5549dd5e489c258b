// Package canonjson implements the JSON Canonicalization Scheme (JCS) of
// RFC 8785: a deterministic serialisation of JSON text, so that two parties
// hashing or signing "the same JSON" hash or sign the same bytes.
//
// The canonical form of a JSON value is:
//
//   - no insignificant whitespace;
//   - object members sorted by their names compared as arrays of UTF-16
//     code units (not bytes, not code points);
//   - strings written as ECMAScript's JSON.stringify writes them: only
//     \" \\ \b \f \n \r \t and \u00xx (lowercase hex) for the remaining
//     control characters are escaped, everything else is literal UTF-8;
//   - numbers parsed as IEEE-754 doubles and written as ECMAScript's
//     Number.prototype.toString writes them (shortest round-trip digits,
//     exponent form below 1e-6 and from 1e21 up, -0 as 0).
//
// Transform works on the JSON text itself with its own tokenizer, so the
// text of every number reaches strconv.ParseFloat unchanged and no value
// passes through a Go map or interface. Input that RFC 8785 cannot
// canonicalise is rejected with an *Error: malformed JSON, invalid UTF-8,
// unpaired surrogates in \u escapes, duplicate member names, numbers that
// overflow a double, and nesting deeper than MaxDepth.
package canonjson

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects Transform accepts, so
// hostile input cannot exhaust the stack.
const MaxDepth = 1000

// Error reports why a JSON text has no canonical form.
type Error struct {
	// Offset is the byte offset in the input where the problem was found.
	Offset int
	// Msg describes the problem.
	Msg  string
	kind errKind
}

func (e *Error) Error() string {
	return fmt.Sprintf("canonjson: offset %d: %s", e.Offset, e.Msg)
}

// errKind separates malformed JSON from well-formed JSON that RFC 8785
// still refuses; the fuzz test relies on the distinction.
type errKind int

const (
	kindSyntax    errKind = iota // not JSON at all
	kindUTF8                     // invalid UTF-8 inside a string
	kindSurrogate                // \u escape leaves a surrogate unpaired
	kindDuplicate                // repeated member name
	kindNumber                   // number outside the range of a double
	kindDepth                    // nesting deeper than MaxDepth
)

// Transform returns the JCS canonical form of the JSON text raw. Whitespace
// around the value is allowed; anything else after it is an error.
//
// Input already in member order is processed in linear time; an object
// whose members need reordering is copied once more, so the worst case is
// len(raw) × MaxDepth bytes moved.
func Transform(raw []byte) ([]byte, error) {
	p := parser{in: raw, out: make([]byte, 0, len(raw))}
	p.skipSpace()
	if err := p.value(0); err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.in) {
		return nil, p.errorf(kindSyntax, "unexpected %s after top-level value", p.describe())
	}
	return p.out, nil
}

// Marshal encodes v with encoding/json and returns its canonical form.
func Marshal(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("canonjson: %w", err)
	}
	return Transform(raw)
}

// parser reads in and appends the canonical form to out as it goes;
// objects are rewritten in place once all their members are known.
type parser struct {
	in  []byte
	pos int
	out []byte
	// keyBuf is scratch space for decoding strings.
	keyBuf []byte
	// scratch holds an object's members while they are reordered.
	scratch []byte
}

func (p *parser) errorf(kind errKind, format string, args ...any) *Error {
	return &Error{Offset: p.pos, Msg: fmt.Sprintf(format, args...), kind: kind}
}

// describe names the byte at pos for error messages.
func (p *parser) describe() string {
	if p.pos >= len(p.in) {
		return "end of input"
	}
	c := p.in[p.pos]
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("character %q", c)
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value parses one JSON value at depth (the number of enclosing containers).
func (p *parser) value(depth int) error {
	if p.pos >= len(p.in) {
		return p.errorf(kindSyntax, "unexpected end of input, want a value")
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(depth + 1)
	case c == '[':
		return p.array(depth + 1)
	case c == '"':
		s, err := p.str(p.keyBuf[:0])
		if err != nil {
			return err
		}
		p.keyBuf = s[:0]
		p.out = appendString(p.out, s)
		return nil
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true")
	case c == 'f':
		return p.literal("false")
	case c == 'n':
		return p.literal("null")
	default:
		return p.errorf(kindSyntax, "unexpected %s, want a value", p.describe())
	}
}

func (p *parser) literal(word string) error {
	if len(p.in)-p.pos < len(word) || string(p.in[p.pos:p.pos+len(word)]) != word {
		return p.errorf(kindSyntax, "invalid literal, want %q", word)
	}
	p.pos += len(word)
	p.out = append(p.out, word...)
	return nil
}

// member is one rendered `"name":value` of an object, held in out[start:end]
// until the object is sorted.
type member struct {
	name       string
	start, end int
}

func (p *parser) object(depth int) error {
	if depth > MaxDepth {
		return p.errorf(kindDepth, "nesting deeper than %d", MaxDepth)
	}
	p.pos++ // '{'
	p.out = append(p.out, '{')
	base := len(p.out)
	var members []member
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		p.out = append(p.out, '}')
		return nil
	}
	for {
		p.skipSpace()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return p.errorf(kindSyntax, "unexpected %s, want a member name", p.describe())
		}
		name, err := p.str(p.keyBuf[:0])
		if err != nil {
			return err
		}
		p.keyBuf = name[:0]
		if len(members) > 0 {
			p.out = append(p.out, ',')
		}
		m := member{name: string(name), start: len(p.out)}
		p.out = appendString(p.out, name)
		p.out = append(p.out, ':')
		p.skipSpace()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return p.errorf(kindSyntax, "unexpected %s, want ':' after member name", p.describe())
		}
		p.pos++
		p.skipSpace()
		if err := p.value(depth); err != nil {
			return err
		}
		m.end = len(p.out)
		members = append(members, m)
		p.skipSpace()
		if p.pos >= len(p.in) {
			return p.errorf(kindSyntax, "unexpected end of input in object")
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			continue
		case '}':
			p.pos++
		default:
			return p.errorf(kindSyntax, "unexpected %s, want ',' or '}'", p.describe())
		}
		break
	}

	cmp := func(a, b member) int { return compareUTF16(a.name, b.name) }
	sorted := slices.IsSortedFunc(members, cmp)
	if !sorted {
		slices.SortFunc(members, cmp)
	}
	for i := 1; i < len(members); i++ {
		if members[i].name == members[i-1].name {
			return &Error{Offset: p.pos, Msg: fmt.Sprintf("duplicate member name %q in object", clip(members[i].name)), kind: kindDuplicate}
		}
	}
	if !sorted {
		// Reorder the rendered members through scratch, which the nested
		// values have finished with by now.
		p.scratch = append(p.scratch[:0], p.out[base:]...)
		p.out = p.out[:base]
		for i, m := range members {
			if i > 0 {
				p.out = append(p.out, ',')
			}
			p.out = append(p.out, p.scratch[m.start-base:m.end-base]...)
		}
	}
	p.out = append(p.out, '}')
	return nil
}

func (p *parser) array(depth int) error {
	if depth > MaxDepth {
		return p.errorf(kindDepth, "nesting deeper than %d", MaxDepth)
	}
	p.pos++ // '['
	p.out = append(p.out, '[')
	p.skipSpace()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		p.out = append(p.out, ']')
		return nil
	}
	for {
		p.skipSpace()
		if err := p.value(depth); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.in) {
			return p.errorf(kindSyntax, "unexpected end of input in array")
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			p.out = append(p.out, ',')
		case ']':
			p.pos++
			p.out = append(p.out, ']')
			return nil
		default:
			return p.errorf(kindSyntax, "unexpected %s, want ',' or ']'", p.describe())
		}
	}
}

// str decodes the string literal at pos, appending its UTF-8 value to dst.
func (p *parser) str(dst []byte) ([]byte, error) {
	p.pos++ // opening quote
	for {
		if p.pos >= len(p.in) {
			return nil, p.errorf(kindSyntax, "unexpected end of input in string")
		}
		c := p.in[p.pos]
		switch {
		case c == '"':
			p.pos++
			return dst, nil
		case c == '\\':
			var err error
			if dst, err = p.escape(dst); err != nil {
				return nil, err
			}
		case c < 0x20:
			return nil, p.errorf(kindSyntax, "unescaped control character 0x%02x in string", c)
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.in[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return nil, p.errorf(kindUTF8, "invalid UTF-8 in string")
			}
			dst = append(dst, p.in[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

// escape decodes the escape sequence at pos (at the backslash).
func (p *parser) escape(dst []byte) ([]byte, error) {
	if p.pos+1 >= len(p.in) {
		p.pos++
		return nil, p.errorf(kindSyntax, "unexpected end of input in escape")
	}
	var c byte
	switch p.in[p.pos+1] {
	case '"':
		c = '"'
	case '\\':
		c = '\\'
	case '/':
		c = '/'
	case 'b':
		c = '\b'
	case 'f':
		c = '\f'
	case 'n':
		c = '\n'
	case 'r':
		c = '\r'
	case 't':
		c = '\t'
	case 'u':
		r, err := p.hex4()
		if err != nil {
			return nil, err
		}
		if utf16.IsSurrogate(r) {
			if r >= 0xDC00 {
				return nil, p.errorf(kindSurrogate, "unpaired low surrogate \\u%04x", r)
			}
			// A high surrogate must be followed at once by \u and a low one.
			at := p.pos
			p.pos += 6
			if p.pos+1 >= len(p.in) || p.in[p.pos] != '\\' || p.in[p.pos+1] != 'u' {
				p.pos = at
				return nil, p.errorf(kindSurrogate, "unpaired high surrogate \\u%04x", r)
			}
			lo, err := p.hex4()
			if err != nil {
				return nil, err
			}
			if lo < 0xDC00 || lo > 0xDFFF {
				p.pos = at
				return nil, p.errorf(kindSurrogate, "high surrogate \\u%04x followed by \\u%04x, not a low surrogate", r, lo)
			}
			r = utf16.DecodeRune(r, lo)
		}
		p.pos += 6
		return utf8.AppendRune(dst, r), nil
	default:
		p.pos++
		return nil, p.errorf(kindSyntax, "invalid escape %s", p.describe())
	}
	p.pos += 2
	return append(dst, c), nil
}

// hex4 reads the four hex digits of the \u escape at pos without moving.
func (p *parser) hex4() (rune, error) {
	if p.pos+6 > len(p.in) {
		return 0, p.errorf(kindSyntax, "truncated \\u escape")
	}
	var r rune
	for _, c := range p.in[p.pos+2 : p.pos+6] {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, p.errorf(kindSyntax, "invalid hex digit %q in \\u escape", c)
		}
		r = r<<4 | rune(d)
	}
	return r, nil
}

// number validates the RFC 8259 number at pos and appends its canonical form.
func (p *parser) number() error {
	start := p.pos
	if p.in[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(p.in) && p.in[p.pos] == '0':
		p.pos++
	case p.pos < len(p.in) && p.in[p.pos] >= '1' && p.in[p.pos] <= '9':
		p.digits()
	default:
		return p.errorf(kindSyntax, "invalid number, want a digit")
	}
	if p.pos < len(p.in) && p.in[p.pos] == '.' {
		p.pos++
		if p.digits() == 0 {
			return p.errorf(kindSyntax, "invalid number, want a digit after '.'")
		}
	}
	if p.pos < len(p.in) && (p.in[p.pos] == 'e' || p.in[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.in) && (p.in[p.pos] == '+' || p.in[p.pos] == '-') {
			p.pos++
		}
		if p.digits() == 0 {
			return p.errorf(kindSyntax, "invalid number, want a digit in exponent")
		}
	}
	text := string(p.in[start:p.pos])
	f, err := strconv.ParseFloat(text, 64)
	if err != nil || math.IsInf(f, 0) {
		// The grammar was checked above, so the only failure left is a
		// magnitude beyond the largest double. Underflow rounds to zero,
		// as it does in ECMAScript.
		p.pos = start
		return p.errorf(kindNumber, "number %s is not a finite IEEE-754 double", clip(text))
	}
	p.out = appendNumber(p.out, f)
	return nil
}

func (p *parser) digits() int {
	n := 0
	for p.pos < len(p.in) && p.in[p.pos] >= '0' && p.in[p.pos] <= '9' {
		p.pos++
		n++
	}
	return n
}

// clip shortens s for an error message, at a rune boundary.
func clip(s string) string {
	const max = 40
	if len(s) <= max {
		return s
	}
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

// appendNumber appends f as ECMAScript's Number.prototype.toString writes
// it (ECMA-262 Number::toString, radix 10), which is how RFC 8785 writes
// numbers. f must be finite.
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 { // both zeros
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest digits that round-trip, as "d.ddde±x". ECMA-262 asks for the
	// fewest digits k and, among those, the closest to f, which is what
	// strconv's shortest formatting produces.
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	mant, exp, _ := cutByte(e, 'e')
	x, _ := strconv.Atoi(string(exp))
	var ds [24]byte
	digits := append(ds[:0], mant[0])
	if len(mant) > 2 {
		digits = append(digits, mant[2:]...)
	}
	k := len(digits)
	n := x + 1 // f = 0.digits × 10^n

	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, "0."...)
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

func cutByte(s []byte, sep byte) (before, after []byte, found bool) {
	for i, c := range s {
		if c == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, nil, false
}

// appendString appends s (valid UTF-8) as a JSON string literal escaped the
// way ECMAScript's JSON.stringify escapes it.
func appendString(dst, s []byte) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	start := 0
	for i, c := range s {
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// compareUTF16 orders valid UTF-8 strings as their UTF-16 encodings compare
// code unit by code unit, without encoding them.
//
// UTF-16 order equals code point order except that supplementary
// characters (encoded from surrogates 0xD800-0xDFFF) sort between U+D7FF
// and U+E000. weight16 maps runes onto a line with that order.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			if weight16(ra) < weight16(rb) {
				return -1
			}
			return 1
		}
		a, b = a[na:], b[nb:]
	}
	switch {
	case a == "" && b == "":
		return 0
	case a == "":
		return -1
	default:
		return 1
	}
}

func weight16(r rune) rune {
	switch {
	case r < 0xD800:
		return r
	case r > 0xFFFF:
		return 0xD800 + (r - 0x10000)
	default: // U+E000..U+FFFF; surrogate code points never occur here
		return r + 0x100000
	}
}

// AppendString appends the canonical JSON form of s, which must be valid
// UTF-8 (check with utf8.ValidString; encoding/json would replace invalid
// bytes, so callers fall back to Marshal for such strings).
func AppendString(dst []byte, s string) []byte {
	return appendString(dst, []byte(s))
}
