package cli

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// Version is pcpctl's version. Release builds set it with
// -ldflags "-X github.com/pcp-dev/pcp/internal/cli.Version=v1.2.3";
// otherwise it comes from the module's build information, else it is
// the version of the tree it was built from, pcpd's (api.Version).
var Version = ""

// versionProbeTimeout bounds how long `version` waits for the daemon.
const versionProbeTimeout = 2 * time.Second

func version() string {
	if Version != "" {
		return Version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return api.Version
}

func (e *env) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print pcpctl's version and pcpd's; fails when pcpd is not reachable",
		Args:  cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(ctx, versionProbeTimeout)
			defer cancel()
			daemon, derr := "", error(nil)
			if cl, err := client.Dial(ctx, e.socket, client.Options{}); err != nil {
				derr = err
			} else {
				h, err := cl.Health(ctx)
				cl.Close()
				if err != nil {
					derr = err
				} else {
					daemon = h.Version
				}
			}
			if e.json {
				v := map[string]string{"pcpctl": version()}
				if derr == nil {
					v["pcpd"] = daemon
				}
				return printJSON(e.stdout, v)
			}
			if _, err := fmt.Fprintf(e.stdout, "pcpctl %s\n", version()); err != nil {
				return err
			}
			if derr != nil {
				return fmt.Errorf("pcpd: not reachable: %w", derr)
			}
			_, err := fmt.Fprintf(e.stdout, "pcpd %s\n", clean(daemon))
			return err
		}),
	}
}
