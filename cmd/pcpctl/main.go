// Command pcpctl is the command-line client of pcpd, the PCP capability
// broker. See `pcpctl --help`; the commands live in internal/cli.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pcp-dev/pcp/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprint(os.Stderr, cli.FormatError(err))
		os.Exit(cli.ExitCode(err))
	}
}
