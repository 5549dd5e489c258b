package client

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/face/rpc"
	"github.com/pcp-dev/pcp/internal/services/inspection"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// broker serves the JSON-RPC face of a real broker (an in-memory store,
// the inspection service) and returns a function that dials it: a Unix
// socket pair per client, the daemon's end served until the test ends.
func broker(t *testing.T) (dial func(opts Options) *Client, hangUp func()) {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b, err := core.New(context.Background(), core.Config{
		Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(), LivenessInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.AddService(inspection.New(b)); err != nil {
		t.Fatal(err)
	}
	srv := rpc.NewServer(b, rpc.Options{})
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		sides []*net.UnixConn
	)
	hangUp = func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range sides {
			c.Close()
		}
	}
	t.Cleanup(func() {
		hangUp()
		wg.Wait()
		b.Close()
		st.Close()
	})
	dial = func(opts Options) *Client {
		ours, theirs := testkit.SocketPair(t)
		mu.Lock()
		sides = append(sides, theirs)
		mu.Unlock()
		wg.Go(func() {
			srv.ServeConn(theirs, core.SessionInfo{Role: core.RoleAgent, Transport: "unix", UID: 1000, PID: 4242})
		})
		cl := New(ours, opts)
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	return dial, hangUp
}

func ping(t *testing.T, cl *Client) {
	t.Helper()
	res, err := cl.InvokeCapability(context.Background(), &api.InvokeCapabilityParams{
		CapabilityID: "pcp.inspection.ping", AppID: "pcp.inspection", Params: json.RawMessage(`{}`),
	})
	if err != nil || res.Status != api.StatusSuccess {
		t.Fatalf("ping: %+v, %v", res, err)
	}
}

// A plain client reads each answer on the calling goroutine; once it
// subscribes, events are read into its queue with no call of its own
// waiting, before it ever asks for Notifications (the queue is read
// here without asking).
func TestClientReadsOnDemandUntilItSubscribes(t *testing.T) {
	testkit.CheckGoroutines(t)
	dial, _ := broker(t)
	watcher, invoker := dial(Options{}), dial(Options{})
	for range 3 {
		ping(t, watcher)
	}
	if _, err := watcher.Subscribe(context.Background(), &api.SubscribeEventsParams{EventTypes: []string{api.EventCapabilityInvoked}}); err != nil {
		t.Fatal(err)
	}
	ping(t, invoker)
	select {
	case n := <-watcher.notifs:
		if n.Method != api.EventCapabilityInvoked {
			t.Errorf("notification %s, want %s", n.Method, api.EventCapabilityInvoked)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the subscriber got no event")
	}
}

// Done is closed when the daemon hangs up on a plain client that has
// made calls and is making none.
func TestClientDoneWhenTheDaemonHangsUp(t *testing.T) {
	testkit.CheckGoroutines(t)
	dial, hangUp := broker(t)
	cl := dial(Options{})
	ping(t, cl)
	done := cl.Done()
	hangUp()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Done was not closed after the daemon hung up")
	}
}

// Calls from many goroutines on one plain client all get their answers.
func TestClientConcurrentCallsOnDemand(t *testing.T) {
	testkit.CheckGoroutines(t)
	dial, _ := broker(t)
	cl := dial(Options{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 20 {
				if _, err := cl.Health(context.Background()); err != nil {
					t.Errorf("health: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}
