package sdk

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// PcpServer is the contract a Tier 1 app implements (spec 001's
// PcpServer): one method per request the daemon sends on the per-app
// socket. Serve calls the methods concurrently, each on its own
// goroutine, so an implementation must be safe for concurrent use.
type PcpServer interface {
	// Manifest returns the app's signed manifest, a JSON object, byte for
	// byte as it was signed. Serve calls it once per connection and sends
	// the result in apps.socket and, verbatim, in the ManifestResponse.
	// An error stops Serve (it wraps ErrPermanent).
	Manifest(ctx context.Context) (json.RawMessage, error)

	// Invoke runs one capability (InvokeCapability). ctx carries the
	// daemon's deadline and is cancelled when the connection ends.
	// Return an *api.Error to answer with a PCP error code; any other
	// error is answered INTERNAL_ERROR (EXECUTION_TIMEOUT for
	// context.DeadlineExceeded). A nil result with a nil error is a
	// success without data; an empty Status means api.StatusSuccess.
	Invoke(ctx context.Context, inv *Invocation) (*api.CapabilityResult, error)

	// ValidateParams reports whether params (a JSON object, or empty for
	// none) are acceptable to the capability capabilityID
	// ("<app_id>.<name>") without running it (ValidateParamsMsg). nil
	// means valid; an error says why not, INVALID_PARAMS usually, and is
	// mapped as Invoke's are.
	ValidateParams(ctx context.Context, capabilityID string, params json.RawMessage) error

	// QueryState returns the app's dynamic state as a JSON object
	// (QueryState), narrowed to the top-level keys given, or the whole of
	// it when keys is empty. An empty result stands for {}.
	QueryState(ctx context.Context, keys []string) (json.RawMessage, error)

	// Shutdown is called when the daemon sends AppShutdown after the
	// handshake, with the reason it gave (a revocation, a refused
	// manifest); the connection's handlers are being cancelled. Once it
	// returns Serve tries again, with backoff, or, with
	// Options.StopOnShutdown, returns a *ShutdownError. Its error is only
	// logged.
	Shutdown(ctx context.Context, reason string) error
}

// Invocation is one InvokeCapability request.
type Invocation struct {
	// CapabilityID is the capability's full id, "<app_id>.<name>".
	CapabilityID string
	// Name is the capability's name: CapabilityID without "<app_id>.".
	Name string
	// Source says who initiated the invocation; today always
	// api.SourceSystemIntelligence.
	Source api.InvocationSource
	// Params is the JSON object of parameters, verbatim, already checked
	// by the daemon against the manifest's declaration; empty for none.
	Params json.RawMessage
}

// ErrPermanent is wrapped by the errors Serve returns when connecting
// again cannot help: the daemon refused the app's manifest or the app
// (see the package doc), or the app's Manifest failed. It is the same
// sentinel as client.ErrPermanent, so one errors.Is test serves apps on
// either face.
var ErrPermanent = client.ErrPermanent

// ErrShutdown is matched by the *ShutdownError Serve returns, with
// Options.StopOnShutdown, after the daemon sent AppShutdown.
var ErrShutdown = errors.New("pcp: app shut down by pcpd")

// ShutdownError is returned by Serve, with Options.StopOnShutdown, after
// the daemon told the app to shut down (AppShutdown).
// errors.Is(err, ErrShutdown) reports true for it.
type ShutdownError struct {
	// Reason is the daemon's reason, possibly empty.
	Reason string
}

func (e *ShutdownError) Error() string {
	if e.Reason == "" {
		return ErrShutdown.Error()
	}
	return ErrShutdown.Error() + ": " + e.Reason
}

// Is reports whether target is ErrShutdown.
func (e *ShutdownError) Is(target error) bool { return target == ErrShutdown }
