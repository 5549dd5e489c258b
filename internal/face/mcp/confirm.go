package mcp

import (
	"context"
	"fmt"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/pcp-dev/pcp/api"
)

// invokeWaiting invokes p and, when the answer is CONFIRMATION_REQUIRED,
// waits for the user's decision up to the face's bound
// (Options.ConfirmWait), as core.Broker.InvokeAwaitingDecision does.
// While it waits it sends progress notifications when the client asked
// for them.
func (c *call) invokeWaiting(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	pending, stop := c.whilePending(ctx)
	defer stop()
	return c.s.b.InvokeAwaitingDecision(ctx, p, c.s.opts.ConfirmWait, pending)
}

// whilePending returns the pending callback of a wait for the user
// (it starts the progress notifications) and the function that stops
// them.
func (c *call) whilePending(ctx context.Context) (pending func(*api.Error), stop func()) {
	stopProgress := func() {}
	return func(e *api.Error) {
			id, _ := e.DataMap()["confirmation_id"].(string)
			stopProgress = c.progress(ctx, id, e)
		}, func() {
			stopProgress()
		}
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
