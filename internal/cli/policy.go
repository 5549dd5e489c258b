package cli

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// policyValue renders a setting's effective value: strings bare when
// that cannot be misread, anything else as compact JSON.
func policyValue(v api.Valued) string {
	if v.Value == nil {
		return "-"
	}
	raw, err := json.Marshal(v.Value)
	if err != nil {
		return clean(fmt.Sprint(v.Value))
	}
	return jsonValue(raw)
}

func (e *env) policyCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "Show or reload the user's policy",
		Long: `Show the policy pcpd applies: rate limits, the confirmation expiry, the scomp
eval limits, and each capability's effective trust level and timeout, each
with where it came from (the policy file, the manifest, or a built-in default).`,
		Args: cobra.NoArgs,
	}
	var source, agent string
	show := &cobra.Command{
		Use:   "show [--source S] [--agent NAME]",
		Short: "Show the effective policy (policy.show)",
		Args:  cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			return e.policy(ctx, false, api.MethodPolicyShow, &api.PolicyShowParams{Source: source, Agent: agent})
		}),
	}
	show.Flags().StringVar(&source, "source", "", "the invocation source to show decisions for (default: pcpd's)")
	show.Flags().StringVar(&agent, "agent", "", "show the decisions for the contained agent NAME (pcpctl agent run --name)")
	cmd.AddCommand(
		show,
		&cobra.Command{
			Use:   "reload",
			Short: "Reload the policy file and show the result (policy.reload, over the control socket)",
			Long: `Make pcpd read its policy file again and show the policy now in effect. Only
the user may do this, so the request goes over the control socket
(--control-socket). A policy file that does not load leaves the previous
policy in place.`,
			Args: cobra.NoArgs,
			RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
				return e.policy(ctx, true, api.MethodPolicyReload, nil)
			}),
		},
	)
	return cmd
}

// policy calls policy.show or policy.reload and prints the result.
func (e *env) policy(ctx context.Context, control bool, method string, params any) error {
	raw, err := once(ctx, e, control, method, func(ctx context.Context, cl *client.Client) (*json.RawMessage, error) {
		var r json.RawMessage
		if err := cl.Call(ctx, method, params, &r); err != nil {
			return nil, err
		}
		return &r, nil
	})
	if err != nil {
		return err
	}
	if e.json {
		// The result as it came, including members this pcpctl does not
		// know yet.
		return printJSON(e.stdout, *raw)
	}
	var v api.PolicyView
	if err := json.Unmarshal(*raw, &v); err != nil {
		return fmt.Errorf("%s: decoding the result: %w", method, err)
	}

	file := orDash(v.Path)
	if !v.Loaded {
		file += " (not loaded; built-in defaults)"
	}
	t := newTable(e.stdout)
	t.row("policy file:", file)
	t.row("source:", orDash(v.Source))
	if v.Agent != "" {
		t.row("agent:", v.Agent)
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	t = newTable(e.stdout, "SETTING", "VALUE", "FROM")
	for _, s := range []struct {
		name string
		v    api.Valued
	}{
		{"per_app", v.Limits.PerApp},
		{"per_app_burst", v.Limits.PerAppBurst},
		{"per_connection", v.Limits.PerConnection},
		{"per_connection_burst", v.Limits.PerConnectionBurst},
		{"confirmation_expiry", v.ConfirmationExpiry},
		{"scomp.eval_timeout", v.Scomp.EvalTimeout},
		{"scomp.memory_limit_mib", v.Scomp.MemoryLimitMiB},
		{"tier3", v.Tier3},
	} {
		t.row(s.name, policyValue(s.v), orDash(s.v.From))
	}
	if err := t.flush(); err != nil {
		return err
	}
	fmt.Fprintln(e.stdout)
	if len(v.Capabilities) == 0 {
		_, err := fmt.Fprintln(e.stdout, "no capabilities")
		return err
	}
	t = newTable(e.stdout, "CAPABILITY", "DECLARED", "EFFECTIVE", "FROM", "TIMEOUT", "FROM")
	for _, c := range v.Capabilities {
		t.row(c.CapabilityID, orDash(c.Declared), policyValue(c.TrustLevel), orDash(c.TrustLevel.From),
			policyValue(c.Timeout), orDash(c.Timeout.From))
	}
	return t.flush()
}
