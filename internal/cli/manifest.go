package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/manifest"
)

// appIDMember is the manifest member that binds a signed manifest to one
// app id, so that its signature cannot be replayed for another app.
const appIDMember = "app_id"

func (e *env) manifestCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "manifest",
		Short: "Make publisher keys; sign, verify and check capability manifests",
		Long: `Make publisher keys; sign, verify and check capability manifests.

A manifest file holds the manifest object of register.capability: version,
capabilities and, once signed, signature. Signing sets its app_id member,
which binds the signature to that app. Reading a file named - reads standard
input.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(e.keygenCommand(), e.signCommand(), e.verifyCommand(), e.checkCommand())
	return cmd
}

func (e *env) keygenCommand() *cobra.Command {
	var prefix string
	cmd := &cobra.Command{
		Use:   "keygen [--out PREFIX]",
		Short: "Make an Ed25519 publisher key pair",
		Long: `Make an Ed25519 publisher key pair: PREFIX.key, the private key (PKCS#8 PEM,
mode 0600), and PREFIX.pub.pem, the public key (PKIX PEM). Existing files are
never overwritten.

pcpd trusts a publisher once its public key is in pcpd's trust directory;
the file name without .pub.pem names the publisher.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVarP(&prefix, "out", "o", "publisher", "path prefix of the key files")
	cmd.RunE = e.run(func(context.Context, *cobra.Command, []string) error {
		if prefix == "" {
			return usagef("--out must not be empty")
		}
		keyPath, pubPath := prefix+".key", prefix+".pub.pem"
		for _, p := range []string{keyPath, pubPath} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("manifest keygen: %s already exists; not overwriting it (choose another --out)", p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("manifest keygen: %w", err)
			}
		}
		priv, pub, err := manifest.GenerateKey()
		if err != nil {
			return err
		}
		if err := writeNew(keyPath, priv, 0o600); err != nil {
			return fmt.Errorf("manifest keygen: %w", err)
		}
		if err := writeNew(pubPath, pub, 0o644); err != nil {
			os.Remove(keyPath)
			return fmt.Errorf("manifest keygen: %w", err)
		}
		publisher := manifest.PublisherName(pubPath)
		if e.json {
			return printJSON(e.stdout, map[string]string{"private_key": keyPath, "public_key": pubPath, "publisher": publisher})
		}
		_, err = fmt.Fprintf(e.stdout, `private key: %s (keep it secret)
public key:  %s
To make pcpd trust manifests signed with this key, copy the public key into
its trust directory (pcpd --trust-dir, default %s);
the publisher is then named %q.
`, keyPath, pubPath, defaultTrustDir(), publisher)
		return err
	})
	return cmd
}

// writeNew creates path with data, failing if it exists.
func writeNew(path string, data []byte, perm os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// defaultTrustDir is pcpd's default trust directory, for hints.
func defaultTrustDir() string {
	if d := os.Getenv("XDG_CONFIG_HOME"); d != "" {
		return filepath.Join(d, "pcp", "trusted-keys")
	}
	return filepath.Join("~", ".config", "pcp", "trusted-keys")
}

func (e *env) signCommand() *cobra.Command {
	var keyPath, appID, out string
	cmd := &cobra.Command{
		Use:   "sign --key KEY.pem [--app APP_ID] [-o OUT] MANIFEST.json",
		Short: "Sign a manifest with a publisher's private key",
		Long: `Sign a manifest with a publisher's private key and write the signed manifest
to OUT or standard output.

--app sets the manifest's app_id member, which binds the signature to that
app: pcpd refuses the manifest from any other app id. Without --app the
manifest must already have an app_id member. The manifest is validated
before it is signed.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&keyPath, "key", "", "the publisher's private key (PKCS#8 PEM)")
	cmd.Flags().StringVar(&appID, "app", "", "the app id to bind the manifest to")
	cmd.Flags().StringVarP(&out, "output", "o", "", "write the signed manifest here instead of standard output")
	cmd.MarkFlagRequired("key")
	cmd.RunE = e.run(func(_ context.Context, _ *cobra.Command, args []string) error {
		path := args[0]
		raw, err := e.readInput(path)
		if err != nil {
			return fmt.Errorf("manifest sign: %w", err)
		}
		keyPEM, err := readFile(keyPath)
		if err != nil {
			return fmt.Errorf("manifest sign: %w", err)
		}
		key, err := manifest.ParsePrivateKey(keyPEM)
		if err != nil {
			return fmt.Errorf("manifest sign: %s: %w", keyPath, err)
		}
		obj, err := manifestObject(path, raw)
		if err != nil {
			return err
		}
		member, err := memberAppID(path, obj)
		if err != nil {
			return err
		}
		switch {
		case appID == "" && member == "":
			return usagef("manifest sign: %s has no %s member; pass --app to bind it to an app", path, appIDMember)
		case appID == "":
			appID = member
		case member != "" && member != appID:
			fmt.Fprintf(e.stderr, "pcpctl: %s: replacing %s %q with %q\n", path, appIDMember, member, appID)
		}
		if err := manifest.ValidateAppID(appID); err != nil {
			return err
		}
		obj[appIDMember], _ = json.Marshal(appID)
		if _, ok := obj["signature"]; !ok {
			obj["signature"] = json.RawMessage(`""`) // Parse wants the member; Sign fills it
		}
		unsigned, err := json.Marshal(obj)
		if err != nil {
			return fmt.Errorf("manifest sign: %s: %w", path, err)
		}
		if _, err := manifest.Parse(appID, unsigned); err != nil {
			return err
		}
		signed, err := manifest.Sign(unsigned, key)
		if err != nil {
			return err
		}
		text := indentJSON(signed) + "\n"
		if out == "" {
			_, err := fmt.Fprint(e.stdout, text)
			return err
		}
		if err := os.WriteFile(out, []byte(text), 0o644); err != nil {
			return fmt.Errorf("manifest sign: %w", err)
		}
		if e.json {
			return printJSON(e.stdout, map[string]string{"app_id": appID, "output": out})
		}
		_, err = fmt.Fprintf(e.stdout, "signed manifest for %s written to %s\n", appID, out)
		return err
	})
	return cmd
}

func (e *env) verifyCommand() *cobra.Command {
	var trustDir, appID string
	cmd := &cobra.Command{
		Use:   "verify --trust-dir DIR [--app APP_ID] MANIFEST.json",
		Short: "Validate a signed manifest and verify its signature",
		Long: `Validate a signed manifest and verify its signature against the publisher keys
in a trust directory, as pcpd does when the app registers. The app id
defaults to the manifest's app_id member.`,
		Args: cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&trustDir, "trust-dir", "", "directory of trusted publisher public keys")
	cmd.Flags().StringVar(&appID, "app", "", "the app id that will register the manifest")
	cmd.MarkFlagRequired("trust-dir")
	cmd.RunE = e.run(func(_ context.Context, _ *cobra.Command, args []string) error {
		path := args[0]
		raw, id, err := e.loadManifest(path, appID)
		if err != nil {
			return err
		}
		if _, err := manifest.Parse(id, raw); err != nil {
			return err
		}
		ts, errs := manifest.LoadTrustDir(trustDir)
		for _, err := range errs {
			fmt.Fprintf(e.stderr, "pcpctl: warning: %v\n", err)
		}
		publisher, err := ts.Verify(id, raw)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, map[string]any{"valid": true, "app_id": id, "publisher": publisher})
		}
		_, err = fmt.Fprintf(e.stdout, "valid: signed by %s\n", clean(publisher))
		return err
	})
	return cmd
}

