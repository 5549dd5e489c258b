package cli

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/store"
)

// hashPrefix is how many hex digits of an entry hash a table shows.
const hashPrefix = 12

func (e *env) auditCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "Read and verify the hash-chained audit log",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(e.auditTailCommand(), e.auditVerifyCommand())
	return cmd
}

func (e *env) auditTailCommand() *cobra.Command {
	var n int
	cmd := &cobra.Command{
		Use:   "tail [-n N]",
		Short: "Show the newest audit entries (audit.tail)",
		Args:  cobra.NoArgs,
	}
	cmd.Flags().IntVarP(&n, "lines", "n", 20, "how many entries")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		if n < 0 {
			return usagef("-n must not be negative")
		}
		res, err := once(ctx, e, false, api.MethodAuditTail, func(ctx context.Context, cl *client.Client) (*api.AuditTailResult, error) {
			return cl.AuditTail(ctx, n)
		})
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		if len(res.Entries) == 0 {
			_, err := fmt.Fprintln(e.stdout, "no audit entries")
			return err
		}
		t := newTable(e.stdout, "SEQ", "TIME", "KIND", "ACTOR", "APP", "CAPABILITY", "OUTCOME", "DURATION", "HASH")
		t.fit("ACTOR", "APP")
		t.fitStart("CAPABILITY")
		for _, a := range res.Entries {
			h := a.Hash
			if len(h) > hashPrefix {
				h = h[:hashPrefix]
			}
			t.row(strconv.FormatInt(a.Seq, 10), auditTime(a.Time), a.Kind, orDash(a.Actor), orDash(a.AppID), orDash(a.CapabilityID),
				orDash(a.Outcome), (time.Duration(a.DurationUS) * time.Microsecond).String(), h)
		}
		return t.flush()
	})
	return cmd
}

func (e *env) auditVerifyCommand() *cobra.Command {
	var db string
	cmd := &cobra.Command{
		Use:   "verify [--db FILE]",
		Short: "Verify the audit log's hash chain",
		Long: `Verify the audit log's hash chain. Without --db pcpd does it (audit.verify,
over the control socket) and also checks the log against the newest entry
it committed, so removed trailing entries are caught. With --db the state
database (pcp.db in pcpd's state directory) is checked offline, read-only;
pcpd may be running.

Exits non-zero, naming the first broken entry, when the chain is broken.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&db, "db", "", "verify this state database file offline instead of asking pcpd")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		var (
			res *api.AuditVerifyResult
			err error
		)
		if db != "" {
			var r api.AuditVerifyResult
			r, err = store.VerifyFile(ctx, db)
			res = &r
		} else {
			res, err = once(ctx, e, true, api.MethodAuditVerify, func(ctx context.Context, cl *client.Client) (*api.AuditVerifyResult, error) {
				return cl.AuditVerify(ctx)
			})
		}
		if err != nil {
			return err
		}
		if e.json {
			if err := printJSON(e.stdout, res); err != nil {
				return err
			}
		} else if res.OK {
			if _, err := fmt.Fprintf(e.stdout, "audit chain intact: %d entries, head %s\n", res.Entries, orDash(res.Head)); err != nil {
				return err
			}
		}
		if !res.OK {
			return fmt.Errorf("audit chain broken at entry %d: %s", res.BrokenSeq, res.Problem)
		}
		return nil
	})
	return cmd
}

// auditTime shortens an audit entry's RFC 3339 time to milliseconds, in
// local time; a time that does not parse is shown as it is.
func auditTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.Local().Format("2006-01-02T15:04:05.000Z07:00")
}
