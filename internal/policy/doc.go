// Package policy reads the user's policy file, policy.toml, and computes
// from it and a capability's manifest declaration the trust level and
// timeout the daemon enforces, plus the global rate limits, the
// confirmation expiry and the limits of the scomp face's evals. The file belongs to the person whose machine it
// is: it may loosen what a manifest declares as well as tighten it.
//
// Load reads the file (the caller chooses the path, normally
// $XDG_CONFIG_HOME/pcp/policy.toml); a missing file is not an error and
// yields the built-in defaults. A *Policy is immutable and safe for
// concurrent use; reloading means loading a new one.
//
// # File format
//
// The file is TOML. Every key is optional and case-sensitive:
//
//	[defaults]
//	confirmation_expiry = "2m"        # duration, 5s..24h; built-in 2m
//	timeout = "30s"                   # duration, 100ms..1h; built-in 30s
//	rate_per_app = 50.0               # number >= 0, invocations/s per source and app; 0 = no limit
//	rate_per_app_burst = 100          # integer >= 0; 0 lets the daemon choose
//	rate_per_connection = 500.0       # number >= 0, invocations and actions/s per connection; 0 = no limit
//	rate_per_connection_burst = 1000  # integer >= 0; 0 lets the daemon choose
//	tier3 = "confirm"                 # Tier 3 for every app: "auto", "confirm" or "deny"; built-in confirm
//
//	[apps."<app id>"]
//	trust_level = "confirm"           # "auto", "confirm" or "deny"
//	tier3 = "auto"                    # input simulated at this app's elements (see Tier 3)
//	timeout = "10s"                   # duration, 100ms..1h
//
//	[apps."<app id>".capabilities.<capability name>]
//	trust_level = "deny"
//	timeout = "5s"
//
//	[sources.<invocation source>]     # "SystemIntelligence" is the only source today
//	trust_level = "confirm"           # a floor: only ever tightens
//
//	[agents.<agent name>]             # a contained agent (pcpctl agent run --name)
//	trust_level = "confirm"           # a floor for all it invokes; "deny": it may invoke nothing
//
//	[agents.<agent name>.apps."<app id>"]
//	trust_level = "auto"              # this agent, this app
//
//	[agents.<agent name>.apps."<app id>".capabilities.<capability name>]
//	trust_level = "deny"              # this agent, this capability
//
//	[scomp]                           # the scomp face's JavaScript evals
//	eval_timeout = "30s"              # duration, 100ms..1h; built-in 30s
//	memory_limit_mib = 64             # integer, 1..4096, per session's VM; built-in 64
//
//	[agents.<agent name>.scomp]       # this agent's scomp sessions
//	eval_timeout = "2m"               # as in [scomp], which it overrides
//	memory_limit_mib = 256
//
// Durations are strings in Go's time.ParseDuration form ("500ms", "30s",
// "2m", "1h30m"). Rates may be written as integers or floats.
//
// Loading fails, with an *Error naming the file, the line when it is
// known and the dotted key, on: TOML syntax errors; keys the format above
// does not define (including a wrong letter case); a table where a value
// belongs or a value where a table belongs; a value of the wrong TOML
// type; a trust level other than the three; an unparsable, zero, negative
// or out-of-range duration; a negative, NaN or infinite rate; a negative
// burst; a memory limit that is not an integer from 1 to 4096; a source other than the ones api.InvocationSource.Valid accepts;
// an empty app id or capability name; an agent name that
// api.CheckAgentName refuses; a file over MaxFileSize. Unknown
// keys are all reported, joined; any other problem stops at the first.
//
// # Trust levels
//
// Levels are ordered auto < confirm < deny. For a capability named c of
// app a invoked from source s, Decide computes:
//
//  1. the manifest's declared level (an unknown one, which the manifest
//     package would have rejected, counts as deny);
//  2. replaced by apps."a".trust_level, if set;
//  3. replaced by apps."a".capabilities.c.trust_level, if set;
//  4. for a request from the contained agent n (its own socket; the
//     daemon, not the agent, names it): replaced by
//     agents.n.apps."a".trust_level, if set, then by
//     agents.n.apps."a".capabilities.c.trust_level, if set;
//  5. raised to sources.s.trust_level if that is stricter:
//     max(level, source level). A source rule never loosens;
//  6. raised to agents.n.trust_level if that is stricter. An agent's
//     floor never loosens either.
//
// A request on the shared agent socket or from the user has no agent
// name; step 4 and 6 do not apply to it.
//
// # Timeouts
//
// The execution timeout is the first of: apps."a".capabilities.c.timeout,
// apps."a".timeout, the manifest's timeout_ms (when > 0), defaults.timeout,
// 30s. Policy values outside 100ms..1h are load errors; a manifest value
// outside them is clamped to the nearest bound.
//
// # scomp
//
// The scomp face runs an agent's JavaScript in one QuickJS VM per
// session. Scomp(agent) gives the limits of that session's evals: each of
// eval_timeout (the wall-clock time of one eval) and memory_limit_mib
// (the VM's heap, in MiB of 1 << 20 bytes) is the first set of:
// agents.<agent>.scomp, scomp, the built-in default (30s, 64). The two
// keys are independent: an agent table that sets only one inherits the
// other. A session that is no contained agent's uses scomp and the
// defaults.
//
// # Tier 3
//
// When an element's accessibility gives it no action (invoke.action
// answers ACTION_NOT_SUPPORTED from the adapter) the daemon may click at
// the element's place on the screen through the platform adapter
// (system.input.click and its kin). Tier3 decides under which trust
// level: apps."a".tier3, else defaults.tier3, else confirm. "deny" keeps
// the adapter's refusal.
//
// # Provenance
//
// Every effective value is a Valued, whose From says where it came from:
//
//	policy.toml: apps."org.pcp.notes".capabilities.delete   a capability rule
//	policy.toml: apps."org.pcp.notes"                       an app rule
//	policy.toml: sources.SystemIntelligence                 a source floor that raised the level
//	policy.toml: agents.claude.apps."org.pcp.notes"         an agent's app rule (and .capabilities.<c>)
//	policy.toml: agents.claude                              an agent's floor that raised the level
//	policy.toml: agents.claude.scomp                        an agent's scomp limits
//	policy.toml: scomp                                      the [scomp] table
//	policy.toml: defaults                                   the [defaults] table
//	manifest                                                the manifest's declaration
//	manifest (clamped to 1h)                                a manifest timeout outside the bounds
//	manifest (unknown trust level "x")                      an invalid declaration, denied
//	built-in default                                        nothing set it
//
// "policy.toml" is the base name of the file actually read, and the table
// is written as a TOML key, quoted where TOML needs quotes. A source floor
// equal to or below the level leaves From as it was.
//
// # JSON
//
// View, CapabilityView, Limits and ScompLimits marshal for `pcpctl policy
// show`. A Valued marshals as {"value": V, "from": "..."}; a
// Valued[time.Duration] writes V as a duration string ("30s", "2m",
// "1h30m") and reads back any time.ParseDuration string. The view's
// "scomp" member holds the scomp limits of the view's agent (the global
// ones when it has none):
//
//	"scomp": {
//	  "eval_timeout": {"value": "30s", "from": "built-in default"},
//	  "memory_limit_mib": {"value": 256, "from": "policy.toml: agents.claude.scomp"}
//	}
package policy
