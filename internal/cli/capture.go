package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

func (e *env) captureCommand() *cobra.Command {
	var (
		out       string
		maxLong   int
		maxPixels int
		noWait    bool
	)
	cmd := &cobra.Command{
		Use:   "capture [SURFACE_ID] -o FILE.png",
		Short: "Capture a window or the screen as PNG (system.capture)",
		Long: `Capture a window (a surface id, from pcpctl context or query.surface), or
the whole screen without one, as the agent does: the capability
system.capture, scaled to fit a model's limits (long edge 1568 px and at
most 1.15 megapixels unless --max-long-edge / --max-pixels say
otherwise). The image arrives as a file descriptor on the Unix socket and
is written to FILE; the size, the scale factor and the origin (to map
coordinates back to the screen) are printed.

system.capture asks the user's confirmation unless the policy relaxes it:
pcpctl waits for the decision (pcpctl confirm approve ID in another
terminal) unless --no-wait.`,
		Example: `  pcpctl capture -o screen.png
  pcpctl capture x11:0x1e00007 -o window.png --max-long-edge 800`,
		Args: cobra.MaximumNArgs(1),
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "the PNG file to write (required; refused if it exists)")
	cmd.Flags().IntVar(&maxLong, "max-long-edge", 0, "scale so that the long edge is at most this many pixels (default 1568)")
	cmd.Flags().IntVar(&maxPixels, "max-pixels", 0, "scale so that the image has at most this many pixels (default 1150000)")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "do not wait for the user's confirmation")
	cmd.MarkFlagRequired("output")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
		params := map[string]any{}
		if len(args) == 1 {
			params["surface_id"] = args[0]
		}
		if maxLong > 0 {
			params["max_long_edge"] = maxLong
		}
		if maxPixels > 0 {
			params["max_pixels"] = maxPixels
		}
		raw, _ := json.Marshal(params)
		p := &api.InvokeCapabilityParams{CapabilityID: "system.capture", AppID: "system", Source: api.SourceSystemIntelligence, Params: raw}
		var res *api.CapabilityResult
		var err error
		switch {
		case e.framed && !noWait:
			return usagef("capture --framed needs --no-wait: waiting for the user's confirmation speaks JSON-RPC only")
		case e.framed:
			res, err = framedOnce(ctx, e, "ExecuteRequest", func(ctx context.Context, fc *client.Framed) (*api.CapabilityResult, error) {
				return fc.ExecuteRequest(ctx, &api.ExecuteRequest{Capability: p.CapabilityID, Params: p.Params})
			})
		case noWait:
			res, err = once(ctx, e, false, api.MethodInvokeCapability, func(ctx context.Context, cl *client.Client) (*api.CapabilityResult, error) {
				return cl.InvokeCapability(ctx, p)
			})
		default:
			res, err = e.invokeWaiting(ctx, p)
		}
		if err != nil {
			return err
		}
		var img []byte
		for _, a := range res.Attachments {
			if a.Name == "image" {
				img = a.Data
			}
		}
		if img == nil {
			return fmt.Errorf("system.capture answered no image attachment")
		}
		f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return err
		}
		_, err = f.Write(img)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, json.RawMessage(res.Data))
		}
		var d struct {
			Width, Height, X, Y int
			Scale               float64
		}
		json.Unmarshal(res.Data, &d)
		_, err = fmt.Fprintf(e.stdout, "%s: %dx%d PNG, %d bytes, scale %g, origin %d,%d\n", clean(out), d.Width, d.Height, len(img), d.Scale, d.X, d.Y)
		return err
	})
	return cmd
}