func (e *env) checkCommand() *cobra.Command {
	var appID string
	cmd := &cobra.Command{
		Use:   "check [--app APP_ID] MANIFEST.json",
		Short: "Validate a manifest without checking its signature",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().StringVar(&appID, "app", "", "the app id that will register the manifest (default: its app_id member)")
	cmd.RunE = e.run(func(_ context.Context, _ *cobra.Command, args []string) error {
		path := args[0]
		raw, id, err := e.loadManifest(path, appID)
		if err != nil {
			return err
		}
		m, err := manifest.Parse(id, raw)
		if err != nil {
			return err
		}
		if e.json {
			return printJSON(e.stdout, m)
		}
		signed := "unsigned"
		if m.Signature != "" {
			signed = "signed (signature not checked)"
		}
		if _, err := fmt.Fprintf(e.stdout, "manifest for %s: version %s, %d capabilities, %s\n",
			clean(id), clean(m.Version), len(m.Capabilities), signed); err != nil {
			return err
		}
		t := newTable(e.stdout, "CAPABILITY", "TIER", "TRUST", "PARAMETERS", "DESCRIPTION")
		t.fit("PARAMETERS", "DESCRIPTION")
		for _, c := range m.Capabilities {
			params := make([]string, len(c.Parameters))
			for i, p := range c.Parameters {
				params[i] = p.Name + ":" + p.Type
				if !p.IsRequired() {
					params[i] += "?"
				}
			}
			t.row(manifest.CapabilityID(id, c.Name), strconv.Itoa(c.Tier), c.TrustLevel,
				orDash(strings.Join(params, " ")), truncate(clean(c.Description), descriptionWidth))
		}
		return t.flush()
	})
	return cmd
}

// loadManifest reads a manifest file and settles the app id it is for:
// flagApp if set, else its app_id member. Whether the two agree is for
// manifest.Parse to say.
func (e *env) loadManifest(path, flagApp string) (json.RawMessage, string, error) {
	raw, err := e.readInput(path)
	if err != nil {
		return nil, "", err
	}
	if flagApp != "" {
		return raw, flagApp, nil
	}
	obj, err := manifestObject(path, raw)
	if err != nil {
		return nil, "", err
	}
	member, err := memberAppID(path, obj)
	if err != nil {
		return nil, "", err
	}
	if member == "" {
		return nil, "", usagef("%s has no %s member; pass --app", path, appIDMember)
	}
	return raw, member, nil
}

// manifestObject decodes the top level of a manifest file, which must be
// an I-JSON object as Sign and Verify require.
func manifestObject(path string, raw []byte) (map[string]json.RawMessage, error) {
	if _, err := manifest.SigningPayload(raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return obj, nil
}

// memberAppID returns the manifest's app_id member, "" when it has none.
func memberAppID(path string, obj map[string]json.RawMessage) (string, error) {
	v, ok := obj[appIDMember]
	if !ok {
		return "", nil
	}
	var s string
	if len(bytes.TrimSpace(v)) == 0 || v[0] != '"' || json.Unmarshal(v, &s) != nil || s == "" {
		return "", api.Errorf(api.CodeManifestInvalid, map[string]any{"field": appIDMember},
			"%s: %s must be a non-empty string, got %s", path, appIDMember, clean(truncate(string(v), 40)))
	}
	return s, nil
}

// readInput reads a named file, or standard input for "-".
func (e *env) readInput(path string) ([]byte, error) {
	if path == "-" {
		return readLimited(e.stdin, "standard input")
	}
	return readFile(path)
}
