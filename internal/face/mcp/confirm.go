package mcp

import (
	"context"
	"errors"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
)

// invokeWaiting invokes p and, when the answer is CONFIRMATION_REQUIRED,
// waits for the user's decision, as `pcpctl invoke --wait` does: it
// invokes again on the same session presenting the confirmation id with
// wait_ms, so the core holds the call until the user decides (on their
// own surfaces: nothing on this connection can), the confirmation
// expires, or the face's bound (Options.ConfirmWait) passes. It returns
// the outcome: the result, or CONFIRMATION_DENIED, CONFIRMATION_EXPIRED,
// or, past the bound, the CONFIRMATION_REQUIRED still pending. While it
// waits it sends progress notifications when the client asked for them.
func (c *call) invokeWaiting(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	res, err := c.s.b.InvokeCapability(ctx, p)
	id, required := pendingConfirmation(err)
	if !required {
		return res, err
	}
	until := time.Now().Add(c.s.opts.ConfirmWait)
	stop := c.progress(ctx, id, err)
	defer stop()
	for {
		left := time.Until(until)
		if left <= 0 || ctx.Err() != nil {
			e := api.AsError(err)
			return nil, api.Errorf(api.CodeConfirmationRequired, e.Data,
				"the user has not decided %s within %v; it is still pending: call again to keep waiting", id, c.s.opts.ConfirmWait)
		}
		p.ConfirmationID = id
		p.WaitMS = min(left.Milliseconds()+1, api.MaxConfirmationWaitMS)
		res, err = c.s.b.InvokeCapability(ctx, p)
		again, ok := pendingConfirmation(err)
		if !ok || again != id {
			return res, err
		}
	}
}

// pendingConfirmation reports the confirmation id of a
// CONFIRMATION_REQUIRED error.
func pendingConfirmation(err error) (string, bool) {
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired {
		return "", false
	}
	id, _ := pe.DataMap()["confirmation_id"].(string)
	return id, id != ""
}

// progress sends the first progress notification of a wait at once, and
// one every ProgressInterval after, until stop is called; nothing when
// the client gave no progressToken.
func (c *call) progress(ctx context.Context, id string, err error) (stop func()) {
	token := c.req.Params.GetProgressToken()
	if token == nil || c.req.Session == nil {
		return func() {}
	}
	d := api.AsError(err).DataMap()
	msg := fmt.Sprintf("waiting for the user to approve or deny %s: %v (pcpctl confirm approve %s, or the desktop notification; expires %v)",
		id, d["description"], id, d["expires_at"])
	n := 0.0
	send := func() {
		n++
		c.req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg})
	}
	send()
	done := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		t := time.NewTicker(c.s.opts.ProgressInterval)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				send()
			case <-done:
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}
