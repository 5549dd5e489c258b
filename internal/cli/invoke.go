package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

func (e *env) invokeCommand() *cobra.Command {
	var (
		appID       string
		params      string
		wait        bool
		attachments string
		inline      bool
	)
	cmd := &cobra.Command{
		Use:   "invoke CAPABILITY_ID [key=value ...] [--params JSON] [--app ID]",
		Short: "Invoke a capability as the agent (invoke.capability)",
		Long: `Invoke a capability with source SystemIntelligence and print its status and data.

Parameters come from --params (a JSON object; @FILE reads it from a file,
- from standard input) and then from key=value arguments, which override it:

  key=value    the value as JSON if it parses (42, true, null, {"a":1}),
               otherwise as a string (key=hello, key="two words")
  key:=json    the value must be JSON
  key=@file    the contents of file, as a string

The app id defaults to the capability id without its last dot-separated part.

A capability whose trust level is confirm answers CONFIRMATION_REQUIRED.
With --wait, pcpctl keeps its connection (a confirmation belongs to the
connection that asked), says which confirmation the user must decide,
and invokes again once the user has: pcpctl confirm approve ID in
another terminal.

A result may carry attachments (an image, raw bytes): on the Unix socket
they arrive as file descriptors, over TCP (or with --inline) as base64.
pcpctl names each one; --attachments DIR writes each to DIR/NAME (with an
extension for common image types), refusing to overwrite a file.`,
		Example: `  pcpctl invoke pcp.inspection.health
  pcpctl invoke pcp.inspection.recent_events limit=5
  pcpctl invoke org.example.mail.compose recipient=a@example.com subject="Hello" body=@note.txt`,
		Args: cobra.MinimumNArgs(1),
	}
	cmd.Flags().StringVar(&appID, "app", "", "target app (default: the capability id without its last part)")
	cmd.Flags().StringVar(&params, "params", "", "parameters as a JSON object, @FILE, or - for standard input")
	cmd.Flags().BoolVar(&wait, "wait", false, "on CONFIRMATION_REQUIRED, wait for the user's decision and invoke again")
	cmd.Flags().StringVar(&attachments, "attachments", "", "write the result's attachments to files in this directory")
	cmd.Flags().BoolVar(&inline, "inline", false, "ask for attachments inline (base64) rather than as file descriptors")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, args []string) error {
		capID := args[0]
		if appID == "" {
			var ok bool
			if appID, ok = api.CapabilityAppID(capID); !ok {
				return usagef("capability id %q has no app part; pass --app", capID)
			}
		}
		raw, err := e.invokeParams(params, args[1:])
		if err != nil {
			return err
		}
		p := &api.InvokeCapabilityParams{CapabilityID: capID, AppID: appID, Source: api.SourceSystemIntelligence, Params: raw}
		if inline {
			p.Attachments = api.AttachmentsInline
		}
		var res *api.CapabilityResult
		switch {
		case wait && e.framed:
			return usagef("--wait speaks JSON-RPC only")
		case e.framed:
			res, err = framedOnce(ctx, e, "ExecuteRequest", func(ctx context.Context, fc *client.Framed) (*api.CapabilityResult, error) {
				return fc.ExecuteRequest(ctx, &api.ExecuteRequest{Capability: capID, Params: raw, Attachments: p.Attachments})
			})
		case wait:
			res, err = e.invokeWaiting(ctx, p)
		default:
			res, err = once(ctx, e, false, api.MethodInvokeCapability, func(ctx context.Context, cl *client.Client) (*api.CapabilityResult, error) {
				return cl.InvokeCapability(ctx, p)
			})
		}
		if err != nil {
			return err
		}
		saved, err := saveAttachments(attachments, res.Attachments)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, res)
		}
		if _, err := fmt.Fprintf(e.stdout, "%s: %s\n", clean(capID), clean(res.Status)); err != nil {
			return err
		}
		for i, a := range res.Attachments {
			where := "(--attachments DIR saves it)"
			if saved != nil {
				where = "→ " + clean(saved[i])
			}
			if _, err := fmt.Fprintf(e.stdout, "attachment %s (%s, %d bytes) %s\n", clean(a.Name), clean(a.MediaType), len(a.Data), where); err != nil {
				return err
			}
		}
		if len(res.Data) == 0 || string(res.Data) == "null" {
			return nil
		}
		_, err = fmt.Fprintln(e.stdout, indentJSON(res.Data))
		return err
	})
	return cmd
}

