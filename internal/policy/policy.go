package policy

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/pcp-dev/pcp/api"
)

// Built-in defaults and bounds. The defaults equal the daemon's own
// (core.DefaultTimeout, core.DefaultConfirmationTTL,
// core.DefaultRateLimits), so an empty policy changes nothing.
const (
	DefaultTimeout = 30 * time.Second
	MinTimeout     = 100 * time.Millisecond
	MaxTimeout     = time.Hour

	DefaultConfirmationExpiry = 2 * time.Minute
	MinConfirmationExpiry     = 5 * time.Second
	MaxConfirmationExpiry     = 24 * time.Hour

	DefaultRatePerApp             = 50.0
	DefaultRatePerAppBurst        = 100
	DefaultRatePerConnection      = 500.0
	DefaultRatePerConnectionBurst = 1000
)

// Provenances that name no table of the file.
const (
	FromManifest = "manifest"
	FromBuiltin  = "built-in default"
)

// Policy is a loaded policy file. It is immutable and safe for
// concurrent use.
type Policy struct {
	path   string
	loaded bool   // a file was read and parsed
	base   string // file name as provenances give it

	// Read-only after Parse; never handed out.
	defaults defaultsDoc
	apps     map[string]appDoc
	sources  map[string]sourceDoc
	agents   map[string]agentDoc
	scomp    scompDoc
}

// Valued is an effective value and where it came from (see the package
// doc for the forms From takes).
type Valued[T any] struct {
	Value T      `json:"value"`
	From  string `json:"from"`
}

// Decision is the effective trust level and timeout of one capability.
type Decision struct {
	TrustLevel Valued[string]        `json:"trust_level"`
	Timeout    Valued[time.Duration] `json:"timeout"`
}

// Limits are the effective rate limits. A zero rate means no limit; a
// zero burst lets the daemon choose.
type Limits struct {
	PerApp             Valued[float64] `json:"per_app"`
	PerAppBurst        Valued[int]     `json:"per_app_burst"`
	PerConnection      Valued[float64] `json:"per_connection"`
	PerConnectionBurst Valued[int]     `json:"per_connection_burst"`
}

// Default returns the policy in force when there is no file.
func Default() *Policy {
	return &Policy{base: "policy.toml"}
}

// Load reads and parses the policy file at path. A missing file is not
// an error: the result is Default() with Path() set to path.
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		p := Default()
		p.path = path
		p.base = filepath.Base(path)
		return p, nil
	}
	if err != nil {
		return nil, &Error{File: path, Err: err}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, &Error{File: path, Err: err}
	}
	return Parse(path, data)
}

// Parse parses a policy file's contents. name is the file's path: errors
// give it, Path returns it, and provenances give its base name.
func Parse(name string, data []byte) (*Policy, error) {
	doc, err := decode(name, data)
	if err != nil {
		return nil, err
	}
	return &Policy{
		path:     name,
		loaded:   true,
		base:     filepath.Base(name),
		defaults: doc.Defaults,
		apps:     doc.Apps,
		sources:  doc.Sources,
		agents:   doc.Agents,
		scomp:    doc.Scomp,
	}, nil
}

// Path is the path the policy was loaded from, or "" for Default().
func (p *Policy) Path() string { return p.path }

// Loaded reports whether a file was read, as opposed to the built-in
// defaults standing in for a missing one.
func (p *Policy) Loaded() bool { return p.loaded }

// from is the provenance of the table at key.
func (p *Policy) from(key ...string) string {
	return p.base + ": " + toml.Key(key).String()
}

// rank orders trust levels; -1 for an unknown one.
func rank(level string) int {
	switch level {
	case api.TrustAuto:
		return 0
	case api.TrustConfirm:
		return 1
	case api.TrustDeny:
		return 2
	}
	return -1
}

