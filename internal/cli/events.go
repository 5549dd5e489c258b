package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/spf13/cobra"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
)

// followQueue is how many notifications pcpctl buffers while its output
// is blocked; beyond it they are dropped and counted.
const followQueue = 4096

type eventsOptions struct {
	follow    bool
	types     []string
	appID     string
	surfaceID string
	limit     int
}

func (e *env) eventsCommand() *cobra.Command {
	var o eventsOptions
	cmd := &cobra.Command{
		Use:   "events [--follow] [--type T ...] [--app ID] [--surface ID] [--limit N]",
		Short: "Show the event journal, or follow events as they happen",
		Long: `Without --follow, show the newest events of the journal (events.history);
--type, --app and --surface then filter the --limit newest events.

With --follow, subscribe (subscribe.events) and print each event as it
arrives, one line each: SEQ TIME TYPE key=value... (with --json, one JSON
object per line: {"method": TYPE, "params": {...}}). Following stops on
Ctrl-C, which is success, or with an error when pcpd ends the subscription
or closes the connection.`,
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.BoolVarP(&o.follow, "follow", "f", false, "subscribe and print events as they arrive")
	f.StringSliceVar(&o.types, "type", nil, "event types, repeated or comma-separated (default all)")
	f.StringVar(&o.appID, "app", "", "only events of this app")
	f.StringVar(&o.surfaceID, "surface", "", "only events of this surface")
	f.IntVarP(&o.limit, "limit", "n", 0, "history: how many of the newest events to read (default 100); --follow: stop after this many events (default no limit)")
	cmd.RunE = e.run(func(ctx context.Context, _ *cobra.Command, _ []string) error {
		if o.limit < 0 {
			return usagef("--limit must not be negative")
		}
		if o.follow {
			return e.followEvents(ctx, &o)
		}
		return e.eventHistory(ctx, &o)
	})
	return cmd
}

func (e *env) eventHistory(ctx context.Context, o *eventsOptions) error {
	res, err := once(ctx, e, false, api.MethodEventsHistory, func(ctx context.Context, cl *client.Client) (*api.EventsHistoryResult, error) {
		return cl.EventHistory(ctx, o.limit)
	})
	if err != nil {
		return err
	}
	evs := slices.DeleteFunc(res.Events, func(ev api.Event) bool {
		return (len(o.types) > 0 && !slices.Contains(o.types, ev.Type) && !slices.Contains(o.types, api.EventAll)) ||
			(o.appID != "" && ev.AppID != o.appID) ||
			(o.surfaceID != "" && ev.SurfaceID != o.surfaceID)
	})
	if e.json {
		return printJSON(e.stdout, &api.EventsHistoryResult{Events: evs})
	}
	if len(evs) == 0 {
		_, err := fmt.Fprintln(e.stdout, "no events")
		return err
	}
	for _, ev := range evs {
		members := map[string]json.RawMessage{}
		if len(ev.Data) > 0 {
			json.Unmarshal(ev.Data, &members) // not an object: shown without data
		}
		if _, ok := members["app_id"]; !ok && ev.AppID != "" {
			members["app_id"], _ = json.Marshal(ev.AppID)
		}
		if _, ok := members["surface_id"]; !ok && ev.SurfaceID != "" {
			members["surface_id"], _ = json.Marshal(ev.SurfaceID)
		}
		if _, err := fmt.Fprintln(e.stdout, eventLine(ev.Sequence, ev.Timestamp, ev.Type, members)); err != nil {
			return err
		}
	}
	return nil
}

// eventLine is the one-line form of an event: SEQ TIME TYPE key=value...
func eventLine(seq, ts int64, typ string, members map[string]json.RawMessage) string {
	line := strconv.FormatInt(seq, 10) + " " + unixTime(ts) + " " + clean(typ)
	if kv := kvPairs(members); kv != "" {
		line += " " + kv
	}
	return line
}

// followEvents subscribes and prints notifications until ctx is
// cancelled, the limit is reached, or the daemon ends the subscription or
// the connection.
func (e *env) followEvents(ctx context.Context, o *eventsOptions) error {
	types := o.types
	if len(types) == 0 {
		types = []string{api.EventAll}
	}
	queue := make(chan client.Notification, followQueue)
	var dropped atomic.Int64
	cl, err := e.connect(ctx, false, client.Options{OnNotify: func(n client.Notification) {
		select {
		case queue <- n:
		default:
			dropped.Add(1)
		}
	}})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer cl.Close()
	sub, err := call(ctx, e, api.MethodSubscribeEvents, func(ctx context.Context) (*api.SubscribeEventsResult, error) {
		return cl.Subscribe(ctx, &api.SubscribeEventsParams{EventTypes: types, AppID: o.appID, SurfaceID: o.surfaceID})
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if !e.json {
		fmt.Fprintf(e.stderr, "following events (subscription %s); Ctrl-C to stop\n", clean(sub.SubscriptionID))
	}

	count := 0
	handle := func(n client.Notification) (done bool, err error) {
		if k := dropped.Swap(0); k > 0 {
			// With --json, stdout stays one JSON object per line.
			w, prefix := e.stdout, "--"
			if e.json {
				w, prefix = e.stderr, "pcpctl: warning:"
			}
			if _, err := fmt.Fprintf(w, "%s %d events dropped by pcpctl: output too slow\n", prefix, k); err != nil {
				return true, err
			}
		}
		if err := e.printNotification(e.stdout, n); err != nil {
			return true, err
		}
		switch n.Method {
		case api.NotifySubscriptionEnded:
			var se api.SubscriptionEnded
			json.Unmarshal(n.Params, &se)
			return true, fmt.Errorf("pcpd ended subscription %s: %s", clean(se.SubscriptionID), clean(orDash(se.Reason)))
		case api.NotifyEventsLost:
			return false, nil
		}
		count++
		return o.limit > 0 && count >= o.limit, nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case n := <-queue:
			if done, err := handle(n); done {
				return err
			}
		case <-cl.Done():
			// Print what arrived before the connection closed.
			for {
				select {
				case n := <-queue:
					if done, err := handle(n); done {
						return err
					}
				default:
					if ctx.Err() != nil {
						return nil
					}
					return errors.New("pcpd closed the connection")
				}
			}
		}
	}
}

// printNotification prints one notification of a subscription.
func (e *env) printNotification(w io.Writer, n client.Notification) error {
	if e.json {
		line, err := json.Marshal(struct {
			Method string          `json:"method"`
			Params json.RawMessage `json:"params,omitempty"`
		}{n.Method, n.Params})
		if err != nil {
			return fmt.Errorf("encoding %s notification: %w", n.Method, err)
		}
		_, err = fmt.Fprintf(w, "%s\n", line)
		return err
	}
	var err error
	switch n.Method {
	case api.NotifyEventsLost:
		var el api.EventsLost
		json.Unmarshal(n.Params, &el)
		_, err = fmt.Fprintf(w, "-- %s %d events lost: pcpd's queue for this subscriber overflowed\n", unixTime(el.Timestamp), el.Lost)
	case api.NotifySubscriptionEnded:
		var se api.SubscriptionEnded
		json.Unmarshal(n.Params, &se)
		_, err = fmt.Fprintf(w, "-- %s subscription %s ended: %s\n", unixTime(se.Timestamp), clean(se.SubscriptionID), clean(orDash(se.Reason)))
	default:
		var members map[string]json.RawMessage
		json.Unmarshal(n.Params, &members) // not an object: shown without data
		var seq, ts int64
		json.Unmarshal(members["sequence"], &seq)
		json.Unmarshal(members["timestamp"], &ts)
		delete(members, "sequence")
		delete(members, "timestamp")
		delete(members, "subscription_id")
		_, err = fmt.Fprintln(w, eventLine(seq, ts, n.Method, members))
	}
	return err
}