// invokeParams builds the params object from --params and key=value
// arguments; nil when there are none.
func (e *env) invokeParams(base string, pairs []string) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if base != "" {
		raw, err := e.readParamsFlag(base)
		if err != nil {
			return nil, err
		}
		if err := decodeObject(raw, &obj); err != nil {
			return nil, usagef("--params: %v", err)
		}
	}
	seen := map[string]bool{}
	for _, arg := range pairs {
		key, val, err := parsePair(arg, readFile)
		if err != nil {
			return nil, err
		}
		if seen[key] {
			return nil, usagef("parameter %q given twice", key)
		}
		seen[key] = true
		obj[key] = val
	}
	if base == "" && len(pairs) == 0 {
		return nil, nil
	}
	return marshalNoEscape(obj)
}

func (e *env) readParamsFlag(v string) ([]byte, error) {
	switch {
	case v == "-":
		b, err := readLimited(e.stdin, "standard input")
		if err != nil {
			return nil, fmt.Errorf("--params: %w", err)
		}
		return b, nil
	case strings.HasPrefix(v, "@"):
		b, err := readFile(v[1:])
		if err != nil {
			return nil, fmt.Errorf("--params: %w", err)
		}
		return b, nil
	}
	return []byte(v), nil
}

// decodeObject decodes raw, which must be one JSON object.
func decodeObject(raw []byte, obj *map[string]json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return fmt.Errorf("want a JSON object")
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return fmt.Errorf("not a JSON object: %w", err)
	}
	return nil
}

// parsePair parses one key=value argument of invoke; readFile serves
// key=@file.
func parsePair(arg string, readFile func(string) ([]byte, error)) (string, json.RawMessage, error) {
	i := strings.IndexByte(arg, '=')
	if i < 0 {
		return "", nil, usagef("parameter %q: want key=value, key:=json or key=@file", arg)
	}
	key, val := arg[:i], arg[i+1:]
	forceJSON := strings.HasSuffix(key, ":")
	if forceJSON {
		key = key[:len(key)-1]
	}
	if key == "" {
		return "", nil, usagef("parameter %q: empty name", arg)
	}
	switch {
	case forceJSON:
		if !json.Valid([]byte(val)) {
			return "", nil, usagef("parameter %q: %s is not valid JSON", key, val)
		}
		return key, compactJSON(val), nil
	case strings.HasPrefix(val, "@"):
		b, err := readFile(val[1:])
		if err != nil {
			return "", nil, fmt.Errorf("parameter %q: %w", key, err)
		}
		s, err := marshalNoEscape(string(b))
		return key, s, err
	case json.Valid([]byte(val)):
		return key, compactJSON(val), nil
	}
	s, err := marshalNoEscape(val)
	return key, s, err
}

// marshalNoEscape encodes v as JSON without escaping <, > and &.
func marshalNoEscape(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("encoding params: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte{'\n'}), nil
}

// compactJSON compacts valid JSON text.
func compactJSON(s string) json.RawMessage {
	var buf bytes.Buffer
	json.Compact(&buf, []byte(s))
	return buf.Bytes()
}

// readFile reads a file of at most maxInput bytes.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readLimited(f, path)
}

