package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// Shell completion. cobra's `pcpctl completion bash|zsh|fish|powershell`
// writes the script; the script asks `pcpctl __complete ARGS...` for the
// candidates of the word being typed. The ids a user types (capability,
// app, surface, confirmation and job ids) are asked of the running pcpd,
// each within completionTimeout; a daemon that is down or slow completes
// nothing, silently, and never falls back to file names. The candidates
// carry a short description (a capability's, a confirmation's), shown by
// the shells that show them.

// completionTimeout bounds the daemon's answer to a completion: a shell
// waiting on Tab must not hang.
const completionTimeout = 1500 * time.Millisecond

// lister asks the daemon for the candidates of one kind of id.
type lister func(ctx context.Context, cl *client.Client) ([]cobra.Completion, error)

// addCompletions wires the completions into the command tree root: the
// positional ids and the flags that take ids. Commands it does not find
// are left as they are.
func (e *env) addCompletions(root *cobra.Command) {
	args := func(path string, f cobra.CompletionFunc) {
		if c, _, err := root.Find(strings.Fields(path)); err == nil && c != root {
			c.ValidArgsFunction = f
		}
	}
	flag := func(path, name string, f cobra.CompletionFunc) {
		if c, _, err := root.Find(strings.Fields(path)); err == nil && c != root && c.Flags().Lookup(name) != nil {
			c.RegisterFlagCompletionFunc(name, f)
		}
	}
	all := appIDs(func(api.App) bool { return true })
	unrevoked := appIDs(func(a api.App) bool { return a.State != api.AppRevoked })
	running, surfaces := e.complete(false, unrevoked), e.complete(false, surfaceIDs)
	args("invoke", e.completeInvoke)
	args("revoke", running)
	args("apps allow", e.complete(false, appIDs(func(a api.App) bool { return a.State == api.AppRevoked })))
	args("apps state", running)
	args("confirm approve", e.complete(true, pendingConfirmations))
	args("confirm deny", e.complete(true, pendingConfirmations))
	args("jobs undo", e.complete(false, queuedJobs))
	for _, path := range []string{"elements", "surface", "capture", "action"} {
		args(path, surfaces)
	}
	flag("caps", "app", e.completeValue(all))
	flag("invoke", "app", e.completeValue(unrevoked))
	flag("events", "app", e.completeValue(all))
	flag("events", "surface", e.completeValue(surfaceIDs))
	flag("events", "type", func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return matching(api.EventTypes, toComplete), cobra.ShellCompDirectiveNoFileComp
	})
}

// complete completes the first positional argument with what list
// answers, over the control socket when control is set; the arguments
// after it are not ids.
func (e *env) complete(control bool, list lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return e.ask(cmd.Context(), control, list, toComplete)
	}
}

// completeValue completes a flag's value with what list answers.
func (e *env) completeValue(list lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return e.ask(cmd.Context(), false, list, toComplete)
	}
}

// ask runs list against the daemon and keeps the candidates that start
// with toComplete.
func (e *env) ask(ctx context.Context, control bool, list lister, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	cl, err := e.connect(ctx, control, client.Options{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer cl.Close()
	got, err := list(ctx, cl)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return matching(got, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// matching keeps the candidates whose value starts with prefix, sorted.
func matching(cands []cobra.Completion, prefix string) []cobra.Completion {
	out := make([]cobra.Completion, 0, len(cands))
	for _, c := range cands {
		v, _, _ := strings.Cut(c, "\t")
		if v != "" && strings.HasPrefix(v, prefix) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// candidate is a completion with a description, both made safe for the
// shell's line: no control characters, no tab or newline inside.
func candidate(value, desc string) cobra.Completion {
	if strings.ContainsAny(value, " \t\n") || value == "" {
		return ""
	}
	desc = strings.Join(strings.Fields(clean(desc)), " ")
	if desc == "" {
		return clean(value)
	}
	return cobra.CompletionWithDesc(clean(value), truncate(desc, descriptionWidth))
}

// completeInvoke completes invoke's capability id, then its parameters'
// names ("name=", with no space after it).
func (e *env) completeInvoke(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return e.ask(cmd.Context(), false, capabilityIDs, toComplete)
	}
	if strings.ContainsAny(toComplete, "=:") {
		return nil, cobra.ShellCompDirectiveNoFileComp // a value: nothing to suggest
	}
	given := map[string]bool{}
	for _, a := range args[1:] {
		k, _, _ := strings.Cut(strings.SplitN(a, ":=", 2)[0], "=")
		given[k] = true
	}
	got, dir := e.ask(cmd.Context(), false, func(ctx context.Context, cl *client.Client) ([]cobra.Completion, error) {
		res, err := cl.QueryCapabilities(ctx, &api.QueryCapabilitiesParams{})
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, c := range res.Capabilities {
			if c.ID != args[0] {
				continue
			}
			for _, p := range c.Parameters {
				if !given[p.Name] {
					out = append(out, candidate(p.Name+"=", p.Description))
				}
			}
		}
		return out, nil
	}, toComplete)
	return got, dir | cobra.ShellCompDirectiveNoSpace
}

func capabilityIDs(ctx context.Context, cl *client.Client) ([]cobra.Completion, error) {
	res, err := cl.QueryCapabilities(ctx, &api.QueryCapabilitiesParams{})
	if err != nil {
		return nil, err
	}
	out := make([]cobra.Completion, 0, len(res.Capabilities))
	for _, c := range res.Capabilities {
		if c.TrustLevel != api.TrustDeny {
			out = append(out, candidate(c.ID, c.Description))
		}
	}
	return out, nil
}

func appIDs(keep func(api.App) bool) lister {
	return func(ctx context.Context, cl *client.Client) ([]cobra.Completion, error) {
		res, err := cl.Apps(ctx)
		if err != nil {
			return nil, err
		}
		var out []cobra.Completion
		for _, a := range res.Apps {
			if keep(a) {
				out = append(out, candidate(a.AppID, a.State))
			}
		}
		return out, nil
	}
}

func surfaceIDs(ctx context.Context, cl *client.Client) ([]cobra.Completion, error) {
	sc, err := cl.SessionContext(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]cobra.Completion, 0, len(sc.ActiveSurfaces))
	for _, s := range sc.ActiveSurfaces {
		out = append(out, candidate(s, ""))
	}
	return out, nil
}

func pendingConfirmations(ctx context.Context, cl *client.Client) ([]cobra.Completion, error) {
	res, err := cl.ConfirmList(ctx)
	if err != nil {
		return nil, err
	}
	var out []cobra.Completion
	for _, c := range res.Confirmations {
		if c.State == api.ConfirmPending {
			desc := c.Description
			if desc == "" {
				desc = c.CapabilityID
			}
			out = append(out, candidate(c.ConfirmationID, desc))
		}
	}
	return out, nil
}

func queuedJobs(ctx context.Context, cl *client.Client) ([]cobra.Completion, error) {
	res, err := cl.JobsList(ctx, 1000)
	if err != nil {
		return nil, err
	}
	var out []cobra.Completion
	for _, j := range res.Jobs {
		if j.State == api.JobQueued {
			out = append(out, candidate(j.JobID, j.CapabilityID))
		}
	}
	return out, nil
}
