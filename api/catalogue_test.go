package api

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite docs/errors.md from the catalogue")

// The catalogue must hold every code of spec 000, each once, with a name
// and a stream code.
func TestCatalogueComplete(t *testing.T) {
	spec := map[Code]string{
		-32700: "PARSE_ERROR", -32600: "INVALID_REQUEST", -32601: "METHOD_NOT_FOUND", -32602: "INVALID_PARAMS",
		-32603: "INTERNAL_ERROR", -32000: "APP_NOT_FOUND", -32001: "SURFACE_NOT_FOUND", -32002: "ELEMENT_NOT_FOUND",
		-32003: "ACTION_NOT_SUPPORTED", -32004: "PERMISSION_DENIED", -32005: "CONFIRMATION_REQUIRED",
		-32006: "CONFIRMATION_DENIED", -32007: "CONFIRMATION_EXPIRED", -32008: "TARGET_AMBIGUOUS",
		-32009: "EXECUTION_TIMEOUT", -32010: "APP_UNRESPONSIVE", -32011: "NO_ATSPI2_SUPPORT",
		-32012: "INPUT_SIMULATION_FAILED", -32015: "CAPABILITY_NOT_FOUND", -32016: "MANIFEST_INVALID",
		-32017: "MANIFEST_SIGNATURE_INVALID", -32018: "RATE_LIMITED", -32019: "CAPTURE_FAILED",
		-32020: "TEXT_TOO_LARGE", -32025: "WINE_BRIDGE_ERROR",
	}
	cat := Catalogue()
	if len(cat) != len(spec) {
		t.Errorf("catalogue has %d entries, spec 000 has %d", len(cat), len(spec))
	}
	for code, name := range spec {
		info, ok := code.Info()
		if !ok || info.Name != name {
			t.Errorf("code %d: got %q (known %v), want %q", code, info.Name, ok, name)
		}
		switch info.StreamCode {
		case 400, 403, 404, 409, 429, 500, 504:
		default:
			t.Errorf("%s: stream code %d is not one of the documented codes", name, info.StreamCode)
		}
	}
}

func TestErrorIsComparesCodes(t *testing.T) {
	err := fmt.Errorf("wrapped: %w", Errorf(CodeRateLimited, map[string]any{"retry_after_ms": 10}, "slow down"))
	if !errors.Is(err, ErrRateLimited) {
		t.Error("errors.Is should match by code through wrapping")
	}
	if errors.Is(err, ErrAppNotFound) {
		t.Error("errors.Is matched a different code")
	}
	if got := AsError(errors.New("x")).Code; got != CodeInternalError {
		t.Errorf("AsError of a plain error = %v, want INTERNAL_ERROR", got)
	}
}

