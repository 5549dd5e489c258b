package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/wireframe"
)

// descriptionWidth is how many runes of a description a table shows.
const descriptionWidth = 60

func (e *env) capsCommand() *cobra.Command {
	var (
		appID string
		tier  int
	)
	cmd := &cobra.Command{
		Use:   "caps [--app ID] [--tier N]",
		Short: "List capabilities (query.capabilities)",
		Long: `List capabilities: those apps register, and the generic ones (activate,
set_value, ...) of the apps pcpd reaches only through accessibility (tier 2).`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&appID, "app", "", "only this app's capabilities")
	cmd.Flags().IntVar(&tier, "tier", 0, "only capabilities of this tier")
	cmd.RunE = e.run(func(ctx context.Context, cmd *cobra.Command, _ []string) error {
		p := &api.QueryCapabilitiesParams{AppID: appID}
		if cmd.Flags().Changed("tier") {
			p.Tier = &tier
		}
		var res *api.QueryCapabilitiesResult
		var err error
		if e.framed {
			res, err = framedOnce(ctx, e, "RegistryQuery", func(ctx context.Context, fc *client.Framed) (*api.QueryCapabilitiesResult, error) {
				r, err := fc.RegistryQuery(ctx, &api.RegistryQuery{Kind: api.KindCapabilities, Filter: &api.RegistryFilter{AppID: p.AppID, Tier: p.Tier}})
				if err != nil {
					return nil, err
				}
				if r.Caps == nil {
					return &api.QueryCapabilitiesResult{}, nil
				}
				return &api.QueryCapabilitiesResult{Capabilities: *r.Caps}, nil
			})
		} else {
			res, err = once(ctx, e, false, api.MethodQueryCapabilities, func(ctx context.Context, cl *client.Client) (*api.QueryCapabilitiesResult, error) {
				return cl.QueryCapabilities(ctx, p)
			})
		}
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		if len(res.Capabilities) == 0 {
			_, err := fmt.Fprintln(e.stdout, "no capabilities")
			return err
		}
		caps := slices.Clone(res.Capabilities)
		slices.SortFunc(caps, func(a, b api.Capability) int { return strings.Compare(a.ID, b.ID) })
		t := newTable(e.stdout, "ID", "TRUST", "TIER", "AVAILABLE", "DESCRIPTION")
		t.fit("DESCRIPTION")
		for _, c := range caps {
			t.row(c.ID, c.TrustLevel, strconv.Itoa(c.Tier), yesNo(c.Available), truncate(clean(c.Description), descriptionWidth))
		}
		return t.flush()
	})
	return cmd
}

func (e *env) elementsCommand() *cobra.Command {
	var focus, svg string
	cmd := &cobra.Command{
		Use:   "elements SURFACE_ID [--focus ELEMENT_ID] [--svg FILE]",
		Short: "Print a surface's semantic element tree (query.elements)",
		Long: `Print a surface's semantic element tree, one element a line, children
indented under their parent. --svg FILE also draws the elements' bounds as
a wireframe picture (self-contained SVG) into FILE instead of printing the
tree ("-" writes it to standard output).`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&focus, "focus", "", "only the subtree of this element")
	cmd.Flags().StringVar(&svg, "svg", "", "draw the element bounds as an SVG wireframe into this file instead of printing the tree (- for standard output)")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
		res, err := once(ctx, e, false, api.MethodQueryElements, func(ctx context.Context, cl *client.Client) (*api.QueryElementsResult, error) {
			return cl.QueryElements(ctx, &api.QueryElementsParams{SurfaceID: args[0], FocusID: focus})
		})
		if err != nil {
			return err
		}
		if svg == "-" {
			_, err := e.stdout.Write(wireframe.SVG(&res.Root))
			return err
		}
		if svg != "" {
			if err := os.WriteFile(svg, wireframe.SVG(&res.Root), 0o644); err != nil {
				return err
			}
			if !e.json {
				_, err := fmt.Fprintf(e.stdout, "%s: the wireframe of %s, %d elements\n", clean(svg), clean(args[0]), countElements(&res.Root))
				return err
			}
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		return printElement(e.stdout, &res.Root, 0)
	})
	return cmd
}

// countElements counts el and its descendants.
func countElements(el *api.Element) int {
	n := 1
	for i := range el.Children {
		n += countElements(&el.Children[i])
	}
	return n
}

// printElement writes one element per line, children indented under their
// parent: role "label" (id) and, when present, actions, states and value.
func printElement(w io.Writer, el *api.Element, depth int) error {
	var b strings.Builder
	b.WriteString(strings.Repeat("  ", depth))
	b.WriteString(clean(orDash(el.Role)))
	if el.Label != "" {
		b.WriteString(" " + strconv.Quote(el.Label))
	}
	b.WriteString(" (" + clean(el.ID) + ")")
	if len(el.Actions) > 0 {
		b.WriteString(" actions=" + clean(strings.Join(el.Actions, ",")))
	}
	if len(el.States) > 0 {
		b.WriteString(" states=" + clean(strings.Join(el.States, ",")))
	}
	if len(el.Value) > 0 {
		b.WriteString(" value=" + jsonValue(el.Value))
	}
	b.WriteByte('\n')
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	for i := range el.Children {
		if err := printElement(w, &el.Children[i], depth+1); err != nil {
			return err
		}
	}
	return nil
}

