package core

import (
	"context"
	"errors"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/policy"
	"github.com/pcp-dev/pcp/internal/store"
)

// acting is an adapter whose surface atspi.app/1 has an element e1 that
// can be activated, and no click of its own (the Tier 3 fallback's).
type acting struct {
	actionless
	acts []string
}

func (a *acting) Action(_ context.Context, p *api.InvokeActionParams) (*api.InvokeActionResult, error) {
	if p.Action != "activate" {
		return nil, api.Errorf(api.CodeActionNotSupported, map[string]any{"element_id": p.ElementID}, "no %s", p.Action)
	}
	a.acts = append(a.acts, p.Action)
	return &api.InvokeActionResult{Executed: true}, nil
}

func actionWorld(t *testing.T, file string, agent string) (b *Broker, ad *acting, plat *clicker, agentCtx, user context.Context) {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	pol, err := policy.Parse("policy.toml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	b, err = New(context.Background(), Config{Apps: st, Audit: st, Journal: st, Jobs: st, LivenessInterval: -1, Policy: pol, RateLimits: &RateLimits{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	ad, plat = &acting{}, &clicker{}
	if err := b.AddAdapter(api.RegisterAdapterParams{AdapterID: "atspi", SurfaceType: "atspi", SupportedTiers: []int{2}}, ad); err != nil {
		t.Fatal(err)
	}
	if err := b.SetPlatformAdapter(plat); err != nil {
		t.Fatal(err)
	}
	agentCtx = WithSession(context.Background(), b.OpenSession(SessionInfo{Transport: "unix", UID: 1000, PID: 1, Agent: agent}, (&recPeer{}).endpoint()))
	user = WithSession(context.Background(), b.OpenSession(SessionInfo{Role: RoleUser, Transport: "unix", UID: 1000, PID: 2}, (&recPeer{}).endpoint()))
	return b, ad, plat, agentCtx, user
}

// invoke.action is gated by the trust level of the app's capability of
// that action, as invoke.capability of it would be: the detected
// capability's confirm by default, the policy's level for the app, the
// capability and the agent otherwise. An agent acting on an element
// through invoke.action gets no more than by invoking the capability.
func TestInvokeActionTrust(t *testing.T) {
	activate := &api.InvokeActionParams{SurfaceID: "atspi.app/1", ElementID: "e1", Action: "activate"}
	t.Run("default: the user is asked", func(t *testing.T) {
		b, ad, _, agent, user := actionWorld(t, "", "")
		_, err := b.InvokeAction(agent, activate)
		var pe *api.Error
		if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired || pe.DataMap()["capability_id"] != "atspi.app.activate" || len(ad.acts) != 0 {
			t.Fatalf("got %v and acts %v, want CONFIRMATION_REQUIRED for atspi.app.activate and nothing done", err, ad.acts)
		}
		id, _ := pe.DataMap()["confirmation_id"].(string)
		// The agent cannot approve its own request.
		if _, err := b.ApproveConfirmation(agent, &api.ConfirmDecisionParams{ConfirmationID: id}); !errors.Is(err, api.ErrPermissionDenied) {
			t.Fatalf("the agent's approval: %v, want PERMISSION_DENIED", err)
		}
		if _, err := b.ApproveConfirmation(user, &api.ConfirmDecisionParams{ConfirmationID: id}); err != nil {
			t.Fatal(err)
		}
		// The approval is of this element and value only.
		other := *activate
		other.ElementID, other.ConfirmationID = "e2", id
		if _, err := b.InvokeAction(agent, &other); !errors.Is(err, api.ErrConfirmationRequired) || len(ad.acts) != 0 {
			t.Fatalf("another element with the approval: %v, acts %v", err, ad.acts)
		}
		with := *activate
		with.ConfirmationID = id
		if res, err := b.InvokeAction(agent, &with); err != nil || !res.Executed || len(ad.acts) != 1 {
			t.Fatalf("with the approval: %+v, %v, acts %v", res, err, ad.acts)
		}
		// Single use: a replay asks again.
		if _, err := b.InvokeAction(agent, &with); !errors.Is(err, api.ErrConfirmationRequired) || len(ad.acts) != 1 {
			t.Fatalf("the approval replayed: %v, acts %v", err, ad.acts)
		}
	})
	t.Run("no such surface: nobody is asked", func(t *testing.T) {
		b, ad, _, agent, _ := actionWorld(t, "", "")
		if _, err := b.InvokeAction(agent, &api.InvokeActionParams{SurfaceID: "atspi.app/9", ElementID: "e1", Action: "activate"}); !errors.Is(err, api.ErrSurfaceNotFound) || len(ad.acts) != 0 {
			t.Fatalf("got %v, want SURFACE_NOT_FOUND", err)
		}
		if n := b.PendingConfirmations(); n != 0 {
			t.Fatalf("%d confirmations pending, want none", n)
		}
	})
	t.Run("auto for the app", func(t *testing.T) {
		b, ad, _, agent, _ := actionWorld(t, "[apps.\"atspi.app\"]\ntrust_level = \"auto\"\n", "")
		if res, err := b.InvokeAction(agent, activate); err != nil || !res.Executed || len(ad.acts) != 1 {
			t.Fatalf("got %+v, %v, acts %v", res, err, ad.acts)
		}
	})
	t.Run("deny for the capability", func(t *testing.T) {
		b, ad, _, agent, _ := actionWorld(t, "[apps.\"atspi.app\"]\ntrust_level = \"auto\"\n[apps.\"atspi.app\".capabilities.activate]\ntrust_level = \"deny\"\n", "")
		if _, err := b.InvokeAction(agent, activate); !errors.Is(err, api.ErrPermissionDenied) || len(ad.acts) != 0 {
			t.Fatalf("got %v, acts %v, want PERMISSION_DENIED and nothing done", err, ad.acts)
		}
	})
	t.Run("the agent's floor", func(t *testing.T) {
		b, ad, _, agent, _ := actionWorld(t, "[apps.\"atspi.app\"]\ntrust_level = \"auto\"\n[agents.careful]\ntrust_level = \"confirm\"\n", "careful")
		if _, err := b.InvokeAction(agent, activate); !errors.Is(err, api.ErrConfirmationRequired) || len(ad.acts) != 0 {
			t.Fatalf("got %v, acts %v, want CONFIRMATION_REQUIRED", err, ad.acts)
		}
	})
	t.Run("approved, then carried out through Tier 3 without a second prompt", func(t *testing.T) {
		b, _, plat, agent, user := actionWorld(t, "", "")
		click := &api.InvokeActionParams{SurfaceID: "atspi.app/1", ElementID: "e1", Action: "click"}
		_, err := b.InvokeAction(agent, click)
		var pe *api.Error
		if !errors.As(err, &pe) || pe.DataMap()["capability_id"] != "atspi.app.click" {
			t.Fatalf("got %v, want CONFIRMATION_REQUIRED for atspi.app.click", err)
		}
		id, _ := pe.DataMap()["confirmation_id"].(string)
		if _, err := b.ApproveConfirmation(user, &api.ConfirmDecisionParams{ConfirmationID: id}); err != nil {
			t.Fatal(err)
		}
		click.ConfirmationID = id
		if res, err := b.InvokeAction(agent, click); err != nil || !res.Executed || len(plat.params) != 1 {
			t.Fatalf("with the approval: %+v, %v, clicks %v", res, err, plat.params)
		}
	})
}
