package stream

import (
	"encoding/json"
	"errors"
	"io"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/frame"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// FuzzServeConn feeds arbitrary bytes to the framed face. It must never
// panic, and everything it sends back must be a well-formed frame of a
// daemon-to-client type with a JSON payload.
func FuzzServeConn(f *testing.F) {
	for _, seed := range []frame.Frame{
		{Type: frame.Ping},
		{Type: frame.RegistryQuery, Payload: []byte(`{"kind":"Apps"}`)},
		{Type: frame.ExecuteRequest, Payload: []byte(`{"capability":"pcp.inspection.ping","params":{"payload":1},"admin":false}`)},
		{Type: frame.SubscribeEvents, Payload: []byte(`{"filter":{}}`)},
		{Type: frame.DetectRequest, Payload: []byte(`{"app_id":"a.b"}`)},
		{Type: frame.AppShutdown},
	} {
		f.Add(frame.Append(nil, seed))
	}
	f.Add([]byte{0x2a, 0xff, 0xff, 0xff, 0xff})
	e := newEnv(&testing.T{})
	f.Fuzz(func(t *testing.T, input []byte) {
		client, server := testkit.SocketPair(t)
		done := make(chan struct{})
		go func() {
			e.stream.ServeConn(server, core.SessionInfo{Role: core.RoleAgent, Transport: "unix"})
			close(done)
		}()
		go func() {
			client.Write(input)
			client.CloseWrite()
		}()
		client.SetDeadline(time.Now().Add(10 * time.Second))
		r := frame.NewReader(client, 1<<20)
		for {
			fr, err := r.Next()
			if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
				break // the daemon hung up on a stream it could not follow
			}
			if err != nil {
				t.Fatalf("daemon sent a bad frame: %v", err)
			}
			info, _ := fr.Type.Info()
			if info.Direction != frame.DaemonToClient && info.Direction != frame.Either && fr.Type != frame.SubscribeEvents && fr.Type != frame.UnsubscribeEvents {
				t.Fatalf("daemon sent a %s frame", fr.Type)
			}
			if !json.Valid(fr.Payload) {
				t.Fatalf("%s payload is not JSON: %q", fr.Type, fr.Payload)
			}
		}
		client.Close()
		<-done
	})
}
