package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/pavo"
)

func (e *env) serveCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Serve pcpd to a pavo dashboard: the driver's ndjson ops on stdin and stdout",
		Long: `Speak the pavo driver protocol (v1) on standard input and output: one JSON
request a line in, one reply a line out, {"ok":true,"result":…} or
{"ok":false,"error":"…"}. The ops are manifest, views, view, query, render,
submit, jobs and notifications; see docs/pavo.md.

A dashboard launches this on the user's behalf, so it reaches pcpd over the
control socket (--control-socket) as the user: its forms approve and deny
confirmations, undo jobs, revoke and allow apps and invoke capabilities.
It connects when an op first needs pcpd and again after pcpd restarts;
manifest and views never need it. It ends at the end of its input.`,
		Args: cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			if e.framed {
				return usagef("serve speaks JSON-RPC to pcpd; drop --framed")
			}
			daemon := &pavo.Redial{Dial: func(ctx context.Context) (pavo.Conn, error) {
				return e.connect(ctx, true, client.Options{})
			}}
			defer daemon.Close()
			return pavo.Serve(ctx, e.stdin, e.stdout, &pavo.Driver{
				Daemon:      daemon,
				Version:     version(),
				CallTimeout: e.timeout,
				OnPanic: func(op string, v any, stack []byte) {
					fmt.Fprintf(e.stderr, "pcpctl serve: recovered from a panic in %s: %v\n%s", op, v, stack)
				},
			})
		}),
	}
}
