package cli

import (
	"context"
	"fmt"
	"os/exec"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

func (e *env) dashboardCommand() *cobra.Command {
	var noOpen bool
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Print a one-time login URL of the web dashboard and open it in the browser",
		Long: `Dashboard asks pcpd (on the control socket, as the user) for a one-time
login URL of its web dashboard, prints it, and opens it with xdg-open when
there is one. The URL logs one browser in, once, within a minute; the
browser then holds a session cookie. pcpd serves the dashboard only when
started with --dashboard 127.0.0.1:PORT.`,
		Args: cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			res, err := once(ctx, e, true, api.MethodDashboardLogin, func(ctx context.Context, cl *client.Client) (*api.DashboardLoginResult, error) {
				return cl.DashboardLogin(ctx)
			})
			if err != nil {
				return err
			}
			if e.json {
				return printJSON(e.stdout, res)
			}
			fmt.Fprintln(e.stdout, clean(res.URL))
			if noOpen {
				return nil
			}
			opener, err := exec.LookPath("xdg-open")
			if err != nil {
				fmt.Fprintln(e.stderr, "no xdg-open here: open the URL above in your browser (it works once, until", res.ExpiresAt+")")
				return nil
			}
			// The browser outlives pcpctl; xdg-open returns once it has
			// handed the URL over.
			if err := exec.CommandContext(ctx, opener, res.URL).Run(); err != nil {
				fmt.Fprintf(e.stderr, "xdg-open failed (%v): open the URL above in your browser\n", err)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&noOpen, "no-open", false, "only print the URL")
	return cmd
}
