package manifest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/canonjson"
)

// MaxAppID is the longest app id ValidateAppID accepts.
const MaxAppID = 255

// ValidateAppID checks that appID is a reverse-DNS id: two or more
// dot-separated labels, each of ASCII letters, digits, '_' and '-' starting
// with a letter or digit, at most MaxAppID bytes in all. The error is
// INVALID_PARAMS naming "app_id".
func ValidateAppID(appID string) error {
	if appID == "" {
		return api.MissingParam("app_id")
	}
	if len(appID) > MaxAppID {
		return api.InvalidParam("app_id", "app id is %d bytes, want at most %d", len(appID), MaxAppID)
	}
	labels := strings.Split(appID, ".")
	if len(labels) < 2 {
		return api.InvalidParam("app_id", "app id %q is not reverse-DNS: want two or more dot-separated labels", appID)
	}
	for i, l := range labels {
		if l == "" {
			return api.InvalidParam("app_id", "app id %q: label %d is empty", appID, i+1)
		}
		if !isAlnum(l[0]) {
			return api.InvalidParam("app_id", "app id %q: label %q must start with a letter or digit", appID, l)
		}
		for j := range len(l) {
			if c := l[j]; !isAlnum(c) && c != '_' && c != '-' {
				what := fmt.Sprintf("character %q", rune(c))
				if c >= 0x80 {
					what = "a non-ASCII character"
				}
				return api.InvalidParam("app_id", "app id %q: label %q has %s, want only A-Z a-z 0-9 _ -", appID, l, what)
			}
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// CheckParams validates params, the params of an invocation of capID (a
// JSON object, or absent or null for none), against decls:
//
//   - every member must be a declared parameter;
//   - every required parameter (api.ParamDecl.IsRequired) must be present;
//   - every value must have its declared type: "string", "integer" (a
//     number whose value is whole and within int64, so 2 and 2.0 qualify),
//     "number", "boolean", "object", "array" or "any". null matches only
//     "any".
//
// Violations are INVALID_PARAMS errors whose message and Data "field" name
// "params.<name>"; a params that is not a JSON object names "params".
// decls should come from Parse: a declaration of an unknown type is an
// INTERNAL_ERROR.
func CheckParams(capID string, decls []api.ParamDecl, params json.RawMessage) error {
	var got map[string]json.RawMessage
	if len(params) > 0 {
		// Strict I-JSON, as for manifests: a duplicate member would let
		// the check and the app see different values.
		// The values are then read from params itself, not the canonical
		// form, whose numbers are rounded to doubles.
		if _, err := canonjson.Transform(params); err != nil {
			return api.InvalidParam("params", "capability %s: not valid I-JSON: %v", capID, err)
		}
		switch k := kindOf(params); k {
		case kindNull:
		case kindObject:
			if err := json.Unmarshal(params, &got); err != nil {
				return api.InvalidParam("params", "capability %s: %v", capID, err)
			}
		default:
			return api.InvalidParam("params", "capability %s: expected object, got %s", capID, k)
		}
	}

	var unknown []string
	for name := range got {
		if !slices.ContainsFunc(decls, func(d api.ParamDecl) bool { return d.Name == name }) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		name := clip(unknown[0])
		return api.InvalidParam("params."+name, "unknown parameter of capability %s%s", capID, declaredList(decls))
	}

	for _, d := range decls {
		v, ok := got[d.Name]
		if !ok {
			if d.IsRequired() {
				return api.InvalidParam("params."+d.Name, "required parameter of capability %s missing", capID)
			}
			continue
		}
		if why := typeMismatch(d.Type, v); why != "" {
			if why == errUnknownType {
				return api.Errorf(api.CodeInternalError, nil, "capability %s: parameter %q declares unknown type %q", capID, d.Name, d.Type)
			}
			return api.InvalidParam("params."+d.Name, "capability %s: %s", capID, why)
		}
	}
	return nil
}

const errUnknownType = "unknown type"

// typeMismatch says why v is not of type typ, or "" if it is.
func typeMismatch(typ string, v json.RawMessage) string {
	k := kindOf(v)
	switch typ {
	case api.TypeAny:
		return ""
	case api.TypeInteger:
		if k != kindNumber {
			return fmt.Sprintf("expected integer, got %s", k)
		}
		if _, ok, why := parseInt(string(v)); !ok {
			return fmt.Sprintf("expected integer, got %s, which %s", clip(string(v)), why)
		}
		return ""
	case api.TypeString, api.TypeNumber, api.TypeBoolean, api.TypeObject, api.TypeArray:
		if k != typ { // the kind names are the type names
			return fmt.Sprintf("expected %s, got %s", typ, k)
		}
		return ""
	default:
		return errUnknownType
	}
}

// declaredList is ` (declared: a, b)` for an error message, or ` (declares none)`.
func declaredList(decls []api.ParamDecl) string {
	if len(decls) == 0 {
		return " (it declares none)"
	}
	names := make([]string, len(decls))
	for i, d := range decls {
		names[i] = d.Name
	}
	return " (declared: " + strings.Join(names, ", ") + ")"
}