func (e *env) surfaceCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "surface SURFACE_ID",
		Short: "Show a surface's metadata (query.surface)",
		Args:  cobra.ExactArgs(1),
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
			s, err := once(ctx, e, false, api.MethodQuerySurface, func(ctx context.Context, cl *client.Client) (*api.Surface, error) {
				return cl.QuerySurface(ctx, &api.QuerySurfaceParams{SurfaceID: args[0]})
			})
			if err != nil {
				return err
			}
			if e.json {
				return printJSON(e.stdout, s)
			}
			geometry := "-"
			if g := s.Geometry; g != nil {
				geometry = fmt.Sprintf("%dx%d at (%d,%d)", g.W, g.H, g.X, g.Y)
			}
			t := newTable(e.stdout)
			t.row("surface:", s.SurfaceID)
			t.row("app:", orDash(s.AppID))
			t.row("title:", strconv.Quote(s.Title))
			t.row("state:", orDash(s.State))
			t.row("geometry:", geometry)
			t.row("tier:", strconv.Itoa(s.Tier))
			return t.flush()
		}),
	}
}

func (e *env) contextCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "context",
		Short: "Show the session context (query.session_context)",
		Args:  cobra.NoArgs,
		RunE: e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
			sc, err := once(ctx, e, false, api.MethodQuerySessionContext, func(ctx context.Context, cl *client.Client) (*api.SessionContext, error) {
				return cl.SessionContext(ctx)
			})
			if err != nil {
				return err
			}
			if e.json {
				return printJSON(e.stdout, sc)
			}
			focused := "none"
			if sc.FocusedSurface != nil {
				focused = *sc.FocusedSurface
			}
			active := "none"
			if len(sc.ActiveSurfaces) > 0 {
				active = strings.Join(sc.ActiveSurfaces, ", ")
			}
			t := newTable(e.stdout)
			t.row("session:", sc.SessionID)
			t.row("focused surface:", focused)
			t.row("active surfaces:", active)
			if len(sc.SystemState) == 0 {
				t.row("system state:", "-")
				return t.flush()
			}
			t.row("system state:", "")
			keys := make([]string, 0, len(sc.SystemState))
			for k := range sc.SystemState {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			for _, k := range keys {
				raw, err := json.Marshal(sc.SystemState[k])
				if err != nil {
					return fmt.Errorf("system state %q: %w", k, err)
				}
				t.row("  "+k+":", jsonValue(raw))
			}
			return t.flush()
		}),
	}
}

func (e *env) actionCommand() *cobra.Command {
	var value string
	var wait bool
	cmd := &cobra.Command{
		Use:   "action SURFACE_ID ELEMENT_ID ACTION [--value JSON]",
		Short: "Perform a structural action on an element (invoke.action)",
		Long: `Perform a structural action on a semantic element: activate, select,
set_value (--value the new text or number, as JSON), scroll, or whatever
else the element's adapter lists in its actions. Element ids come from
'pcpctl elements'.

An action is gated by the trust level of the app's capability of that
action (APP.ACTION): when the user must approve it, pcpd answers
CONFIRMATION_REQUIRED; with --wait, pcpctl waits for the decision and acts
once it is approved.`,
		Args: cobra.ExactArgs(3),
	}
	cmd.Flags().StringVar(&value, "value", "", "the action's value, as JSON (\"text\", 42, true)")
	cmd.Flags().BoolVar(&wait, "wait", false, "on CONFIRMATION_REQUIRED, wait for the user's decision and act again")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
		p := &api.InvokeActionParams{SurfaceID: args[0], ElementID: args[1], Action: args[2]}
		if value != "" {
			if !json.Valid([]byte(value)) {
				return usagef("--value must be JSON, e.g. --value '\"text\"' or --value 42")
			}
			p.Value = json.RawMessage(value)
		}
		var res *api.InvokeActionResult
		var err error
		if wait {
			res, err = e.actionWaiting(ctx, p)
		} else {
			res, err = once(ctx, e, false, api.MethodInvokeAction, func(ctx context.Context, cl *client.Client) (*api.InvokeActionResult, error) {
				return cl.InvokeAction(ctx, p)
			})
		}
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		out := "executed"
		if !res.Executed {
			out = "not executed"
		}
		if len(res.Result) > 0 {
			out += " " + jsonValue(res.Result)
		}
		_, err = fmt.Fprintln(e.stdout, out)
		return err
	})
	return cmd
}
