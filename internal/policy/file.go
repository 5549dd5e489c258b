package policy

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/pcp-dev/pcp/api"
)

// MaxFileSize bounds the policy file; a hand-written one is a few KiB.
const MaxFileSize = 1 << 20

// maxUnknownReported bounds how many unknown keys one error lists.
const maxUnknownReported = 10

// Error is a problem with a policy file.
type Error struct {
	File string // the name given to Parse or the path given to Load
	Line int    // 1-based; 0 when not known
	Key  string // dotted TOML key, e.g. apps."org.pcp.notes".trust_level; "" when none applies
	Err  error  // what is wrong
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("pcp: policy ")
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Key != "" {
		b.WriteString(": ")
		b.WriteString(e.Key)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// The file as decoded. Leaves are setting types whose UnmarshalTOML
// validates the value, so the decoder reports the problem with the key's
// position; tables are plain structs and maps whose keys checkKeys has
// already vetted (the decoder matches struct fields case-insensitively,
// which the format does not allow).
type fileDoc struct {
	Defaults defaultsDoc          `toml:"defaults"`
	Apps     map[string]appDoc    `toml:"apps"`
	Sources  map[string]sourceDoc `toml:"sources"`
	Agents   map[string]agentDoc  `toml:"agents"`
	Scomp    scompDoc             `toml:"scomp"`
}

type defaultsDoc struct {
	ConfirmationExpiry     expirySetting  `toml:"confirmation_expiry"`
	Timeout                timeoutSetting `toml:"timeout"`
	RatePerApp             rateSetting    `toml:"rate_per_app"`
	RatePerAppBurst        burstSetting   `toml:"rate_per_app_burst"`
	RatePerConnection      rateSetting    `toml:"rate_per_connection"`
	RatePerConnectionBurst burstSetting   `toml:"rate_per_connection_burst"`
	Tier3                  trustSetting   `toml:"tier3"`
}

type appDoc struct {
	TrustLevel   trustSetting             `toml:"trust_level"`
	Tier3        trustSetting             `toml:"tier3"`
	Timeout      timeoutSetting           `toml:"timeout"`
	Capabilities map[string]capabilityDoc `toml:"capabilities"`
}

type capabilityDoc struct {
	TrustLevel trustSetting   `toml:"trust_level"`
	Timeout    timeoutSetting `toml:"timeout"`
}

type sourceDoc struct {
	TrustLevel trustSetting `toml:"trust_level"`
}

// schema lists the keys a table allows, each with the schema of its
// table or leaf for a value. A schema whose only key is "*" is a table
// of user-named tables (app ids, capability names, sources).
type schema map[string]*schema

var (
	leaf         *schema // nil: the key holds a value
	capabilityKS = schema{"trust_level": leaf, "timeout": leaf}
	appKS        = schema{"trust_level": leaf, "tier3": leaf, "timeout": leaf, "capabilities": &schema{"*": &capabilityKS}}
	defaultsKS   = schema{
		"confirmation_expiry": leaf, "timeout": leaf,
		"rate_per_app": leaf, "rate_per_app_burst": leaf,
		"rate_per_connection": leaf, "rate_per_connection_burst": leaf,
		"tier3": leaf,
	}
	rootKS = schema{
		"defaults": &defaultsKS,
		"apps":     &schema{"*": &appKS},
		"sources":  &schema{"*": &schema{"trust_level": leaf}},
		"agents":   &schema{"*": &agentKS},
		"scomp":    &scompKS,
	}
)

func (s schema) names() string {
	names := make([]string, 0, len(s))
	for k := range s {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// checkKeys walks every key of the document, in document order, against
// the schema. It returns the key problems found; values are left to the
// decoder.
func checkKeys(md *toml.MetaData) []keyProblem {
	var probs []keyProblem
	seen := map[string]bool{}
	add := func(k toml.Key, err error) {
		s := k.String()
		if !seen[s] {
			seen[s] = true
			probs = append(probs, keyProblem{k, err})
		}
	}
	for _, k := range md.Keys() {
		s := rootKS
		for i := range k {
			prefix := k[:i+1]
			var next *schema
			if wild, ok := s["*"]; ok {
				if err := checkName(k[:i], k[i]); err != nil {
					add(prefix, err)
					break
				}
				next = wild
			} else if next, ok = s[k[i]]; !ok {
				add(prefix, fmt.Errorf("unknown key, want one of %s (keys are case-sensitive)", s.names()))
				break
			}
			if next == leaf {
				break // the decoder checks the value, and reports a table here
			}
			if t := md.Type(prefix...); t != "" && t != "Hash" {
				add(prefix, fmt.Errorf("must be a table, not %s", describeTOMLType(t)))
				break
			}
			s = *next
		}
	}
	return probs
}

type keyProblem struct {
	key toml.Key
	err error
}

// checkName vets a user-chosen table name: an app id, a capability name
// or a source. parent is the key of the table it appears in.
func checkName(parent toml.Key, name string) error {
	if name == "" {
		return errors.New("empty name")
	}
	if len(parent) == 1 && parent[0] == "sources" && !api.InvocationSource(name).Valid() {
		return fmt.Errorf("unknown invocation source %q; want %q", name, api.SourceSystemIntelligence)
	}
	if len(parent) == 1 && parent[0] == "agents" {
		return api.CheckAgentName(name)
	}
	return nil
}

func describeTOMLType(t string) string {
	switch t {
	case "Integer":
		return "an integer"
	case "Float":
		return "a float"
	case "String":
		return "a string"
	case "Bool":
		return "a boolean"
	case "Datetime":
		return "a datetime"
	case "Array":
		return "an array"
	case "ArrayHash":
		return "an array of tables"
	case "Hash":
		return "a table"
	}
	return t
}

// describeValue names the TOML type of a decoded value, with the value
// when it is short.
func describeValue(v any) string {
	switch v := v.(type) {
	case string:
		if len(v) > 40 {
			return "a string"
		}
		return fmt.Sprintf("string %q", v)
	case int64:
		return fmt.Sprintf("integer %d", v)
	case float64:
		return fmt.Sprintf("float %v", v)
	case bool:
		return fmt.Sprintf("boolean %v", v)
	case time.Time:
		return "a datetime"
	case []map[string]any:
		return "an array of tables"
	case []any:
		return "an array"
	case map[string]any:
		return "a table"
	}
	return fmt.Sprintf("%T", v)
}

// trustSetting is an optional trust level.
type trustSetting struct {
	set   bool
	level string
}

func (s *trustSetting) UnmarshalTOML(v any) error {
	str, ok := v.(string)
	if !ok {
		return fmt.Errorf("want a trust level string, got %s", describeValue(v))
	}
	if rank(str) < 0 {
		return fmt.Errorf("unknown trust level %q, want %q, %q or %q", str, api.TrustAuto, api.TrustConfirm, api.TrustDeny)
	}
	s.set, s.level = true, str
	return nil
}

// durationSetting is an optional duration.
type durationSetting struct {
	set bool
	d   time.Duration
}

func (s *durationSetting) unmarshal(v any, lo, hi time.Duration) error {
	str, ok := v.(string)
	if !ok {
		return fmt.Errorf("want a duration string such as \"30s\", got %s", describeValue(v))
	}
	d, err := time.ParseDuration(str)
	if err != nil {
		return fmt.Errorf("invalid duration %q, want a duration such as \"500ms\", \"30s\" or \"2m\"", str)
	}
	if d <= 0 {
		return fmt.Errorf("duration %q must be positive", str)
	}
	if d < lo || d > hi {
		return fmt.Errorf("duration %q out of range, want %s to %s", str, formatDuration(lo), formatDuration(hi))
	}
	s.set, s.d = true, d
	return nil
}

// timeoutSetting is an optional execution timeout.
type timeoutSetting struct{ durationSetting }

func (s *timeoutSetting) UnmarshalTOML(v any) error {
	return s.unmarshal(v, MinTimeout, MaxTimeout)
}

// expirySetting is an optional confirmation expiry.
type expirySetting struct{ durationSetting }

func (s *expirySetting) UnmarshalTOML(v any) error {
	return s.unmarshal(v, MinConfirmationExpiry, MaxConfirmationExpiry)
}

// rateSetting is an optional rate in events per second.
type rateSetting struct {
	set bool
	r   float64
}

func (s *rateSetting) UnmarshalTOML(v any) error {
	var r float64
	switch v := v.(type) {
	case int64:
		r = float64(v)
	case float64:
		r = v
	default:
		return fmt.Errorf("want a number of invocations per second, got %s", describeValue(v))
	}
	if math.IsNaN(r) || math.IsInf(r, 0) {
		return fmt.Errorf("rate %v is not a finite number", r)
	}
	if r < 0 {
		return fmt.Errorf("rate %v is negative, want 0 (no limit) or more", r)
	}
	s.set, s.r = true, r
	return nil
}

// burstSetting is an optional token-bucket burst.
type burstSetting struct {
	set bool
	n   int
}

func (s *burstSetting) UnmarshalTOML(v any) error {
	n, ok := v.(int64)
	if !ok {
		return fmt.Errorf("want an integer burst, got %s", describeValue(v))
	}
	if n < 0 {
		return fmt.Errorf("burst %d is negative, want 0 or more", n)
	}
	if n > math.MaxInt32 {
		return fmt.Errorf("burst %d is too large, want at most %d", n, math.MaxInt32)
	}
	s.set, s.n = true, int(n)
	return nil
}

// decode parses and validates data; name is used in errors only.
func decode(name string, data []byte) (*fileDoc, error) {
	if len(data) > MaxFileSize {
		return nil, &Error{File: name, Err: fmt.Errorf("file is %d bytes, more than the %d allowed", len(data), MaxFileSize)}
	}
	text := string(data)
	var doc fileDoc
	md, decErr := toml.Decode(text, &doc)
	// Key problems come first: they are found in document order, and a
	// misspelt key is the likelier mistake than the value it caused the
	// decoder to trip on.
	if probs := checkKeys(&md); len(probs) > 0 {
		return nil, keyErrors(name, text, probs)
	}
	if decErr != nil {
		var pe toml.ParseError
		if errors.As(decErr, &pe) {
			e := &Error{File: name, Line: pe.Position.Line, Err: errors.New(pe.Message)}
			if len(md.Keys()) > 0 {
				// A value the decoder rejected: LastKey is that value's key.
				// (On a syntax error md is empty and LastKey only says
				// where the parser had got to.)
				e.Key = pe.LastKey
				if e.Line == 0 {
					// A key only implied by a dotted key below it has no
					// position of its own.
					e.Line = lineOf(text, parseKey(pe.LastKey))
				}
			} else if pe.LastKey != "" {
				e.Err = fmt.Errorf("%s (after key %s)", pe.Message, pe.LastKey)
			}
			return nil, e
		}
		return nil, &Error{File: name, Err: errors.New(strings.TrimPrefix(decErr.Error(), "toml: "))}
	}
	if und := md.Undecoded(); len(und) > 0 {
		// Unreachable while checkKeys matches the doc types; kept so a
		// schema gap fails loudly rather than ignoring a rule.
		probs := make([]keyProblem, len(und))
		for i, k := range und {
			probs[i] = keyProblem{k, errors.New("unknown key")}
		}
		return nil, keyErrors(name, text, probs)
	}
	return &doc, nil
}

func keyErrors(name, text string, probs []keyProblem) error {
	var errs []error
	for i, p := range probs {
		if i == maxUnknownReported {
			errs = append(errs, &Error{File: name, Err: fmt.Errorf("%d more key problems not shown", len(probs)-i)})
			break
		}
		errs = append(errs, &Error{File: name, Line: lineOf(text, p.key), Key: p.key.String(), Err: p.err})
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// lineOf finds, on a best-effort basis, the line that defines key or a
// key below it: the TOML decoder does not export key positions. It
// decodes the file line by line, tracking table headers, and gives up
// (0) on keys defined inside multi-line values.
func lineOf(text string, key toml.Key) int {
	if len(key) == 0 {
		return 0
	}
	var table toml.Key
	for i, line := range strings.Split(text, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || t[0] == '#' {
			continue
		}
		var m map[string]any
		md, err := toml.Decode(t, &m)
		if before, _, ok := strings.Cut(t, "="); err != nil && ok && t[0] != '[' {
			// A value continued on later lines: the key alone will do.
			m = nil
			md, err = toml.Decode(before+"= 0", &m)
		}
		if err != nil || len(md.Keys()) == 0 {
			continue
		}
		keys := md.Keys()
		if t[0] == '[' {
			table = keys[0]
			if hasPrefix(table, key) {
				return i + 1
			}
			continue
		}
		for _, k := range keys {
			if hasPrefix(append(table[:len(table):len(table)], k...), key) {
				return i + 1
			}
		}
	}
	return 0
}

// parseKey parses a dotted TOML key as toml.Key.String writes it; nil if
// it is not one.
func parseKey(s string) toml.Key {
	var m map[string]any
	md, err := toml.Decode(s+" = 0", &m)
	if err != nil || len(md.Keys()) == 0 {
		return nil
	}
	keys := md.Keys()
	return keys[len(keys)-1]
}

func hasPrefix(k, prefix toml.Key) bool {
	return len(k) >= len(prefix) && slices.Equal(k[:len(prefix)], prefix)
}
