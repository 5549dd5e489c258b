package scomp

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/core"
	"github.com/pcp-dev/pcp/internal/store"
	"github.com/pcp-dev/pcp/internal/testkit"
)

// pictures is an in-process service whose capabilities return
// attachments, as a platform's capture does: "shot" a 3×2 PNG, "pair" a
// 2000-byte blob and then a 10-byte one, "empty" an empty one, "many"
// more than api.MaxAttachments, "big" 3 MB.
type pictures struct{ png []byte }

const picturesApp = "pcp.test.pics"

func (pictures) AppID() string { return picturesApp }

func (pictures) Manifest() *api.Manifest {
	var decls []api.CapabilityDecl
	for _, n := range []string{"big", "empty", "many", "pair", "shot"} {
		decls = append(decls, api.CapabilityDecl{Name: n, Tier: 1, TrustLevel: api.TrustAuto, Description: "Returns attachments."})
	}
	return &api.Manifest{Version: "1.0", Publisher: "pcpd", Description: "Pictures.", Capabilities: decls}
}

func (p pictures) Invoke(_ context.Context, c *api.Capability, _ api.InvocationSource, _ json.RawMessage) (*api.CapabilityResult, error) {
	res := &api.CapabilityResult{Status: api.StatusSuccess, Data: json.RawMessage(`{"width":3,"height":2}`)}
	switch strings.TrimPrefix(c.ID, picturesApp+".") {
	case "shot":
		res.Attachments = []api.Attachment{{Name: "image", MediaType: "image/png", Data: p.png}}
	case "pair":
		res.Attachments = []api.Attachment{{Name: "raw", MediaType: "application/octet-stream", Data: bytes.Repeat([]byte{7}, 2000)},
			{Name: "note", MediaType: "text/plain", Data: []byte("0123456789")}}
	case "empty":
		res.Attachments = []api.Attachment{{Name: "nothing", MediaType: "application/octet-stream"}}
	case "many":
		for i := range api.MaxAttachments + 1 {
			res.Attachments = append(res.Attachments, api.Attachment{Name: fmt.Sprint("a", i), MediaType: "text/plain", Data: []byte("x")})
		}
	case "big":
		res.Attachments = []api.Attachment{{Name: "raw", MediaType: "application/octet-stream", Data: bytes.Repeat([]byte{1}, 3_000_000)}}
	}
	return res, nil
}

func testPNG(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 3, 2))
	img.Set(1, 1, color.RGBA{R: 200, G: 10, B: 30, A: 255})
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// picturesSession serves the face with opts over a broker holding
// pictures and returns a function running one eval.
func picturesSession(t *testing.T, opts Options) (eval func(code string) string, shot []byte) {
	t.Helper()
	st, err := store.OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := core.New(context.Background(), core.Config{Apps: st, Audit: st, Journal: st, Jobs: st, TrustDir: t.TempDir(),
		LivenessInterval: -1, RateLimits: &core.RateLimits{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	shot = testPNG(t)
	if err := b.AddService(pictures{shot}); err != nil {
		t.Fatal(err)
	}
	path, stop := unixServer(t, New(b, opts))
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return evalOn(t, ctx, path), shot
}

// TestEvalReceivesAttachments: a binding call's result carries the
// capability's attachments, their bytes in base64, so the code can hand
// the image back; and it can tell them apart by name and media type.
func TestEvalReceivesAttachments(t *testing.T) {
	testkit.CheckGoroutines(t)
	eval, shot := picturesSession(t, Options{})
	got := eval(`const r = await pcp_test_pics_shot({}); r`)
	want := fmt.Sprintf(`{"value":{"status":"success","data":{"width":3,"height":2},"attachments":[{"name":"image","media_type":"image/png","size":%d,"data":%q}]}}`,
		len(shot), base64.StdEncoding.EncodeToString(shot))
	if got != want {
		t.Fatalf("the result:\n%s\nwant\n%s", got, want)
	}
	// The PNG handed back decodes to the image.
	var v struct{ Value string }
	if err := json.Unmarshal([]byte(eval(`(await pcp_test_pics_shot({})).attachments.find(a => a.media_type === "image/png").data`)), &v); err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(v.Value)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if r, g, b, _ := img.At(1, 1).RGBA(); img.Bounds().Dx() != 3 || img.Bounds().Dy() != 2 || r>>8 != 200 || g>>8 != 10 || b>>8 != 30 {
		t.Fatalf("the image handed back: %v, pixel (1,1) %v", img.Bounds(), img.At(1, 1))
	}
	if got, want := eval(`(await pcp_test_pics_empty({})).attachments`), `{"value":[{"name":"nothing","media_type":"application/octet-stream","size":0,"data":""}]}`; got != want {
		t.Errorf("an empty attachment: %s, want %s", got, want)
	}
	if got, want := eval(`try { await pcp_test_pics_many({}); "ran" } catch (e) { [e.name, e.pcp.name, e.pcp.data] }`),
		fmt.Sprintf(`{"value":["BindingError","INTERNAL_ERROR",{"count":%d,"limit":%d}]}`, api.MaxAttachments+1, api.MaxAttachments); got != want {
		t.Errorf("too many attachments: %s, want %s", got, want)
	}
}

// TestEvalAttachmentLimit: past the per-result limit an attachment is
// listed without its data, truncated and with the reason; those after it
// that fit keep theirs. The limit is a sixteenth of the heap, lowered by
// Options.AttachmentLimit.
func TestEvalAttachmentLimit(t *testing.T) {
	testkit.CheckGoroutines(t)
	eval, _ := picturesSession(t, Options{AttachmentLimit: 1000})
	got := eval(`(await pcp_test_pics_pair({})).attachments`)
	want := `{"value":[{"name":"raw","media_type":"application/octet-stream","size":2000,"truncated":true,"reason":"2000 bytes: an eval receives at most 1000 bytes of one result's attachments"},` +
		`{"name":"note","media_type":"text/plain","size":10,"data":"MDEyMzQ1Njc4OQ=="}]}`
	if got != want {
		t.Fatalf("over the limit:\n%s\nwant\n%s", got, want)
	}

	eval, _ = picturesSession(t, Options{MemoryLimit: 16 << 20})
	got = eval(`const a = (await pcp_test_pics_big({})).attachments[0]; [a.size, a.truncated, a.reason, "data" in a]`)
	want = `{"value":[3000000,true,"3000000 bytes: an eval receives at most 1048576 bytes of one result's attachments",false]}`
	if got != want {
		t.Fatalf("over a sixteenth of a 16 MiB heap:\n%s\nwant\n%s", got, want)
	}
	eval, _ = picturesSession(t, Options{})
	if got, want := eval(`(await pcp_test_pics_big({})).attachments[0].data.length`), `{"value":4000000}`; got != want {
		t.Fatalf("3 MB under the default limit: %s, want %s", got, want)
	}
}
