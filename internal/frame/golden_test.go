package frame

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/pcp-dev/pcp/internal/golden"

	"golang.org/x/tools/txtar"
)

const goldenFile = "testdata/frames.txtar"

// goldenFrames names the frames of testdata/frames.txtar, in file order.
var goldenFrames = []struct {
	name string
	f    Frame
}{
	{"ping", Frame{Ping, nil}},
	{"execute_request", Frame{ExecuteRequest, []byte(`{"capability":"mail.compose","params":{"to":"ann@example.org"},"admin":false}`)}},
	{"error_response", Frame{ErrorResponse, []byte(`{"code":400,"message":"unsupported message type"}`)}},
	{"pong", Frame{Pong, []byte(`{"capability_count":3,"app_count":1,"subscription_count":0,"journal_length":12,"uptime_secs":60}`)}},
	{"app_shutdown_cbor", Frame{AppShutdown, []byte{0xa0}}}, // CBOR empty map
}

const goldenComment = `Golden frames: each section is the exact bytes of one frame, in hex, 16
bytes a line. golden_test.go says which Frame each section encodes; run
go test ./internal/frame -update to rewrite them after an intended change.
`

// hexDump formats b as space-separated hex bytes, 16 a line.
func hexDump(b []byte) string {
	var sb strings.Builder
	for i, c := range b {
		switch {
		case i == 0:
		case i%16 == 0:
			sb.WriteByte('\n')
		default:
			sb.WriteByte(' ')
		}
		sb.WriteString(hex.EncodeToString([]byte{c}))
	}
	sb.WriteByte('\n')
	return sb.String()
}

func parseHex(t *testing.T, s string) []byte {
	t.Helper()
	var b []byte
	for _, f := range strings.Fields(s) {
		c, err := hex.DecodeString(f)
		if err != nil || len(c) != 1 {
			t.Fatalf("bad hex byte %q", f)
		}
		b = append(b, c[0])
	}
	return b
}

func TestGoldenFrames(t *testing.T) {
	if *golden.Update {
		ar := &txtar.Archive{Comment: []byte(goldenComment)}
		for _, g := range goldenFrames {
			ar.Files = append(ar.Files, txtar.File{Name: g.name, Data: []byte(hexDump(Append(nil, g.f)))})
		}
		golden.Write(t, goldenFile, ar)
	}
	ar := golden.Load(t, goldenFile)
	if got, want := len(ar.Files), len(goldenFrames); got != want {
		t.Fatalf("%s has %d sections, want %d", goldenFile, got, want)
	}
	for i, g := range goldenFrames {
		t.Run(g.name, func(t *testing.T) {
			sec := ar.Files[i]
			if sec.Name != g.name {
				t.Fatalf("section %d is %q, want %q", i, sec.Name, g.name)
			}
			want := parseHex(t, string(sec.Data))
			if got := Append(nil, g.f); !bytes.Equal(got, want) {
				t.Errorf("Append(%s) =\n%swant\n%s", g.f.Type, hexDump(got), hexDump(want))
			}
			var buf bytes.Buffer
			if err := Write(&buf, g.f); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), want) {
				t.Errorf("Write(%s) =\n%swant\n%s", g.f.Type, hexDump(buf.Bytes()), hexDump(want))
			}
			r := NewReader(bytes.NewReader(want), 0)
			got, err := r.Next()
			if err != nil {
				t.Fatalf("Next() error = %v", err)
			}
			if got.Type != g.f.Type || !bytes.Equal(got.Payload, g.f.Payload) {
				t.Errorf("Next() = %s %q, want %s %q", got.Type, got.Payload, g.f.Type, g.f.Payload)
			}
		})
	}
}
