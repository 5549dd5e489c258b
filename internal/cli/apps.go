package cli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

func (e *env) revokeCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "revoke APP_ID [--reason TEXT]",
		Short: "Revoke all of an app's capabilities (revoke.app)",
		Long: `Revoke an app: its capabilities leave the registry, its subscriptions end and
it cannot register again until the user allows it with 'pcpctl apps allow'.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the audit log")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
		res, err := once(ctx, e, false, api.MethodRevokeApp, func(ctx context.Context, cl *client.Client) (*api.RevokeAppResult, error) {
			return cl.RevokeApp(ctx, &api.RevokeAppParams{AppID: args[0], Reason: reason})
		})
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		if !res.Revoked {
			_, err := fmt.Fprintf(e.stdout, "%s was not revoked\n", clean(args[0]))
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "revoked %s; %d subscriptions terminated\n", clean(args[0]), res.TerminatedSubscriptions)
		return err
	})
	return cmd
}

func (e *env) appsCommand() *cobra.Command {
	list := e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		var res *api.AppsListResult
		var err error
		if e.framed {
			res, err = framedOnce(ctx, e, "RegistryQuery", func(ctx context.Context, fc *client.Framed) (*api.AppsListResult, error) {
				r, err := fc.RegistryQuery(ctx, &api.RegistryQuery{Kind: api.KindApps})
				if err != nil {
					return nil, err
				}
				if r.Apps == nil {
					return &api.AppsListResult{}, nil
				}
				return &api.AppsListResult{Apps: *r.Apps}, nil
			})
		} else {
			res, err = once(ctx, e, false, api.MethodAppsList, func(ctx context.Context, cl *client.Client) (*api.AppsListResult, error) {
				return cl.Apps(ctx)
			})
		}
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		if len(res.Apps) == 0 {
			_, err := fmt.Fprintln(e.stdout, "no apps")
			return err
		}
		apps := slices.Clone(res.Apps)
		slices.SortFunc(apps, func(a, b api.App) int { return strings.Compare(a.AppID, b.AppID) })
		t := newTable(e.stdout, "APP", "STATE", "TIER", "VIA", "CAPS", "SIGNED", "PUBLISHER", "REVOKED", "REASON")
		t.fit("PUBLISHER", "REASON")
		for _, a := range apps {
			t.row(a.AppID, a.State, tierCell(a.Tier), orDash(a.Via), strconv.Itoa(a.Capabilities), yesNo(a.Signed), orDash(a.Publisher),
				orDash(a.RevokedAt), orDash(truncate(clean(a.Reason), descriptionWidth)))
		}
		return t.flush()
	})
	cmd := &cobra.Command{
		Use:   "apps",
		Short: "List apps, or allow a revoked app again",
		Args:  cobra.NoArgs,
		RunE:  list,
	}
	cmd.AddCommand(
		&cobra.Command{
			Use:   "list",
			Short: "List registered, built-in and revoked apps (apps.list)",
			Args:  cobra.NoArgs,
			RunE:  list,
		},
		&cobra.Command{
			Use:   "allow APP_ID",
			Short: "Lift an app's revocation (apps.allow, over the control socket)",
			Long: `Lift an app's revocation so that it may register again. Only the user may do
this, so the request goes over the control socket (--control-socket).`,
			Args: cobra.ExactArgs(1),
			RunE: e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
				res, err := once(ctx, e, true, api.MethodAppsAllow, func(ctx context.Context, cl *client.Client) (*api.AppsAllowResult, error) {
					return cl.AllowApp(ctx, args[0])
				})
				if err != nil {
					return err
				}
				if e.json {
					return printJSON(e.stdout, res)
				}
				if !res.WasRevoked {
					_, err := fmt.Fprintf(e.stdout, "%s was not revoked; nothing to allow\n", clean(args[0]))
					return err
				}
				_, err = fmt.Fprintf(e.stdout, "allowed %s; it may register again\n", clean(args[0]))
				return err
			}),
		},
		e.appsStateCommand(),
	)
	return cmd
}

func (e *env) appsStateCommand() *cobra.Command {
	var keys []string
	cmd := &cobra.Command{
		Use:   "state APP_ID",
		Short: "Show the dynamic state a Tier 1 app reports (apps.state)",
		Long: `Ask an app served on its Tier 1 per-app socket for its dynamic state
