package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"
	"log/slog"
	"os"
	"os/signal"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/sdk"
)

// An app serving one capability until interrupted or shut down by pcpd.
func Example() {
	signed, err := os.ReadFile("manifest.signed.json")
	if err != nil {
		log.Fatal(err)
	}
	var todos []string
	app := &sdk.App{
		AppID:          "org.example.todo",
		SignedManifest: signed,
		Capabilities: map[string]sdk.CapabilityFunc{
			"add": func(ctx context.Context, params json.RawMessage) (any, error) {
				var p struct {
					Text string `json:"text"`
				}
				if err := json.Unmarshal(params, &p); err != nil || p.Text == "" {
					return nil, api.MissingParam("params.text")
				}
				todos = append(todos, p.Text) // a real app guards this with a mutex
				return map[string]int{"count": len(todos)}, nil
			},
		},
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	err = app.Serve(ctx, &sdk.Options{Logger: slog.Default()})
	switch {
	case errors.Is(err, sdk.ErrShutdown):
		log.Print(err) // revoked, or the manifest was refused
	case err != nil:
		log.Fatal(err) // e.g. ErrPermanent: the manifest is invalid or untrusted
	}
}
