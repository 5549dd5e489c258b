package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/client"
)

func (e *env) scompCommand() *cobra.Command {
	var socket string
	cmd := &cobra.Command{
		Use:   "scomp",
		Short: "Run JavaScript against PCP's capabilities (spec 004)",
		Long: `pcpctl scomp talks to pcpd's scomp face on scomp.sock (beside the agent
socket): code in which every capability the agent may see is an async
function, run in a sandbox of pcpd's. See docs/scomp.md.`,
	}
	cmd.PersistentFlags().StringVar(&socket, "scomp-socket", client.DefaultScompSocket(), "pcpd's scomp socket ($PCP_SCOMP_SOCKET)")
	var file string
	eval := &cobra.Command{
		Use:   "eval ['CODE' | -f FILE]",
		Short: "Run one program and print its value as JSON",
		Long: `pcpctl scomp eval runs CODE (or the file FILE, "-" for standard input)
as one eval of a new scomp session and prints the value of its last
expression as JSON. await works at top level, e.g.

  pcpctl scomp eval 'const r = await pcp_inspection_ping({payload: 1}); r.data'

A failed eval prints its kind (EvalError, BindingError, TimeoutError,
MemoryError), message and stack, and exits non-zero.`,
		Args: cobra.MaximumNArgs(1),
	}
	eval.Flags().StringVarP(&file, "file", "f", "", "read the code from this file (- for standard input)")
	eval.RunE = e.run(func(ctx context.Context, cmd *cobra.Command, args []string) error {
		code, err := e.scompCode(file, args)
		if err != nil {
			return err
		}
		path := socket
		if !cmd.Flags().Changed("scomp-socket") && e.root.PersistentFlags().Changed("socket") && os.Getenv("PCP_SCOMP_SOCKET") == "" {
			path = filepath.Join(filepath.Dir(e.socket), "scomp.sock")
		}
		dctx, cancel := e.callContext(ctx)
		s, err := client.DialScomp(dctx, path)
		cancel()
		if err != nil {
			return err
		}
		defer s.Close()
		v, err := s.Eval(ctx, code)
		var se *client.ScompError
		if errors.As(err, &se) && se.Data.Kind != "" {
			fmt.Fprintf(e.stderr, "%s\n%s", se.Message, se.Data.Stack)
			if len(se.Data.Error) > 0 {
				fmt.Fprintf(e.stderr, "error: %s\n", se.Data.Error)
			}
			return fmt.Errorf("the eval failed (%s)", se.Data.Kind)
		}
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", v)
		return err
	})
	cmd.AddCommand(eval)
	return cmd
}

// scompCode is the code of pcpctl scomp eval: its argument or its file.
func (e *env) scompCode(file string, args []string) (string, error) {
	switch {
	case file != "" && len(args) > 0:
		return "", usagef("give the code or -f FILE, not both")
	case file == "-":
		b, err := io.ReadAll(e.stdin)
		return string(b), err
	case file != "":
		b, err := os.ReadFile(file)
		return string(b), err
	case len(args) == 1:
		return args[0], nil
	}
	return "", usagef("give the code to run, or -f FILE")
}
