package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

func (e *env) confirmCommand() *cobra.Command {
	list := e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		// Over the control socket the user sees every confirmation, not
		// only those of the connection asking.
		res, err := once(ctx, e, true, api.MethodConfirmList, func(ctx context.Context, cl *client.Client) (*api.ConfirmListResult, error) {
			return cl.ConfirmList(ctx)
		})
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		if len(res.Confirmations) == 0 {
			_, err := fmt.Fprintln(e.stdout, "no confirmations")
			return err
		}
		confs := slices.Clone(res.Confirmations)
		slices.SortStableFunc(confs, compareConfirmations)
		t := newTable(e.stdout, "ID", "STATE", "CAPABILITY", "REQUESTER", "EXPIRES", "DESCRIPTION")
		t.fit("REQUESTER", "DESCRIPTION")
		for _, c := range confs {
			t.row(c.ConfirmationID, c.State, c.CapabilityID, orDash(c.Requester), stampTime(c.ExpiresAt),
				orDash(truncate(clean(c.Description), descriptionWidth)))
		}
		return t.flush()
	})
	cmd := &cobra.Command{
		Use:   "confirm",
		Short: "List confirmations, or approve or deny one",
		Long: `An invocation of a capability whose trust level is "confirm" waits for the
user: pcpd answers the agent CONFIRMATION_REQUIRED with a confirmation id,
and the agent retries with that id once the user has approved it.

These commands go over the control socket (--control-socket): only the user
sees every confirmation and decides them.`,
		Args: cobra.NoArgs,
		RunE: list,
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "list",
			Short: "List confirmations, pending first (confirm.list, over the control socket)",
			Args:  cobra.NoArgs,
			RunE:  list,
		},
		e.confirmDecideCommand("approve", api.MethodConfirmApprove, "Approve a pending confirmation", (*client.Client).ConfirmApprove),
		e.confirmDecideCommand("deny", api.MethodConfirmDeny, "Deny a pending confirmation", (*client.Client).ConfirmDeny),
	)
	return cmd
}

// confirmDecideCommand is `confirm approve` or `confirm deny`.
func (e *env) confirmDecideCommand(verb, method, short string, decide func(*client.Client, context.Context, string, string) (*api.ConfirmDecisionResult, error)) *cobra.Command {
	var (
		reason string
		last   bool
	)
	cmd := &cobra.Command{
		Use:   verb + " ID|--last [--reason TEXT]",
		Short: fmt.Sprintf("%s (%s, over the control socket)", short, method),
		Long: fmt.Sprintf(`%s: the one whose id pcpctl confirm list (or the agent's
CONFIRMATION_REQUIRED, or the desktop notification) shows, or with --last
the newest one still pending.`, short),
		Args: cobra.MaximumNArgs(1),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log and the agent")
	cmd.Flags().BoolVar(&last, "last", false, "the newest pending confirmation")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
		newest := ""
		if (len(args) == 1) == last {
			return usagef("give a confirmation id or --last")
		}
		res, err := once(ctx, e, true, method, func(ctx context.Context, cl *client.Client) (*api.ConfirmDecisionResult, error) {
			id := ""
			if last {
				list, err := cl.ConfirmList(ctx)
				if err != nil {
					return nil, err
				}
				for _, c := range list.Confirmations {
					if c.State == api.ConfirmPending && (id == "" || compareStamps(c.CreatedAt, newest) > 0) {
						id, newest = c.ConfirmationID, c.CreatedAt
					}
				}
				if id == "" {
					return nil, usagef("no confirmation is pending")
				}
			} else {
				id = args[0]
			}
			return decide(cl, ctx, id, reason)
		})
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		_, err = fmt.Fprintln(e.stdout, confirmationLine(res.Confirmation))
		return err
	})
	return cmd
}

// confirmationLine describes a decided confirmation in one line.
func confirmationLine(c api.Confirmation) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", clean(c.State), clean(c.ConfirmationID), clean(c.CapabilityID))
	if c.Description != "" {
		fmt.Fprintf(&b, " %q", truncate(c.Description, descriptionWidth))
	}
	if c.Requester != "" {
		fmt.Fprintf(&b, " requested by %s", clean(c.Requester))
	}
	if c.Reason != "" {
		fmt.Fprintf(&b, "; reason %q", c.Reason)
	}
	return b.String()
}

// compareConfirmations orders pending confirmations first, then newest
// first.
func compareConfirmations(a, b api.Confirmation) int {
	ap, bp := a.State == api.ConfirmPending, b.State == api.ConfirmPending
	switch {
	case ap && !bp:
		return -1
	case bp && !ap:
		return 1
	}
	return compareStamps(b.CreatedAt, a.CreatedAt)
}

// compareStamps compares two RFC 3339 timestamps as times, falling back
// to the strings when either does not parse (fractional seconds of
// varying length do not sort as text).
func compareStamps(a, b string) int {
	ta, errA := time.Parse(time.RFC3339Nano, a)
	tb, errB := time.Parse(time.RFC3339Nano, b)
	if errA != nil || errB != nil {
		return strings.Compare(a, b)
	}
	return ta.Compare(tb)
}

// stampTime renders an RFC 3339 timestamp from pcpd in local time to the
// second; one that does not parse is shown cleaned, as it came.
func stampTime(s string) string {
	if s == "" {
		return "-"
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return clean(s)
	}
	return t.Local().Format(time.RFC3339)
}
