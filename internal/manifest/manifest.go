// Package manifest parses, validates, signs and verifies the capability
// manifests apps register with register.capability (spec 000), and checks
// invocation parameters against the declarations a manifest makes.
//
// # Validation
//
// Parse is strict: a manifest is an object with exactly the members
// api.Manifest declares, each capability and parameter likewise, and every
// value is checked for JSON type, range and form. The JSON text itself must
// be I-JSON as RFC 8785 requires (valid UTF-8, no unpaired surrogates, no
// duplicate member names, finite numbers), so every party that reads a
// manifest reads the same one. Errors are *api.Error with code
// MANIFEST_INVALID; Message names the app, the capability and the field, and
// Data carries "app_id", "capability" (when known) and "field", a path such
// as "capabilities[0].parameters[1].type".
//
// # Signatures
//
// A manifest is signed by a publisher with an Ed25519 key (RFC 8032,
// pure Ed25519, no pre-hash, no context):
//
//   - The signed bytes (SigningPayload) are the RFC 8785 canonical JSON of
//     the manifest object with its "signature" member removed: members
//     sorted by UTF-16 code units, no whitespace, ECMAScript number and
//     string forms. Every other member, known or not, is covered; the
//     app_id passed beside the manifest in register.capability is not.
//   - The "signature" member holds the 64-byte signature as 128 hex
//     digits. Sign writes lowercase; Verify accepts either case.
//   - Private keys are PEM "PRIVATE KEY" blocks (PKCS#8, RFC 8410) and
//     public keys PEM "PUBLIC KEY" blocks (PKIX SubjectPublicKeyInfo), as
//     `openssl genpkey -algorithm ed25519` and `openssl pkey -pubout` write
//     them. The same signature can be made with
//     `openssl pkeyutl -sign -rawin -inkey key.pem -in payload`.
//
// A TrustStore holds the public keys of trusted publishers, one PEM file
// each, named after the publisher. Verify accepts a manifest whose
// signature any trusted key verifies and reports which publisher that is.
//
// # Invocation parameters
//
// CheckParams validates the params of invoke.capability against a
// capability's []api.ParamDecl and answers INVALID_PARAMS naming
// "params.<name>".
package manifest

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/canonjson"
)

// Limits of a manifest.
const (
	MaxCapabilities     = 1024
	MaxParameters       = 64 // per capability
	MaxDescription      = 4096
	MaxPublisher        = 256
	MaxConfirmationType = 64
	// MaxDurationMS bounds undo_window_ms and timeout_ms: 24 hours.
	MaxDurationMS = 24 * 60 * 60 * 1000
	MaxTier       = 3
)