// Decide computes the effective trust level and timeout of capability
// capName of app appID invoked from source, given what its manifest
// declares (declaredTimeoutMS <= 0: none). See the package doc for the
// precedence.
func (p *Policy) Decide(appID, capName, source, declaredTrust string, declaredTimeoutMS int64) Decision {
	var d Decision
	app, hasApp := p.apps[appID]
	capRule, hasCap := app.Capabilities[capName]

	d.TrustLevel = Valued[string]{declaredTrust, FromManifest}
	if rank(declaredTrust) < 0 {
		// The manifest package rejects these; should one get through,
		// unknown is least privilege.
		d.TrustLevel = Valued[string]{api.TrustDeny, fmt.Sprintf("%s (unknown trust level %q)", FromManifest, declaredTrust)}
	}
	if hasApp && app.TrustLevel.set {
		d.TrustLevel = Valued[string]{app.TrustLevel.level, p.from("apps", appID)}
	}
	if hasCap && capRule.TrustLevel.set {
		d.TrustLevel = Valued[string]{capRule.TrustLevel.level, p.from("apps", appID, "capabilities", capName)}
	}
	if src, ok := p.sources[source]; ok && src.TrustLevel.set && rank(src.TrustLevel.level) > rank(d.TrustLevel.Value) {
		d.TrustLevel = Valued[string]{src.TrustLevel.level, p.from("sources", source)}
	}

	switch {
	case hasCap && capRule.Timeout.set:
		d.Timeout = Valued[time.Duration]{capRule.Timeout.d, p.from("apps", appID, "capabilities", capName)}
	case hasApp && app.Timeout.set:
		d.Timeout = Valued[time.Duration]{app.Timeout.d, p.from("apps", appID)}
	case declaredTimeoutMS > 0:
		d.Timeout = manifestTimeout(declaredTimeoutMS)
	case p.defaults.Timeout.set:
		d.Timeout = Valued[time.Duration]{p.defaults.Timeout.d, p.from("defaults")}
	default:
		d.Timeout = Valued[time.Duration]{DefaultTimeout, FromBuiltin}
	}
	return d
}

// manifestTimeout clamps a manifest's timeout_ms (> 0) to the bounds.
func manifestTimeout(ms int64) Valued[time.Duration] {
	switch {
	case ms > int64(MaxTimeout/time.Millisecond):
		return Valued[time.Duration]{MaxTimeout, fmt.Sprintf("%s (clamped to %s)", FromManifest, formatDuration(MaxTimeout))}
	case ms < int64(MinTimeout/time.Millisecond):
		return Valued[time.Duration]{MinTimeout, fmt.Sprintf("%s (clamped to %s)", FromManifest, formatDuration(MinTimeout))}
	}
	return Valued[time.Duration]{time.Duration(ms) * time.Millisecond, FromManifest}
}

// Limits returns the effective rate limits.
func (p *Policy) Limits() Limits {
	def := p.defaults
	return Limits{
		PerApp:             pick(def.RatePerApp.set, def.RatePerApp.r, DefaultRatePerApp, p),
		PerAppBurst:        pick(def.RatePerAppBurst.set, def.RatePerAppBurst.n, DefaultRatePerAppBurst, p),
		PerConnection:      pick(def.RatePerConnection.set, def.RatePerConnection.r, DefaultRatePerConnection, p),
		PerConnectionBurst: pick(def.RatePerConnectionBurst.set, def.RatePerConnectionBurst.n, DefaultRatePerConnectionBurst, p),
	}
}

// ConfirmationExpiry is how long a pending confirmation waits for the
// user before it expires.
func (p *Policy) ConfirmationExpiry() Valued[time.Duration] {
	e := p.defaults.ConfirmationExpiry
	return pick(e.set, e.d, DefaultConfirmationExpiry, p)
}

// pick is v from [defaults] when set, else the built-in value.
func pick[T any](set bool, v, builtin T, p *Policy) Valued[T] {
	if set {
		return Valued[T]{v, p.from("defaults")}
	}
	return Valued[T]{builtin, FromBuiltin}
}

// formatDuration writes d as time.Duration.String does, without the zero
// trailing units: "2m" rather than "2m0s", "1h" rather than "1h0m0s".
func formatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