(QueryState) and print it as JSON. --key narrows it to top-level keys.`,
		Args: cobra.ExactArgs(1),
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
			res, err := once(ctx, e, false, api.MethodAppsState, func(ctx context.Context, cl *client.Client) (*api.AppsStateResult, error) {
				return cl.AppState(ctx, &api.AppsStateParams{AppID: args[0], Keys: keys})
			})
			if err != nil {
				return err
			}
			if e.json {
				return printJSON(e.stdout, res)
			}
			return printJSON(e.stdout, res.State)
		}),
	}
	cmd.Flags().StringSliceVar(&keys, "key", nil, "only these top-level keys (repeatable)")
	return cmd
}

func (e *env) healthCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "health",
		Short: "Show pcpd's health (health.check)",
		Args:  cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			if e.framed {
				pong, err := framedOnce(ctx, e, "Ping", func(ctx context.Context, fc *client.Framed) (*api.Pong, error) { return fc.Ping(ctx) })
				if err != nil {
					return err
				}
				if e.json {
					return printJSON(e.stdout, pong)
				}
				t := newTable(e.stdout)
				t.row("uptime:", (time.Duration(pong.UptimeSecs) * time.Second).String())
				t.row("apps:", strconv.Itoa(pong.AppCount))
				t.row("capabilities:", strconv.Itoa(pong.CapabilityCount))
				t.row("subscriptions:", strconv.Itoa(pong.SubscriptionCount))
				t.row("journal length:", strconv.FormatInt(pong.JournalLength, 10))
				return t.flush()
			}
			h, err := once(ctx, e, false, api.MethodHealthCheck, func(ctx context.Context, cl *client.Client) (*api.HealthResult, error) {
				return cl.Health(ctx)
			})
			if err != nil {
				return err
			}
			if e.json {
				return printJSON(e.stdout, h)
			}
			t := newTable(e.stdout)
			t.row("status:", h.Status)
			t.row("version:", orDash(h.Version))
			t.row("uptime:", (time.Duration(h.UptimeMS) * time.Millisecond).Round(time.Second).String())
			t.row("sessions:", strconv.Itoa(h.ActiveSessions))
			t.row("pending confirmations:", strconv.Itoa(h.PendingConfirmations))
			t.row("apps:", strconv.Itoa(h.Apps))
			t.row("capabilities:", strconv.Itoa(h.Capabilities))
			t.row("subscriptions:", strconv.Itoa(h.Subscriptions))
			t.row("journal length:", strconv.FormatInt(h.JournalLength, 10))
			if err := t.flush(); err != nil {
				return err
			}
			if h.AllowUnsigned {
				if _, err := fmt.Fprintln(e.stdout, "WARNING: pcpd accepts unsigned manifests (--allow-unsigned); for development only"); err != nil {
					return err
				}
			}
			if len(h.Adapters) == 0 {
				_, err := fmt.Fprintln(e.stdout, "adapters: none")
				return err
			}
			fmt.Fprintln(e.stdout)
			t = newTable(e.stdout, "ADAPTER", "SURFACE TYPE", "TIERS", "STATUS", "DETAIL")
			t.fit("DETAIL")
			for _, a := range h.Adapters {
				tiers := make([]string, len(a.SupportedTiers))
				for i, n := range a.SupportedTiers {
					tiers[i] = strconv.Itoa(n)
				}
				t.row(a.AdapterID, a.SurfaceType, orDash(strings.Join(tiers, ",")), a.Status, orDash(a.Detail))
			}
			return t.flush()
		}),
	}
}