var (
	capNameRE   = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	paramNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]{0,63}$`)
	versionRE   = regexp.MustCompile(`^1(\.[0-9]{1,9}){0,2}$`)
)

// paramTypes lists the parameter types in the order messages give them.
var paramTypes = []string{
	api.TypeString, api.TypeInteger, api.TypeNumber, api.TypeBoolean,
	api.TypeObject, api.TypeArray, api.TypeAny,
}

// Members each level of a manifest may have.
var (
	manifestMembers   = []string{"accessible_name", "app_id", "capabilities", "description", "publisher", "signature", "version"}
	capabilityMembers = []string{"confirmation_type", "description", "name", "parameters", "tier", "timeout_ms", "trust_level", "undo_window_ms"}
	parameterMembers  = []string{"description", "name", "required", "type"}
)

// CapabilityID is the id a registered capability gets: the app id and the
// capability name joined by a dot, e.g. "org.example.mail.compose".
func CapabilityID(appID, name string) string { return appID + "." + name }

// Parse decodes raw, the manifest object of register.capability, for
// appID and validates it field by field. It does not check appID itself
// (see ValidateAppID) nor the signature (see TrustStore.Verify); an empty
// "signature" is accepted here and left to the caller's policy on unsigned
// manifests.
func Parse(appID string, raw json.RawMessage) (*api.Manifest, error) {
	p := &parser{appID: appID}
	m, err := p.manifest(raw)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// parser carries the context error messages need.
type parser struct {
	appID string
}

// fieldError is a MANIFEST_INVALID error about the value at path; capName
// and paramName, when not empty, name the capability and parameter it is in.
func (p *parser) fieldError(capName, paramName, path, format string, args ...any) *api.Error {
	var b strings.Builder
	fmt.Fprintf(&b, "manifest %s: ", p.appID)
	if capName != "" {
		fmt.Fprintf(&b, "capability %q: ", capName)
	}
	if paramName != "" {
		fmt.Fprintf(&b, "parameter %q: ", paramName)
	}
	if path != "" {
		b.WriteString(path)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, format, args...)
	data := map[string]any{"app_id": p.appID}
	if capName != "" {
		data["capability"] = capName
	}
	if path != "" {
		data["field"] = path
	}
	return &api.Error{Code: api.CodeManifestInvalid, Message: b.String(), Data: data}
}

// object decodes raw as an object whose members are all in allowed.
func (p *parser) object(capName, paramName, path string, raw json.RawMessage, allowed []string) (map[string]json.RawMessage, *api.Error) {
	m, perr := p.members(capName, paramName, path, raw)
	if perr != nil {
		return nil, perr
	}
	return m, p.onlyMembers(capName, paramName, path, m, allowed)
}

// members decodes raw as an object. Member names are matched exactly, not
// with encoding/json's case folding for structs.
func (p *parser) members(capName, paramName, path string, raw json.RawMessage) (map[string]json.RawMessage, *api.Error) {
	if k := kindOf(raw); k != kindObject {
		return nil, p.fieldError(capName, paramName, path, "expected object, got %s", k)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, p.fieldError(capName, paramName, path, "%v", err)
	}
	return m, nil
}

// onlyMembers rejects the first member of m, in sorted order, not in allowed.
func (p *parser) onlyMembers(capName, paramName, path string, m map[string]json.RawMessage, allowed []string) *api.Error {
	var unknown []string
	for k := range m {
		if !slices.Contains(allowed, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	name := clip(unknown[0])
	return p.fieldError(capName, paramName, join(path, name),
		"unknown member %q (allowed: %s)", name, strings.Join(allowed, ", "))
}

func (p *parser) manifest(raw json.RawMessage) (*api.Manifest, error) {
	// Transform only to validate: it rejects what encoding/json lets
	// through (duplicate members, invalid UTF-8, unpaired surrogates). The
	// fields are read from raw so that numbers keep their exact text.
	if _, err := canonjson.Transform(raw); err != nil {
		return nil, p.fieldError("", "", "", "not valid I-JSON: %v", err)
	}
	obj, perr := p.object("", "", "", raw, manifestMembers)
	if perr != nil {
		return nil, perr
	}
	m := &api.Manifest{}

	v, ok := obj["version"]
	if !ok {
		return nil, p.fieldError("", "", "version", "required member missing")
	}
	if m.Version, perr = p.str("", "", "version", v, 32); perr != nil {
		return nil, perr
	}
	if !versionRE.MatchString(m.Version) {
		return nil, p.fieldError("", "", "version", "unsupported version %q, want major version 1 (\"1\", \"1.0\", \"1.2\")", m.Version)
	}

	sig, ok := obj["signature"]
	if !ok {
		return nil, p.fieldError("", "", "signature", "required member missing (it may be empty for an unsigned manifest)")
	}
	// The bound is loose so that Verify, not Parse, reports a signature of
	// the wrong length.
	if m.Signature, perr = p.str("", "", "signature", sig, MaxDescription); perr != nil {
		return nil, perr
	}
	// An app_id member binds the signature to one app: a manifest signed
	// for org.example.mail cannot be registered as another app.
	if v, ok := obj["app_id"]; ok {
		if m.AppID, perr = p.str("", "", "app_id", v, MaxAppID); perr != nil {
			return nil, perr
		}
		if m.AppID != p.appID {
			return nil, p.fieldError("", "", "app_id", "manifest is for app %q, not %q", m.AppID, p.appID)
		}
	}
	if v, ok := obj["publisher"]; ok {
		if m.Publisher, perr = p.str("", "", "publisher", v, MaxPublisher); perr != nil {
			return nil, perr
		}
	}
	if v, ok := obj["description"]; ok {
		if m.Description, perr = p.str("", "", "description", v, MaxDescription); perr != nil {
			return nil, perr
		}
	}
	// accessible_name ties the app to an application on the
	// accessibility bus; being signed, a publisher vouches for it.
	if v, ok := obj["accessible_name"]; ok {
		if m.AccessibleName, perr = p.str("", "", "accessible_name", v, MaxAppID); perr != nil {
			return nil, perr
		}
		if strings.TrimSpace(m.AccessibleName) == "" {
			return nil, p.fieldError("", "", "accessible_name", "must not be empty")
		}
	}

	caps, ok := obj["capabilities"]
	if !ok {
		return nil, p.fieldError("", "", "capabilities", "required member missing")
	}
	items, perr := p.array("", "", "capabilities", caps)
	if perr != nil {
		return nil, perr
	}
	if len(items) == 0 || len(items) > MaxCapabilities {
		return nil, p.fieldError("", "", "capabilities", "has %d entries, want 1 to %d", len(items), MaxCapabilities)
	}
	m.Capabilities = make([]api.CapabilityDecl, 0, len(items))
	seen := make(map[string]int, len(items))
	for i, item := range items {
		path := fmt.Sprintf("capabilities[%d]", i)
		c, perr := p.capability(path, item)
		if perr != nil {
			return nil, perr
		}
		if j, dup := seen[c.Name]; dup {
			return nil, p.fieldError(c.Name, "", path+".name", "duplicate capability name, first declared at capabilities[%d]", j)
		}
		seen[c.Name] = i
		m.Capabilities = append(m.Capabilities, c)
	}
	return m, nil
}

func (p *parser) capability(path string, raw json.RawMessage) (api.CapabilityDecl, *api.Error) {
	var c api.CapabilityDecl
	obj, perr := p.members("", "", path, raw)
	if perr != nil {
		return c, perr
	}
	// The name comes first so that later messages can use it.
	v, ok := obj["name"]
	if !ok {
		return c, p.fieldError("", "", path+".name", "required member missing")
	}
	name, perr := p.str("", "", path+".name", v, 64)
	if perr != nil {
		return c, perr
	}
	if !capNameRE.MatchString(name) {
		return c, p.fieldError("", "", path+".name", "invalid capability name %q, want ^[a-z][a-z0-9_]{0,63}$", name)
	}
	c.Name = name
	if perr := p.onlyMembers(c.Name, "", path, obj, capabilityMembers); perr != nil {
		return c, perr
	}
	fe := func(field, format string, args ...any) *api.Error {
		return p.fieldError(c.Name, "", path+"."+field, format, args...)
	}

	v, ok = obj["tier"]
	if !ok {
		return c, fe("tier", "required member missing")
	}
	tier, perr := p.integer(c.Name, "", path+".tier", v)
	if perr != nil {
		return c, perr
	}
	if tier < 1 || tier > MaxTier {
		return c, fe("tier", "tier %d out of range, want 1 to %d", tier, MaxTier)
	}
	c.Tier = int(tier)

	v, ok = obj["trust_level"]
	if !ok {
		return c, fe("trust_level", "required member missing")
	}
	if c.TrustLevel, perr = p.str(c.Name, "", path+".trust_level", v, 16); perr != nil {
		return c, perr
	}
	switch c.TrustLevel {
	case api.TrustAuto, api.TrustConfirm, api.TrustDeny:
	default:
		return c, fe("trust_level", "unknown trust level %q, want %q, %q or %q", c.TrustLevel, api.TrustAuto, api.TrustConfirm, api.TrustDeny)
	}

	if v, ok := obj["description"]; ok {
		if c.Description, perr = p.str(c.Name, "", path+".description", v, MaxDescription); perr != nil {
			return c, perr
		}
	}
	if v, ok := obj["confirmation_type"]; ok {
		if c.ConfirmationType, perr = p.str(c.Name, "", path+".confirmation_type", v, MaxConfirmationType); perr != nil {
			return c, perr
		}
	}
	for _, d := range []struct {
		field string
		dst   *int64
	}{{"undo_window_ms", &c.UndoWindowMS}, {"timeout_ms", &c.TimeoutMS}} {
		v, ok := obj[d.field]
		if !ok {
			continue
		}
		n, perr := p.integer(c.Name, "", path+"."+d.field, v)
		if perr != nil {
			return c, perr
		}
		if n < 0 || n > MaxDurationMS {
			return c, fe(d.field, "%d out of range, want 0 to %d (24h)", n, MaxDurationMS)
		}
		*d.dst = n
	}

	if v, ok := obj["parameters"]; ok {
		items, perr := p.array(c.Name, "", path+".parameters", v)
		if perr != nil {
			return c, perr
		}
		if len(items) > MaxParameters {
			return c, fe("parameters", "has %d entries, want at most %d", len(items), MaxParameters)
		}
		c.Parameters = make([]api.ParamDecl, 0, len(items))
		seen := make(map[string]int, len(items))
		for i, item := range items {
			ppath := fmt.Sprintf("%s.parameters[%d]", path, i)
			pd, perr := p.parameter(c.Name, ppath, item)
			if perr != nil {
				return c, perr
			}
			if j, dup := seen[pd.Name]; dup {
				return c, p.fieldError(c.Name, pd.Name, ppath+".name", "duplicate parameter name, first declared at %s.parameters[%d]", path, j)
			}
			seen[pd.Name] = i
			c.Parameters = append(c.Parameters, pd)
		}
	}
	return c, nil
}

func (p *parser) parameter(capName, path string, raw json.RawMessage) (api.ParamDecl, *api.Error) {
	var pd api.ParamDecl
	obj, perr := p.object(capName, "", path, raw, parameterMembers)
	if perr != nil {
		return pd, perr
	}
	v, ok := obj["name"]
	if !ok {
		return pd, p.fieldError(capName, "", path+".name", "required member missing")
	}
	if pd.Name, perr = p.str(capName, "", path+".name", v, 64); perr != nil {
		return pd, perr
	}
	if !paramNameRE.MatchString(pd.Name) {
		return pd, p.fieldError(capName, "", path+".name", "invalid parameter name %q, want ^[a-zA-Z_][a-zA-Z0-9_]{0,63}$", pd.Name)
	}

	v, ok = obj["type"]
	if !ok {
		return pd, p.fieldError(capName, pd.Name, path+".type", "required member missing")
	}
	if pd.Type, perr = p.str(capName, pd.Name, path+".type", v, 16); perr != nil {
		return pd, perr
	}
	if !slices.Contains(paramTypes, pd.Type) {
		return pd, p.fieldError(capName, pd.Name, path+".type", "unknown type %q, want one of %s", pd.Type, strings.Join(paramTypes, ", "))
	}

	if v, ok := obj["description"]; ok {
		if pd.Description, perr = p.str(capName, pd.Name, path+".description", v, MaxDescription); perr != nil {
			return pd, perr
		}
	}
	if v, ok := obj["required"]; ok {
		if k := kindOf(v); k != kindBoolean {
			return pd, p.fieldError(capName, pd.Name, path+".required", "expected boolean, got %s", k)
		}
		var req bool
		if err := json.Unmarshal(v, &req); err != nil {
			return pd, p.fieldError(capName, pd.Name, path+".required", "%v", err)
		}
		pd.Required = &req
	}
	return pd, nil
}

// str decodes a string member of at most maxLen bytes.
func (p *parser) str(capName, paramName, path string, raw json.RawMessage, maxLen int) (string, *api.Error) {
	if k := kindOf(raw); k != kindString {
		return "", p.fieldError(capName, paramName, path, "expected string, got %s", k)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", p.fieldError(capName, paramName, path, "%v", err)
	}
	if len(s) > maxLen {
		return "", p.fieldError(capName, paramName, path, "string of %d bytes is longer than %d", len(s), maxLen)
	}
	return s, nil
}

// integer decodes a member that must be a whole JSON number.
func (p *parser) integer(capName, paramName, path string, raw json.RawMessage) (int64, *api.Error) {
	if k := kindOf(raw); k != kindNumber {
		return 0, p.fieldError(capName, paramName, path, "expected integer, got %s", k)
	}
	n, ok, why := parseInt(string(raw))
	if !ok {
		return 0, p.fieldError(capName, paramName, path, "expected integer, got %s, which %s", clip(string(raw)), why)
	}
	return n, nil
}

// array decodes a member that must be a JSON array.
func (p *parser) array(capName, paramName, path string, raw json.RawMessage) ([]json.RawMessage, *api.Error) {
	if k := kindOf(raw); k != kindArray {
		return nil, p.fieldError(capName, paramName, path, "expected array, got %s", k)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, p.fieldError(capName, paramName, path, "%v", err)
	}
	return items, nil
}

// join appends a member name to a JSON path.
func join(path, member string) string {
	if path == "" {
		return member
	}
	return path + "." + member
}

// clip shortens s for an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	// Cut at a rune boundary so the message stays valid UTF-8.
	i := max
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}