// docs/errors.md is generated from the catalogue; this test keeps it in
// step (run with -update to regenerate).
func TestErrorDocInSync(t *testing.T) {
	const path = "../docs/errors.md"
	var b strings.Builder
	b.WriteString(`# Error catalogue

Generated from ` + "`api/errors.go`" + ` by ` + "`go test ./api -update`" + `; do not edit by hand.

Every PCP error has one entry here, used by every face. The JSON-RPC face
(spec 000) sends ` + "`code`" + `, ` + "`message`" + ` and ` + "`data`" + `. The framed stream face
(spec 001) sends the stream code in its ErrorResponse and carries the
JSON-RPC code and the data alongside, so nothing is lost on either face.
Where spec 001's five codes (400, 404, 429, 500, 504) have no fitting
entry, 403 (refused by policy or by the user) and 409 (ambiguous target)
are added.

| JSON-RPC code | name | stream code | default message |
|---:|---|---:|---|
`)
	for _, e := range Catalogue() {
		fmt.Fprintf(&b, "| %d | `%s` | %d | %s |\n", e.Code, e.Name, e.StreamCode, e.Message)
	}
	b.WriteString(`
## What ` + "`data`" + ` carries

| error | data members |
|---|---|
| ` + "`PARSE_ERROR`, `INVALID_REQUEST`" + ` | ` + "`limit`, `size`" + ` for an oversized line; otherwise none (the message says what is wrong) |
| ` + "`METHOD_NOT_FOUND`" + ` | ` + "`method`" + ` |
| ` + "`INVALID_PARAMS`" + ` | ` + "`field`" + `: the parameter's path, e.g. ` + "`params.text`, `event_types[0]`, `tier`" + ` |
| ` + "`APP_NOT_FOUND`" + ` | ` + "`app_id`; `running: false`" + ` when the app is registered but not connected (with ` + "`attempts`" + ` when accessibility adapters were asked too) |
| ` + "`SURFACE_NOT_FOUND`" + ` | ` + "`surface_id`" + ` |
| ` + "`ELEMENT_NOT_FOUND`" + ` | ` + "`element_id`" + `, or ` + "`target`, `waited_ms`" + ` when no element matched a target in time |
| ` + "`ACTION_NOT_SUPPORTED`" + ` | ` + "`element_id`, `action`, `supported`" + ` (the element's actions), ` + "`reason`" + `; ` + "`capability_id`, `domain`" + ` for an unknown platform capability |
| ` + "`TARGET_AMBIGUOUS`" + ` | ` + "`target`, `count`, `candidates`" + `: up to 10 of ` + "`{element_id, role, name, accessible_path, bus_name, app_id, surface_id}`" + ` |
| ` + "`NO_ATSPI2_SUPPORT`" + ` | ` + "`app_id`" + ` or ` + "`bus_name`" + ` the adapter does not reach, or ` + "`reason`" + ` when there is no accessibility bus |
| ` + "`TEXT_TOO_LARGE`" + ` | ` + "`element_id`, `characters`, `offset`, `limit_bytes`" + `: read on with ` + "`{\"offset\", \"length\"}`" + ` |
| ` + "`INTERNAL_ERROR`" + ` | ` + "`capability_id`, `attempts: [{adapter, code, message}]`" + ` when every accessibility adapter declined; ` + "`app_id`, `reason`" + ` when a Tier 1 app broke its protocol; ` + "`audit: \"unavailable\"`, `reason`" + ` once an audit entry could not be written (every action is then refused until pcpd restarts) |
| ` + "`PERMISSION_DENIED`" + ` | ` + "`app_id`, `revoked`, `reason`" + ` for a revoked app; ` + "`method`, `required_role`" + ` for a user-only method; ` + "`capability_id`, `trust_level`" + ` for a ` + "`deny`" + ` capability |
| ` + "`CONFIRMATION_REQUIRED`" + ` | ` + "`confirmation_id`, `capability_id`, `confirmation_type`, `undo_window_ms`, `description`" + ` (built from the actual parameters), ` + "`expires_at`" + ` |
| ` + "`EXECUTION_TIMEOUT`" + ` | ` + "`capability_id`, `timeout_ms`" + `; or, when an element never became actionable, ` + "`element_id`, `action`, `not_actionable`" + ` (the conditions not met, e.g. ` + "`not SENSITIVE`" + `), ` + "`states`, `waited_ms`" + ` |
| ` + "`APP_UNRESPONSIVE`" + ` | ` + "`app_id`, `reason`" + ` |
| ` + "`INPUT_SIMULATION_FAILED`" + ` | ` + "`reason`" + ` (e.g. ` + "`no_xtest`, `point_off_screen`, `bad_chord`, `no_spare_keycode`, `focus_refused`" + `; [x11.md](x11.md#errors) lists them) and what it concerns: ` + "`x`, `y`, `keys`, `surface_id`, `character`" + ` |
| ` + "`CAPABILITY_NOT_FOUND`" + ` | ` + "`capability_id`, `app_id`" + ` |
| ` + "`MANIFEST_INVALID`" + ` | ` + "`app_id`, `capability`, `field`" + ` (a JSON path into the manifest) |
| ` + "`MANIFEST_SIGNATURE_INVALID`" + ` | ` + "`app_id`" + ` |
| ` + "`RATE_LIMITED`" + ` | ` + "`scope`" + `, the limit's name, and its bounds: ` + "`app`" + ` (with ` + "`app_id`, `source`" + `) and ` + "`connection`" + ` (with ` + "`retry_after_ms`, `limit_per_second`, `burst`" + `), ` + "`confirmations`" + ` (` + "`per`" + `: ` + "`connection`, `agent` or `daemon`" + `, the bound reached; ` + "`pending`, `retry_after_ms`" + `), ` + "`authentication`" + ` (` + "`limit_per_second`, `burst`" + `), ` + "`subscriptions`, `adapters`, `app_sockets`, `connections`, `connections_per_uid`, `tcp_unauthenticated`" + ` (` + "`limit`" + `; ` + "`uid`" + `; ` + "`control_reserve`" + `), ` + "`line_memory`" + ` (` + "`limit`, `size`" + `), ` + "`file_descriptors`" + `; on the scomp face ` + "`scomp_sessions`" + ` (` + "`limit`; `uid`, `agent` or `transport`" + `), ` + "`scomp_memory`" + ` (` + "`limit`, `in_use`, `session_limit`" + `), ` + "`queue`" + ` (` + "`limit`" + `) |
| ` + "`CAPTURE_FAILED`" + ` | ` + "`reason`" + `: ` + "`minimized`, `unmapped`, `off_screen`, `unsupported_depth`, `get_image_failed`, `short_image`, `encode_failed`" + `; ` + "`surface_id`" + ` |

On the scomp face (spec 004) a failed eval is ` + "`-32000`" + ` with data
` + "`{kind, stack[, error]}`" + `, whatever the kind (` + "`EvalError`" + `,
` + "`TimeoutError`, `MemoryError`, `BindingError`" + `); inside a
` + "`BindingError`, `error`" + ` is the PCP error above, and scomp's ` + "`-32000`" + ` is
not ` + "`APP_NOT_FOUND`" + ` there. The scomp face's own errors (binding names,
schemas, references) are in [scomp.md](scomp.md).
`)
	want := b.String()
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./api -update)", err)
	}
	if string(got) != want {
		t.Errorf("%s is out of date with the catalogue; run go test ./api -update", path)
	}
}

func TestEventTypesSorted(t *testing.T) {
	for i := 1; i < len(EventTypes); i++ {
		if EventTypes[i-1] >= EventTypes[i] {
			t.Errorf("EventTypes not sorted at %q, %q", EventTypes[i-1], EventTypes[i])
		}
	}
}
