package core

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/pcp-dev/pcp/api"
)

// InvokeAwaitingDecision invokes p and, when the answer is
// CONFIRMATION_REQUIRED, waits up to wait for the user's decision: it
// invokes again on the same session (ctx's) presenting the confirmation
// id with wait_ms, so the call is held until the user decides on their
// own surfaces (nothing on the agent's connection can), the
// confirmation expires, wait passes or ctx ends. It returns the
// outcome: the result, CONFIRMATION_DENIED, CONFIRMATION_EXPIRED, or,
// once wait has passed, the CONFIRMATION_REQUIRED still pending (the
// confirmation stays open: the caller may wait again). pending, when
// not nil, is called once with the CONFIRMATION_REQUIRED error before
// the wait begins. Faces that hold a caller for the user (MCP's tool
// calls, scomp's evals) share it.
func (b *Broker) InvokeAwaitingDecision(ctx context.Context, p *api.InvokeCapabilityParams, wait time.Duration, pending func(*api.Error)) (*api.CapabilityResult, error) {
	return awaitDecision(ctx, wait, pending, func(id string, waitMS int64) (*api.CapabilityResult, error) {
		q := *p
		if id != "" {
			q.ConfirmationID, q.WaitMS = id, waitMS
		}
		return b.InvokeCapability(ctx, &q)
	})
}

// awaitDecision calls call("", 0) and, while it answers
// CONFIRMATION_REQUIRED, calls it again with the confirmation's id and
// the wait left (InvokeAwaitingDecision).
func awaitDecision[R any](ctx context.Context, wait time.Duration, pending func(*api.Error), call func(id string, waitMS int64) (R, error)) (R, error) {
	res, err := call("", 0)
	id, required := PendingConfirmation(err)
	if !required {
		return res, err
	}
	if pending != nil {
		pending(api.AsError(err))
	}
	until := time.Now().Add(wait)
	for {
		left := time.Until(until)
		if left <= 0 || ctx.Err() != nil {
			e := api.AsError(err)
			var zero R
			return zero, api.Errorf(api.CodeConfirmationRequired, e.Data,
				"the user has not decided %s within %v; it is still pending: call again to keep waiting", id, wait)
		}
		res, err = call(id, min(left.Milliseconds()+1, api.MaxConfirmationWaitMS))
		again, ok := PendingConfirmation(err)
		if !ok || again != id {
			return res, err
		}
	}
}

// PendingConfirmation reports the confirmation id of a
// CONFIRMATION_REQUIRED error.
func PendingConfirmation(err error) (string, bool) {
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired {
		return "", false
	}
	id, _ := pe.DataMap()["confirmation_id"].(string)
	return id, id != ""
}

// Act acts on an element of a Tier 2 surface. With an element id it is
// InvokeAction. With a target it is the accessibility path of the
// dispatch: the capability <app id>.<action> of the surface's app, which
// the adapter detects and resolves the target for, under its trust level
// (confirm unless the user's policy relaxes it), waited out as
// InvokeAwaitingDecision does. The result is an *api.InvokeActionResult
// or an *api.CapabilityResult.
func (b *Broker) Act(ctx context.Context, p *api.ActParams, wait time.Duration, pending func(*api.Error)) (any, error) {
	switch {
	case p.ElementID != "" && p.Target != nil:
		return nil, api.InvalidParam("target", "give element_id or target, not both")
	case p.ElementID != "":
		return b.invokeActionAwaiting(ctx, &api.InvokeActionParams{SurfaceID: p.SurfaceID, ElementID: p.ElementID, Action: p.Action, Value: p.Value}, wait, pending)
	case p.Target == nil:
		return nil, api.MissingParam("element_id")
	case p.Action == "":
		return nil, api.MissingParam("action")
	}
	appID, _, ok := strings.Cut(p.SurfaceID, "/")
	if !ok || appID == "" {
		return nil, api.InvalidParam("surface_id", "%q names no app: want <app id>/<n>", p.SurfaceID)
	}
	params := map[string]any{"target": p.Target}
	if p.Value != nil {
		params["value"] = p.Value
	}
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, api.InvalidParam("target", "%v", err)
	}
	return b.InvokeAwaitingDecision(ctx, &api.InvokeCapabilityParams{CapabilityID: api.CapabilityID(appID, p.Action), AppID: appID,
		Source: api.SourceSystemIntelligence, Params: raw}, wait, pending)
}

// invokeActionAwaiting is InvokeAction waiting out a confirmation (the
// Tier 3 fallback's) as InvokeAwaitingDecision does.
func (b *Broker) invokeActionAwaiting(ctx context.Context, p *api.InvokeActionParams, wait time.Duration, pending func(*api.Error)) (*api.InvokeActionResult, error) {
	return awaitDecision(ctx, wait, pending, func(id string, waitMS int64) (*api.InvokeActionResult, error) {
		q := *p
		if id != "" {
			q.ConfirmationID, q.WaitMS = id, waitMS
		}
		return b.InvokeAction(ctx, &q)
	})
}
