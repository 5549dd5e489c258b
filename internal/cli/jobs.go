package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

func (e *env) jobsCommand() *cobra.Command {
	var n int
	list := e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		if n < 0 {
			return usagef("-n must not be negative")
		}
		res, err := once(ctx, e, false, api.MethodJobsList, func(ctx context.Context, cl *client.Client) (*api.JobsListResult, error) {
			return cl.JobsList(ctx, n)
		})
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		if len(res.Jobs) == 0 {
			_, err := fmt.Fprintln(e.stdout, "no jobs")
			return err
		}
		t := newTable(e.stdout, "ID", "STATE", "CAPABILITY", "RUN AT", "UPDATED", "REASON")
		t.fit("REASON")
		for _, j := range res.Jobs {
			t.row(j.JobID, j.State, j.CapabilityID, stampTime(j.RunAt), stampTime(j.UpdatedAt),
				orDash(truncate(clean(j.Reason), descriptionWidth)))
		}
		return t.flush()
	})
	const nUsage = "how many jobs, newest first"
	cmd := &cobra.Command{
		Use:   "jobs [-n N]",
		Short: "List deferred jobs, or undo a queued one",
		Long: `An approved invocation of a capability with an undo window becomes a job: it
waits out the window and then runs, unless the user undoes it first.`,
		Args: cobra.NoArgs,
		RunE: list,
	}
	cmd.Flags().IntVarP(&n, "lines", "n", 20, nUsage)
	listCmd := &cobra.Command{
		Use:   "list [-n N]",
		Short: "List deferred jobs, newest first (jobs.list)",
		Args:  cobra.NoArgs,
		RunE:  list,
	}
	listCmd.Flags().IntVarP(&n, "lines", "n", 20, nUsage)
	var last bool
	undoCmd := &cobra.Command{
		Use:   "undo ID|--last",
		Short: "Undo a queued job before it runs (jobs.undo, over the control socket)",
		Long: `Undo a queued job before its undo window closes, so that it never runs; with
--last, the newest job still queued. Only the user may do this, so the
request goes over the control socket (--control-socket).`,
		Args: cobra.MaximumNArgs(1),
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
			if (len(args) == 1) == last {
				return usagef("give a job id or --last")
			}
			res, err := once(ctx, e, true, api.MethodJobsUndo, func(ctx context.Context, cl *client.Client) (*api.JobsUndoResult, error) {
				if !last {
					return cl.JobsUndo(ctx, args[0])
				}
				list, err := cl.JobsList(ctx, 1000)
				if err != nil {
					return nil, err
				}
				id, newest := "", ""
				for _, j := range list.Jobs {
					if j.State == api.JobQueued && (id == "" || compareStamps(j.CreatedAt, newest) > 0) {
						id, newest = j.JobID, j.CreatedAt
					}
				}
				if id == "" {
					return nil, usagef("no job is queued")
				}
				return cl.JobsUndo(ctx, id)
			})
			if err != nil {
				return err
			}
			if e.json {
				return printJSON(e.stdout, res)
			}
			_, err = fmt.Fprintln(e.stdout, jobLine(res.Job))
			return err
		}),
	}
	undoCmd.Flags().BoolVar(&last, "last", false, "the newest queued job")
	cmd.AddCommand(listCmd, undoCmd)
	return cmd
}

// jobLine describes a job in one line.
func jobLine(j api.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", clean(j.State), clean(j.JobID), clean(j.CapabilityID))
	if j.RunAt != "" {
		fmt.Fprintf(&b, ", was due at %s", stampTime(j.RunAt))
	}
	if j.Reason != "" {
		fmt.Fprintf(&b, "; %s", clean(j.Reason))
	}
	return b.String()
}
