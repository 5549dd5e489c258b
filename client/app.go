package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/pcp-dev/pcp/api"
)

// CapabilityFunc serves one capability. params is the JSON object the
// agent sent, already checked by the daemon against the manifest's
// declared parameters. The returned value is encoded as the result's data.
// Return an *api.Error to answer with a PCP error code.
type CapabilityFunc func(ctx context.Context, params json.RawMessage) (any, error)

// App serves an application's capabilities over the JSON-RPC face: it
// connects, registers its signed manifest, answers the daemon's
// invoke.capability requests on the same connection, and reconnects and
// registers again when the daemon restarts.
type App struct {
	AppID string
	// Manifest is the signed manifest object, as `pcpctl manifest sign`
	// writes it.
	Manifest json.RawMessage
	// Capabilities maps capability names (not ids) to their handlers.
	Capabilities map[string]CapabilityFunc
	// Socket is the daemon's agent socket; "" means DefaultSocket().
	Socket string
	Logger *slog.Logger
	// OnRegistered, if set, is called after each successful registration.
	OnRegistered func(*api.RegisterCapabilityResult)
}

// ErrPermanent wraps registration errors that reconnecting cannot fix
// (an invalid or untrusted manifest, a revoked app).
var ErrPermanent = errors.New("pcp: registration refused")

// Run serves until ctx is cancelled (which returns nil) or the daemon
// refuses the manifest (which returns an error wrapping ErrPermanent).
// While the daemon is unreachable it retries with backoff up to 5 s.
func (a *App) Run(ctx context.Context) error {
	log := a.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	backoff := 100 * time.Millisecond
	for {
		err := a.serveOnce(ctx, log)
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrPermanent) {
			return err
		}
		log.Info("disconnected from pcpd; retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		if backoff *= 2; backoff > 5*time.Second {
			backoff = 5 * time.Second
		}
	}
}

func (a *App) serveOnce(ctx context.Context, log *slog.Logger) error {
	cl, err := Dial(ctx, a.Socket, Options{Handler: a.handle, OnNotify: func(Notification) {}})
	if err != nil {
		return err
	}
	defer cl.Close()
	res, err := cl.RegisterCapability(ctx, &api.RegisterCapabilityParams{AppID: a.AppID, Manifest: a.Manifest})
	if err != nil {
		var pe *api.Error
		if errors.As(err, &pe) {
			switch pe.Code {
			case api.CodeManifestInvalid, api.CodeManifestSignatureInvalid, api.CodePermissionDenied, api.CodeInvalidParams:
				return fmt.Errorf("%w: %w", ErrPermanent, err)
			}
		}
		return err
	}
	log.Info("registered", "app_id", a.AppID, "capabilities", res.CapabilityIDs)
	if a.OnRegistered != nil {
		a.OnRegistered(res)
	}
	select {
	case <-ctx.Done():
		return nil
	case <-cl.Done():
		return errors.New("connection closed")
	}
}

func (a *App) handle(ctx context.Context, method string, params json.RawMessage) (any, error) {
	if method == api.MethodHealthCheck {
		// The daemon's liveness check.
		return map[string]string{"status": api.HealthOK}, nil
	}
	if method != api.MethodInvokeCapability {
		return nil, api.Errorf(api.CodeMethodNotFound, map[string]any{"method": method}, "method not found: %s", method)
	}
	var p api.InvokeCapabilityParams
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, api.InvalidParam("params", "%v", err)
	}
	prefix := a.AppID + "."
	if p.AppID != a.AppID || len(p.CapabilityID) <= len(prefix) || p.CapabilityID[:len(prefix)] != prefix {
		return nil, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": p.CapabilityID}, "not a capability of %s", a.AppID)
	}
	f := a.Capabilities[p.CapabilityID[len(prefix):]]
	if f == nil {
		return nil, api.Errorf(api.CodeCapabilityNotFound, map[string]any{"capability_id": p.CapabilityID}, "no handler for %s", p.CapabilityID)
	}
	data, err := f(ctx, p.Params)
	if err != nil {
		return nil, err
	}
	if r, ok := data.(*api.CapabilityResult); ok {
		return r, nil
	}
	raw, err := json.Marshal(data)
	if err != nil {
		return nil, fmt.Errorf("encoding result of %s: %w", p.CapabilityID, err)
	}
	return &api.CapabilityResult{Status: api.StatusSuccess, Data: raw}, nil
}
