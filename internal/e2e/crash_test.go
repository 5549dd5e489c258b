package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/client"
	"github.com/pcp-dev/pcp/internal/audit"
)

// crashLoopsEnv sets how many times TestAuditCrashLoop kills pcpd. The
// default keeps the test short for CI; docs/audit.md records the result
// of a 200-loop run.
const crashLoopsEnv = "PCP_CRASH_LOOPS"

func crashLoops(t *testing.T) int {
	s := os.Getenv(crashLoopsEnv)
	if s == "" {
		return 8
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of loops", crashLoopsEnv, s)
	}
	return n
}

// TestAuditCrashLoop kills pcpd with SIGKILL at random points while eight
// clients invoke, again and again. After each restart the audit log
// verifies, every invocation whose reply a client received has its entry,
// and the index (audit.tail) holds every entry of the log.
func TestAuditCrashLoop(t *testing.T) {
	t.Parallel()
	loops := crashLoops(t)
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 15))
	t.Logf("%d loops, seed %d", loops, seed)
	w := newWorld(t)
	w.startPCPD()
	w.startNotes()

	const clients = 8
	var entries int64 // log entries after the previous restart
	var acked, torn int
	for loop := range loops {
		// The kill lands after a random number of replies, 1 to 80.
		killAfter := 1 + rng.IntN(80)
		var (
			mu        sync.Mutex
			succeeded []string // params digests of the replies received
			wg        sync.WaitGroup
		)
		enough := make(chan struct{})
		var once sync.Once
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		for i := range clients {
			wg.Go(func() {
				cl, err := client.Dial(ctx, w.socket, client.Options{})
				if err != nil {
					t.Errorf("loop %d: client %d: %v", loop, i, err)
					once.Do(func() { close(enough) })
					return
				}
				defer cl.Close()
				for j := 0; ; j++ {
					params, _ := json.Marshal(map[string]string{"title": fmt.Sprintf("crash %d-%d-%d", loop, i, j), "body": "x"})
					res, err := cl.InvokeCapability(ctx, &api.InvokeCapabilityParams{
						CapabilityID: notesApp + ".create", AppID: notesApp, Source: api.SourceSystemIntelligence, Params: params})
					var apiErr *api.Error
					if errors.As(err, &apiErr) {
						continue // refused (a rate limit, say); pcpd is up
					}
					if err != nil {
						return // pcpd was killed
					}
					if res.Status != api.StatusSuccess {
						continue
					}
					mu.Lock()
					succeeded = append(succeeded, audit.ParamsDigest(params))
					if len(succeeded) >= killAfter {
						once.Do(func() { close(enough) })
					}
					mu.Unlock()
				}
			})
		}
		select {
		case <-enough:
		case <-ctx.Done():
			t.Fatalf("loop %d: fewer than %d invocations succeeded in a minute", loop, killAfter)
		}
		w.stop(w.pcpd, syscall.SIGKILL)
		wg.Wait()
		cancel()
		if t.Failed() {
			return
		}

		w.startPCPD()
		v := w.auditVerify()
		cl, err := client.Dial(context.Background(), w.control, client.Options{})
		if err != nil {
			t.Fatal(err)
		}
		// Entries may be appended after the verify (the app registering
		// again, say): the tail is read with room for them.
		tail, err := cl.AuditTail(context.Background(), int(v.Entries-entries)+50)
		cl.Close()
		if err != nil {
			t.Fatal(err)
		}
		var indexed int64
		for _, e := range tail.Entries {
			if e.Seq > entries && e.Seq <= v.Entries {
				indexed++
			}
		}
		if indexed != v.Entries-entries {
			t.Fatalf("loop %d: audit.tail holds %d of the entries %d to %d the log holds: the index did not catch up",
				loop, indexed, entries+1, v.Entries)
		}
		have := map[string]bool{}
		for _, e := range tail.Entries {
			if e.Kind == "invoke" && e.Outcome == api.StatusSuccess {
				have[e.ParamsDigest] = true
			}
		}
		for _, d := range succeeded {
			if !have[d] {
				t.Fatalf("loop %d: an invocation whose reply was received (params %s) has no audit entry", loop, d)
			}
		}
		if containsTorn(w.pcpd.out.String()) {
			torn++
		}
		acked += len(succeeded)
		entries = v.Entries
		w.waitNotesAvailable(15 * time.Second)
	}
	t.Logf("%d loops: %d acknowledged invocations, all audited; %d entries in the log; %d restarts cut a torn record", loops, acked, entries, torn)
}

// containsTorn reports whether pcpd's output says it cut off a torn
// record at start.
func containsTorn(out string) bool { return strings.Contains(out, "did not finish writing") }
