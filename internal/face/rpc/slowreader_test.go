package rpc

import (
	"bufio"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
)

// A client that sends thousands of requests and reads none of the
// answers fills its socket both ways: the daemon's writes to it block
// (its lone first request was being served on the reading goroutine),
// its connection stops reading at the in-flight bound. Another client
// is served all the while; once the flooder reads, it gets every answer.
func TestSlowReaderDoesNotHoldUpOtherClients(t *testing.T) {
	e := newAbuseEnv(t, nil, core.RateLimits{})
	slow, fast := e.dial(false), e.dial(false)
	const n = 5000 // ~0.5 MB of answers: more than the socket's buffers
	sent := make(chan int, 1)
	go func() {
		w := bufio.NewWriter(slow)
		for i := 1; i <= n; i++ {
			fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%d,"method":%q}`+"\n", i, api.MethodHealthCheck)
			if i == 1 || i == 2000 {
				w.Flush()
				if i == 2000 {
					sent <- i
				}
			}
		}
		w.Flush()
	}()
	<-sent // well past what the daemon answers before its writes block
	for i := range 20 {
		fast.SetDeadline(time.Now().Add(10 * time.Second))
		if res, perr := fast.call(t, i+1, api.MethodHealthCheck, nil); perr != nil || len(res) == 0 {
			t.Fatalf("the other client's call %d: %s, %v", i, res, perr)
		}
	}
	seen := make(map[int]bool, n)
	for len(seen) < n {
		slow.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := slow.recv()
		if err != nil {
			t.Fatalf("the flooder, after %d answers: %v", len(seen), err)
		}
		var r struct {
			ID    int             `json:"id"`
			Error json.RawMessage `json:"error"`
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Error != nil {
			t.Fatalf("the flooder's answer %s: %v", line, err)
		}
		seen[r.ID] = true
	}
}
