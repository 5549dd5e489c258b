package pavo

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Values from a host (a view's or query's params, a form's values) are
// checked and converted against FormFields by the same rules, so that a
// host that sends every value as a string (a command line's --param
// k=v) and one that sends typed JSON are served alike:
//
//   - null is the same as absent; so is "" for every type but string.
//   - string: a JSON string; a number or boolean is taken as its text.
//   - integer: a JSON number without a fraction, or a string holding one,
//     within ±2^53.
//   - number: a finite JSON number, or a string holding one.
//   - boolean: true or false, or the strings "true" and "false".
//   - enum: one of the field's options, as a string.
//   - json: any JSON value; when the field is narrowed to object or array,
//     a string is parsed as JSON and must be one.
//
// An absent required field is an error; a key that is no field is an
// error for forms and ignored for params (a view passes its caller's
// params to every binding).

// fieldValues are checked values by key.
type fieldValues map[string]any

func (v fieldValues) str(key string) string {
	s, _ := v[key].(string)
	return s
}

func (v fieldValues) has(key string) bool {
	_, ok := v[key]
	return ok
}

// checkValues checks raw against fields. errs maps each failing key to
// what is wrong with it. With strict, keys that are not fields fail too.
func checkValues(fields []FormField, raw map[string]json.RawMessage, strict bool) (fieldValues, map[string]string) {
	out := fieldValues{}
	errs := map[string]string{}
	for _, f := range fields {
		r, ok := raw[f.Key]
		if !ok || absent(f, r) {
			if f.Required {
				errs[f.Key] = "required"
			}
			continue
		}
		v, err := coerce(f, r)
		if err != nil {
			errs[f.Key] = err.Error()
			continue
		}
		out[f.Key] = v
	}
	if strict {
		for k := range raw {
			if !slices.ContainsFunc(fields, func(f FormField) bool { return f.Key == k }) {
				errs[k] = "not a field of this form"
			}
		}
	}
	if len(errs) == 0 {
		errs = nil
	}
	return out, errs
}

// absent reports whether raw counts as no value for f.
func absent(f FormField, raw json.RawMessage) bool {
	switch kindOf(raw) {
	case "null":
		return true
	case "string":
		return f.Type != FieldString && string(bytes.TrimSpace(raw)) == `""`
	}
	return false
}

// coerce converts one present value to f's type.
func coerce(f FormField, raw json.RawMessage) (any, error) {
	kind := kindOf(raw)
	var s string
	if kind == "string" {
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
	}
	got := func() error {
		if kind == "string" {
			return fmt.Errorf("want %s, got %s", article(f.Type), quote(s))
		}
		return fmt.Errorf("want %s, got %s", article(f.Type), kindArticle(kind))
	}
	switch f.Type {
	case FieldString:
		switch kind {
		case "string":
			return s, nil
		case "number", "boolean":
			return string(bytes.TrimSpace(raw)), nil
		}
		return nil, got()
	case FieldInteger:
		text := strings.TrimSpace(s)
		if kind == "number" {
			text = string(bytes.TrimSpace(raw))
		} else if kind != "string" {
			return nil, got()
		}
		if n, err := strconv.ParseInt(text, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
			if err != nil || n < -1<<53 || n > 1<<53 {
				return nil, got()
			}
			return n, nil
		}
		// 3.0 and 1e3 are integers too.
		if x, err := strconv.ParseFloat(text, 64); err == nil && x == math.Trunc(x) && math.Abs(x) <= 1<<53 {
			return int64(x), nil
		}
		return nil, got()
	case FieldNumber:
		text := strings.TrimSpace(s)
		if kind == "number" {
			text = string(bytes.TrimSpace(raw))
		} else if kind != "string" {
			return nil, got()
		}
		x, err := strconv.ParseFloat(text, 64)
		if err != nil || math.IsInf(x, 0) || math.IsNaN(x) {
			return nil, got()
		}
		return x, nil
	case FieldBoolean:
		switch {
		case kind == "boolean":
			return string(bytes.TrimSpace(raw)) == "true", nil
		case kind == "string" && (s == "true" || s == "false"):
			return s == "true", nil
		}
		return nil, got()
	case FieldEnum:
		switch kind {
		case "string":
		case "number", "boolean":
			s = string(bytes.TrimSpace(raw))
		default:
			return nil, fmt.Errorf("want one of %s, got %s", strings.Join(f.Options, ", "), kindArticle(kind))
		}
		if !slices.Contains(f.Options, s) {
			return nil, fmt.Errorf("want one of %s, got %s", strings.Join(f.Options, ", "), quote(s))
		}
		return s, nil
	case FieldJSON:
		want := f.jsonKind
		if want == "" || want == "any" {
			return json.RawMessage(compact(raw)), nil
		}
		if kind == "string" && want != "string" {
			if !json.Valid([]byte(s)) {
				return nil, fmt.Errorf("want a JSON %s, got a string that is not JSON", want)
			}
			raw, kind = json.RawMessage(s), kindOf(json.RawMessage(s))
		}
		if kind != want {
			return nil, fmt.Errorf("want a JSON %s, got %s", want, kindArticle(kind))
		}
		return json.RawMessage(compact(raw)), nil
	}
	return nil, fmt.Errorf("field type %q is not known", f.Type)
}

func compact(raw []byte) []byte {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

func article(fieldType string) string {
	switch fieldType {
	case FieldInteger:
		return "an integer"
	case FieldNumber:
		return "a number"
	case FieldBoolean:
		return "true or false"
	case FieldString:
		return "a string"
	}
	return "a " + fieldType
}

func kindArticle(kind string) string {
	switch kind {
	case "object", "array":
		return "an " + kind
	case "null":
		return "null"
	}
	return "a " + kind
}

// mergeParams merges static under caller: a caller's key wins. Static
// values that do not encode are left out.
func mergeParams(static map[string]any, caller map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(static)+len(caller))
	for k, v := range static {
		if b, err := marshal(v); err == nil {
			out[k] = b
		}
	}
	for k, v := range caller {
		out[k] = v
	}
	return out
}
