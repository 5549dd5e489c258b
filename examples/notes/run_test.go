package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/daemon"
	"github.com/pcp-dev/pcp/internal/manifest"
)

// TestRun serves the notes through a real daemon, in process: run
// registers the signed manifest, and an agent's invocations reach the
// SQLite store.
func TestRun(t *testing.T) {
	// Socket paths must stay under 108 bytes; t.TempDir can be long.
	dir, err := os.MkdirTemp("", "notes")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	trust := filepath.Join(dir, "trust")
	if err := os.Mkdir(trust, 0o700); err != nil {
		t.Fatal(err)
	}
	priv, pub, err := manifest.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(trust, "test.pem"), pub, 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := manifest.ParsePrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile("manifest.json")
	if err != nil {
		t.Fatal(err)
	}
	signed, err := manifest.Sign(tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	signedPath := filepath.Join(dir, "manifest.signed.json")
	if err := os.WriteFile(signedPath, signed, 0o600); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sock := filepath.Join(dir, "run", "pcp.sock")
	ready := make(chan struct{})
	daemonDone := make(chan error, 1)
	go func() {
		daemonDone <- daemon.Run(ctx, daemon.Config{
			Socket: sock, StateDir: filepath.Join(dir, "state"), TrustDir: trust,
			MaxLine: 4 << 20, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
			Ready: func() { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-daemonDone:
		t.Fatalf("daemon: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("daemon not ready after 10s")
	}

	appDone := make(chan error, 1)
	go func() {
		appDone <- run(ctx, config{socket: sock, manifest: signedPath, db: filepath.Join(dir, "notes.db"), logLevel: slog.LevelError + 1})
	}()

	cl, err := client.Dial(ctx, sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := cl.QueryCapabilities(ctx, &api.QueryCapabilitiesParams{AppID: AppID})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Capabilities) == 6 && res.Capabilities[0].Available {
			break
		}
		select {
		case err := <-appDone:
			t.Fatalf("notes app stopped before registering: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("notes capabilities not available after 10s: %+v", res.Capabilities)
		}
		time.Sleep(20 * time.Millisecond)
	}

	res, err := cl.InvokeCapability(ctx, &api.InvokeCapabilityParams{
		CapabilityID: AppID + ".create", AppID: AppID,
		Params: json.RawMessage(`{"title":"from the agent","body":"hello","tags":["pcp"]}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	var created CreateResult
	if err := json.Unmarshal(res.Data, &created); err != nil || created.ID != 1 {
		t.Fatalf("create data %s: %v; want id 1", res.Data, err)
	}
	res, err = cl.InvokeCapability(ctx, &api.InvokeCapabilityParams{
		CapabilityID: AppID + ".search", AppID: AppID, Params: json.RawMessage(`{"query":"AGENT"}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	var found NotesResult
	if err := json.Unmarshal(res.Data, &found); err != nil || len(found.Notes) != 1 || found.Notes[0].Title != "from the agent" {
		t.Fatalf("search data %s: %v", res.Data, err)
	}

	// The handler's own error reaches the agent with its code and data.
	_, err = cl.InvokeCapability(ctx, &api.InvokeCapabilityParams{
		CapabilityID: AppID + ".read", AppID: AppID, Params: json.RawMessage(`{"id":41}`),
	})
	var pe *api.Error
	if !errors.As(err, &pe) || pe.Code != api.CodeInvalidParams || pe.Message != "no note 41" || pe.DataMap()["field"] != "params.id" {
		t.Errorf("read 41: %v, want INVALID_PARAMS no note 41 on params.id", err)
	}
	// Before asking the user to confirm a delete, the daemon has the app
	// check the parameters (ValidateParams): a note id the app refuses
	// is refused at once, with no confirmation.
	_, err = cl.InvokeCapability(ctx, &api.InvokeCapabilityParams{
		CapabilityID: AppID + ".delete", AppID: AppID, Params: json.RawMessage(`{"id":0}`),
	})
	if !errors.As(err, &pe) || pe.Code != api.CodeInvalidParams || pe.Message != "no note 0: ids start at 1" {
		t.Errorf("delete 0: %v, want the app's INVALID_PARAMS no note 0: ids start at 1", err)
	}
	// The app's dynamic state (QueryState), narrowed to one key.
	state, err := cl.AppState(ctx, &api.AppsStateParams{AppID: AppID, Keys: []string{"notes"}})
	if err != nil || string(state.State) != `{"notes":1}` {
		t.Errorf("apps.state notes: %+v, %v; want {\"notes\":1}", state, err)
	}
	// delete needs the user's confirmation; the daemon says so and the
	// note stays.
	_, err = cl.InvokeCapability(ctx, &api.InvokeCapabilityParams{
		CapabilityID: AppID + ".delete", AppID: AppID, Params: json.RawMessage(`{"id":1}`),
	})
	if !errors.Is(err, api.ErrConfirmationRequired) {
		t.Errorf("delete: %v, want CONFIRMATION_REQUIRED", err)
	}

	cancel()
	for name, done := range map[string]chan error{"notes": appDone, "daemon": daemonDone} {
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s returned %v after cancel, want nil", name, err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not stop within 10s of cancel", name)
		}
	}

	st, err := OpenStore(t.Context(), filepath.Join(dir, "notes.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.Get(t.Context(), 1); err != nil {
		t.Errorf("note 1 after a refused delete: %v", err)
	}
}

func TestRunRefusedManifest(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "m.json")
	if err := os.WriteFile(bad, []byte(`{"app_id":"org.other.app","capabilities":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(t.Context(), config{socket: filepath.Join(dir, "none.sock"), manifest: bad, db: filepath.Join(dir, "n.db")})
	if err == nil {
		t.Fatal("run with another app's manifest succeeded")
	}
	if err := run(t.Context(), config{manifest: filepath.Join(dir, "missing.json"), db: filepath.Join(dir, "n.db")}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("run with a missing manifest: %v, want ErrNotExist", err)
	}
}