func readLimited(r io.Reader, name string) ([]byte, error) {
	if r == nil {
		return nil, fmt.Errorf("reading %s: no input", name)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(b) > maxInput {
		return nil, fmt.Errorf("%s is larger than %d bytes", name, maxInput)
	}
	return b, nil
}

// invokeWaiting invokes p and, while the answer is CONFIRMATION_REQUIRED,
// tells the user what to decide and invokes again on the same connection
// with the confirmation id, waiting for the decision.
func (e *env) invokeWaiting(ctx context.Context, p *api.InvokeCapabilityParams) (*api.CapabilityResult, error) {
	return waitingCall(ctx, e, api.MethodInvokeCapability, func(ctx context.Context, cl *client.Client, id string, waitMS int64) (*api.CapabilityResult, error) {
		if id != "" {
			p.ConfirmationID, p.WaitMS = id, waitMS
		}
		return cl.InvokeCapability(ctx, p)
	})
}

// actionWaiting is invokeWaiting for invoke.action.
func (e *env) actionWaiting(ctx context.Context, p *api.InvokeActionParams) (*api.InvokeActionResult, error) {
	return waitingCall(ctx, e, api.MethodInvokeAction, func(ctx context.Context, cl *client.Client, id string, waitMS int64) (*api.InvokeActionResult, error) {
		if id != "" {
			p.ConfirmationID, p.WaitMS = id, waitMS
		}
		return cl.InvokeAction(ctx, p)
	})
}

// waitingCall makes a call (id "" the first time) and, while the answer is
// CONFIRMATION_REQUIRED, tells the user what to decide and calls again on
// the same connection presenting the confirmation id, waiting up to
// waitMS for the decision.
func waitingCall[T any](ctx context.Context, e *env, method string, do func(ctx context.Context, cl *client.Client, id string, waitMS int64) (*T, error)) (*T, error) {
	var zero *T
	cl, err := e.connect(ctx, false, client.Options{})
	if err != nil {
		return zero, err
	}
	defer cl.Close()
	waitMS := int64(30000)
	if e.timeout > 0 && e.timeout < 35*time.Second {
		waitMS = max(e.timeout.Milliseconds()-5000, 1000)
	}
	for announced := ""; ; {
		res, err := call(ctx, e, method, func(ctx context.Context) (*T, error) {
			return do(ctx, cl, announced, waitMS)
		})
		var pe *api.Error
		if !errors.As(err, &pe) || pe.Code != api.CodeConfirmationRequired {
			return res, err
		}
		d := pe.DataMap()
		id, _ := d["confirmation_id"].(string)
		if id == "" || (announced != "" && id != announced) {
			return zero, err // not the confirmation we were waiting for
		}
		if announced == "" {
			fmt.Fprintf(e.stderr, "waiting for the user to decide %s: %s\n  pcpctl confirm approve %s    (or deny; expires %v)\n",
				clean(id), clean(fmt.Sprint(d["description"])), clean(id), d["expires_at"])
			announced = id
		}
	}
}

// saveAttachments writes each attachment to dir/NAME (NAME made safe for
// a file name, with an extension for common image types) and returns the
// paths; nil when dir is empty. An existing file is not overwritten.
func saveAttachments(dir string, as []api.Attachment) ([]string, error) {
	if dir == "" {
		return nil, nil
	}
	paths := make([]string, len(as))
	for i, a := range as {
		name := attachmentFileName(a, i)
		path := filepath.Join(dir, name)
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("saving attachment %s: %w", clean(a.Name), err)
		}
		_, err = f.Write(a.Data)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return nil, fmt.Errorf("saving attachment %s: %w", clean(a.Name), err)
		}
		paths[i] = path
	}
	return paths, nil
}

// attachmentFileName is a file name for attachment i: its name with
// anything but letters, digits, '-', '_' and '.' replaced by '_' and
// leading dots dropped, never empty.
func attachmentFileName(a api.Attachment, i int) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, a.Name)
	name = strings.TrimLeft(name, ".")
	if len(name) > 100 {
		name = name[:100]
	}
	if name == "" {
		name = fmt.Sprintf("attachment-%d", i)
	}
	if !strings.Contains(name, ".") {
		name += map[string]string{"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "image/gif": ".gif"}[a.MediaType]
	}
	return name
}
