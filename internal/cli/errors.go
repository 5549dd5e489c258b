package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"

	"github.com/pcp-dev/pcp/api"
)

// Exit codes of pcpctl.
const (
	ExitFailure = 1
	ExitUsage   = 2
)

// ExitCode is the process exit code for an error Run returned: 0 for nil,
// ExitUsage for a wrong command line, the command's own for an
// *ExitStatus (agent run), ExitFailure otherwise.
func ExitCode(err error) int {
	var xs *ExitStatus
	switch {
	case err == nil:
		return 0
	case errors.As(err, &xs):
		return xs.Code
	case IsUsage(err):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// FormatError renders an error Run returned for stderr, ending in a
// newline. A PCP error reads "pcpctl: NAME: message", followed by its
// data as compact JSON on a line of its own when it has any; anything else
// reads "pcpctl: message".
func FormatError(err error) string {
	var xs *ExitStatus
	if err == nil || errors.As(err, &xs) {
		return ""
	}
	var pe *api.Error
	if !errors.As(err, &pe) {
		return "pcpctl: " + err.Error() + "\n"
	}
	msg := pe.Message
	if msg == "" {
		info, _ := pe.Code.Info()
		msg = info.Message
	}
	if err != error(pe) {
		// Keep the context the wrapping added, without the inner error's
		// own "pcp: NAME:" prefix.
		msg = strings.Replace(err.Error(), pe.Error(), msg, 1)
	}
	var b strings.Builder
	b.WriteString("pcpctl: ")
	b.WriteString(pe.Code.Name())
	b.WriteString(": ")
	b.WriteString(msg)
	b.WriteByte('\n')
	if data := compactData(pe.Data); data != "" {
		b.WriteString(data)
		b.WriteByte('\n')
	}
	if h := nextSteps[pe.Code]; h != "" {
		b.WriteString("next: " + h + "\n")
	}
	return b.String()
}

// nextSteps say what to do about the errors a person meets first.
var nextSteps = map[api.Code]string{
	api.CodeConfirmationRequired: "the user decides with pcpctl confirm approve --last (or deny --last); pcpctl invoke --wait asks and waits for the decision",
	api.CodeSurfaceNotFound:      "pcpctl context lists the surfaces pcpd sees (none without a desktop; pcpctl health lists the adapters)",
	api.CodeAppNotFound:          "pcpctl apps lists the apps pcpd knows; pcpctl caps their capabilities",
}

// compactData encodes an error's data as one line of JSON; "" when there
// is none.
func compactData(data any) string {
	if data == nil {
		return ""
	}
	raw, ok := data.(json.RawMessage)
	if !ok {
		var err error
		if raw, err = json.Marshal(data); err != nil {
			return ""
		}
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil || buf.String() == "null" {
		return ""
	}
	return buf.String()
}
