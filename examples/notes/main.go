// Command notes is a small notes app, kept in a SQLite file, that serves
// its notes to agents through pcpd: create, list, search, read, update
// and delete, declared in the signed manifest given with --manifest. It
// is a Tier 1 app: it asks pcpd, on the agent socket, for a per-app
// socket and serves the PcpServer contract there with package sdk,
// answering parameter checks and state queries ({"notes": count, "db":
// path}) as well as invocations.
//
//	notes --manifest ~/.local/state/pcp-notes/manifest.signed.json
//
// manifest.json beside this file is the unsigned template; sign it with
// `pcpctl manifest sign --app org.pcp.notes`. scripts/demo does all of it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/sdk"
)

type config struct {
	socket   string
	manifest string
	db       string
	logLevel slog.Level
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("notes", flag.ExitOnError)
	fs.StringVar(&cfg.socket, "socket", client.DefaultSocket(), "pcpd agent socket")
	fs.StringVar(&cfg.manifest, "manifest", "", "signed manifest to register (required)")
	fs.StringVar(&cfg.db, "db", DefaultDBPath(), "notes database file")
	fs.TextVar(&cfg.logLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	fs.Parse(os.Args[1:])
	if cfg.manifest == "" || fs.NArg() > 0 {
		fmt.Fprintln(os.Stderr, "usage: notes --manifest SIGNED.json [--socket PATH] [--db PATH]")
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "notes:", err)
		os.Exit(1)
	}
}

// run serves the notes until ctx is cancelled, which is not an error.
// A revoked app keeps running and serves again once the user allows it
// (sdk.Serve's default).
func run(ctx context.Context, cfg config) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.logLevel}))
	raw, err := os.ReadFile(cfg.manifest)
	if err != nil {
		return fmt.Errorf("reading manifest: %w", err)
	}
	st, err := OpenStore(ctx, cfg.db)
	if err != nil {
		return err
	}
	defer st.Close()
	caps := capabilities(st)
	if err := checkManifest(raw, caps); err != nil {
		return fmt.Errorf("manifest %s: %w", cfg.manifest, err)
	}

	db, err := filepath.Abs(cfg.db)
	if err != nil {
		db = cfg.db
	}
	log.Info("serving notes", "app_id", AppID, "socket", cfg.socket, "db", db)
	app := &sdk.App{
		AppID:          AppID,
		SignedManifest: raw,
		Capabilities:   caps,
		Validate:       validate,
		State:          state(st, db),
	}
	app.OnShutdown = func(reason string) {
		log.Warn("pcpd shut the notes app down; waiting to be allowed again", "reason", reason)
	}
	if err := app.Serve(ctx, &sdk.Options{AgentSocket: cfg.socket, Logger: log}); err != nil {
		return fmt.Errorf("serving %s through %s: %w", AppID, cfg.socket, err)
	}
	return nil
}

// checkManifest makes sure the manifest raw is for this app and declares
// exactly the capabilities caps serves, so that a stale or foreign
// manifest fails here, with a clear message, and not at the first
// invocation.
func checkManifest(raw []byte, caps map[string]sdk.CapabilityFunc) error {
	var m struct {
		AppID        *string `json:"app_id"`
		Capabilities []struct {
			Name string `json:"name"`
		} `json:"capabilities"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return fmt.Errorf("not a manifest object: %w", err)
	}
	if m.AppID != nil && *m.AppID != AppID {
		return fmt.Errorf("app_id is %q, want %q", *m.AppID, AppID)
	}
	var errs []error
	declared := map[string]bool{}
	for _, c := range m.Capabilities {
		declared[c.Name] = true
		if caps[c.Name] == nil {
			errs = append(errs, fmt.Errorf("declares capability %q, which this program does not serve", c.Name))
		}
	}
	names := make([]string, 0, len(caps))
	for name := range caps {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !declared[name] {
			errs = append(errs, fmt.Errorf("does not declare capability %q", name))
		}
	}
	return errors.Join(errs...)
}
