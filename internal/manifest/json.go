package manifest

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// JSON kinds as error messages name them.
const (
	kindObject  = "object"
	kindArray   = "array"
	kindString  = "string"
	kindNumber  = "number"
	kindBoolean = "boolean"
	kindNull    = "null"
)

// kindOf names the JSON kind of raw, which must be valid JSON.
func kindOf(raw json.RawMessage) string {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	if len(raw) == 0 {
		return kindNull
	}
	switch raw[0] {
	case '{':
		return kindObject
	case '[':
		return kindArray
	case '"':
		return kindString
	case 't', 'f':
		return kindBoolean
	case 'n':
		return kindNull
	default:
		return kindNumber
	}
}

// parseInt interprets the JSON number text s as an int64 if its value is a
// whole number in range: "3", "3.0", "3e2" and "300e-2" all qualify. It
// works on the decimal text, so no precision is lost to float64 and a
// huge exponent costs nothing. ok is false with why set otherwise.
func parseInt(s string) (n int64, ok bool, why string) {
	s = strings.TrimSpace(s)
	neg := false
	if s != "" && s[0] == '-' {
		neg, s = true, s[1:]
	}
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	intPart, rest := s[:i], s[i:]
	var frac string
	if rest != "" && rest[0] == '.' {
		j := 1
		for j < len(rest) && isDigit(rest[j]) {
			j++
		}
		frac, rest = rest[1:j], rest[j:]
	}
	exp := 0
	if rest != "" && (rest[0] == 'e' || rest[0] == 'E') {
		e, err := strconv.Atoi(rest[1:])
		if err != nil || e > maxExp || e < -maxExp {
			// s is a valid JSON number, so this is an exponent too large
			// for any int64 to need: a huge value or a tiny non-zero one.
			if strings.Trim(intPart+frac, "0") == "" {
				return 0, true, ""
			}
			if rest[1] == '-' {
				return 0, false, "has a fractional part"
			}
			return 0, false, "is out of the int64 range"
		}
		exp = e
	}

	digits := strings.TrimLeft(intPart+frac, "0")
	exp -= len(frac)
	for digits != "" && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp++
	}
	if digits == "" {
		return 0, true, ""
	}
	if exp < 0 {
		return 0, false, "has a fractional part"
	}
	if len(digits)+exp > 19 {
		return 0, false, "is out of the int64 range"
	}
	text := digits + strings.Repeat("0", exp)
	if neg {
		text = "-" + text
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return 0, false, "is out of the int64 range"
	}
	return n, true, ""
}

// maxExp bounds the exponents parseInt does arithmetic with; beyond it
// the answer no longer depends on the exact exponent.
const maxExp = 1 << 20

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
