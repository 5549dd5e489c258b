package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/canonjson"
)

var t0 = time.Date(2025, 3, 14, 15, 9, 26, 535897000, time.FixedZone("CET", 3600))

func TestCanonicalEntryMatchesWire(t *testing.T) {
	tags := func(typ reflect.Type) map[string]string {
		m := map[string]string{}
		for i := range typ.NumField() {
			f := typ.Field(i)
			m[f.Name] = f.Tag.Get("json")
		}
		return m
	}
	want := tags(reflect.TypeFor[api.AuditEntry]())
	delete(want, "Hash")
	delete(want, "PrevHash")
	got := tags(reflect.TypeFor[canonicalEntry]())
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("canonicalEntry fields differ from api.AuditEntry minus hashes (-want +got):\n%s", d)
	}
}

// TestSealGolden recomputes the chain from hand-written canonical text, so
// the documented formula and the code cannot drift apart together.
func TestSealGolden(t *testing.T) {
	r := Record{
		Time:         t0,
		Kind:         "invoke",
		Source:       "SystemIntelligence",
		AppID:        "org.example.mail",
		CapabilityID: "org.example.mail.compose",
		ParamsDigest: ParamsDigest(json.RawMessage(`{"to":"a@b"}`)),
		Outcome:      "success",
		Duration:     1500 * time.Microsecond,
		Detail:       json.RawMessage(` { "z": 1.0, "a": "<&>" } `),
	}
	e1, h1, err := Seal(nil, 1, r)
	if err != nil {
		t.Fatal(err)
	}
	c1 := `{"app_id":"org.example.mail","capability_id":"org.example.mail.compose","detail":{"a":"<&>","z":1},` +
		`"duration_us":1500,"kind":"invoke","outcome":"success","params_digest":"` + r.ParamsDigest + `",` +
		`"seq":1,"source":"SystemIntelligence","time":"2025-03-14T14:09:26.535897000Z"}`
	want1 := sha256.Sum256(append(make([]byte, 32), c1...))
	if got, want := e1.Hash, hex.EncodeToString(want1[:]); got != want {
		t.Errorf("entry 1 hash = %s, want %s", got, want)
	}
	if got, want := hex.EncodeToString(h1), e1.Hash; got != want {
		t.Errorf("returned hash = %s, want the entry's %s", got, want)
	}
	if got, want := e1.PrevHash, strings.Repeat("0", 64); got != want {
		t.Errorf("entry 1 prev_hash = %s, want %s", got, want)
	}
	if got, want := string(e1.Detail), `{"a":"<&>","z":1}`; got != want {
		t.Errorf("detail = %s, want canonical %s", got, want)
	}

	// Empty optional fields are left out, as on the wire.
	e2, _, err := Seal(h1, 2, Record{Time: t0, Kind: "revoke"})
	if err != nil {
		t.Fatal(err)
	}
	c2 := `{"duration_us":0,"kind":"revoke","outcome":"","seq":2,"time":"2025-03-14T14:09:26.535897000Z"}`
	want2 := sha256.Sum256(append(append([]byte{}, h1...), c2...))
	if got, want := e2.Hash, hex.EncodeToString(want2[:]); got != want {
		t.Errorf("entry 2 hash = %s, want %s", got, want)
	}
	if got, want := e2.PrevHash, e1.Hash; got != want {
		t.Errorf("entry 2 prev_hash = %s, want %s", got, want)
	}

	// The wire form, minus the hashes, is what is hashed.
	wire, err := json.Marshal(e2)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(wire, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "hash")
	delete(m, "prev_hash")
	fromWire, _ := json.Marshal(m) // encoding/json sorts map keys; ASCII keys sort as JCS does
	if got, want := string(fromWire), c2; got != want {
		t.Errorf("wire form minus hashes = %s, want %s", got, want)
	}
}

func TestSealErrors(t *testing.T) {
	ok := Record{Time: t0, Kind: "invoke"}
	tests := []struct {
		name string
		prev []byte
		seq  int64
		mod  func(*Record)
		want string
	}{
		{"seq zero", nil, 0, nil, "seq 0"},
		{"no kind", nil, 1, func(r *Record) { r.Kind = "" }, "no kind"},
		{"no time", nil, 1, func(r *Record) { r.Time = time.Time{} }, "no time"},
		{"detail array", nil, 1, func(r *Record) { r.Detail = json.RawMessage(`[1]`) }, "not a JSON object"},
		{"detail malformed", nil, 1, func(r *Record) { r.Detail = json.RawMessage(`{"a":`) }, "detail"},
		{"detail duplicate", nil, 1, func(r *Record) { r.Detail = json.RawMessage(`{"a":1,"a":2}`) }, "detail"},
		{"short prev", []byte{1, 2, 3}, 2, nil, "previous hash is 3 bytes"},
		{"seq too large", nil, MaxSeq + 1, nil, "out of range"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok
			if tt.mod != nil {
				tt.mod(&r)
			}
			_, _, err := Seal(tt.prev, tt.seq, r)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Seal error = %v, want one containing %q", err, tt.want)
			}
		})
	}
}

// TestPreparedMatchesCanonical checks the shortcut Prepare takes against
// the plain definition, which the Verifier uses, on records built to
// confuse it.
func TestPreparedMatchesCanonical(t *testing.T) {
	records := []Record{
		{Time: t0, Kind: "k"},
		{Time: t0, Kind: "k", Detail: json.RawMessage(`{"seq":0}`)},
		{Time: t0, Kind: "k", Detail: json.RawMessage(`{"seq":0,"z":{"seq":0}}`)},
		{Time: t0, Kind: "k", Source: `"seq":0`, Outcome: `x","seq":0,"`, Actor: "\u0000\"seq\":0"},
		{Time: t0, Kind: `"seq":0`, AppID: "é\u2028", Duration: -time.Second},
		{Time: time.Unix(0, 0), Kind: "k", Detail: json.RawMessage(`{"a":[1e400]}`)},
	}
	for i, r := range records {
		p, err := Prepare(r)
		if err != nil {
			if i == len(records)-1 {
				continue // 1e400 has no canonical form
			}
			t.Fatalf("record %d: %v", i, err)
		}
		var prev []byte
		for _, seq := range []int64{1, 9, 10, 12345, MaxSeq} {
			e, h, err := p.Seal(prev, seq)
			if err != nil {
				t.Fatal(err)
			}
			want, err := EntryHash(prev, e)
			if err != nil {
				t.Fatal(err)
			}
			if hex.EncodeToString(want) != e.Hash || hex.EncodeToString(h) != e.Hash {
				t.Errorf("record %d seq %d: Prepared.Seal hash %s, EntryHash %x", i, seq, e.Hash, want)
			}
			prev = h
		}
	}
}

func TestSealNullDetail(t *testing.T) {
	for _, d := range []string{"", "null", "  null "} {
		e, _, err := Seal(nil, 1, Record{Time: t0, Kind: "k", Detail: json.RawMessage(d)})
		if err != nil {
			t.Fatalf("detail %q: %v", d, err)
		}
		if e.Detail != nil {
			t.Errorf("detail %q: got %s, want absent", d, e.Detail)
		}
	}
}

// chain seals n entries.
func chain(t *testing.T, n int) []api.AuditEntry {
	t.Helper()
	var prev []byte
	var out []api.AuditEntry
	for i := range n {
		e, h, err := Seal(prev, int64(i+1), Record{
			Time:    t0.Add(time.Duration(i) * time.Millisecond),
			Kind:    "invoke",
			AppID:   "org.example.app",
			Outcome: "success",
			Detail:  json.RawMessage(`{"i":` + string(rune('0'+i%10)) + `}`),
		})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		prev = h
	}
	return out
}

func TestVerifier(t *testing.T) {
	tests := []struct {
		name       string
		mod        func([]api.AuditEntry) []api.AuditEntry
		wantBroken int64 // 0: chain is intact
		wantN      int64
		problem    string
	}{
		{"intact", nil, 0, 5, ""},
		{"empty", func(es []api.AuditEntry) []api.AuditEntry { return nil }, 0, 0, ""},
		{"outcome edited", func(es []api.AuditEntry) []api.AuditEntry { es[2].Outcome = "denied"; return es }, 3, 2, "altered"},
		{"app_id edited", func(es []api.AuditEntry) []api.AuditEntry { es[0].AppID = "evil"; return es }, 1, 0, "altered"},
		{"time edited", func(es []api.AuditEntry) []api.AuditEntry { es[4].Time = "2025-01-01T00:00:00.000000000Z"; return es }, 5, 4, "altered"},
		{"detail edited", func(es []api.AuditEntry) []api.AuditEntry { es[1].Detail = json.RawMessage(`{"i":9}`); return es }, 2, 1, "altered"},
		{"detail malformed", func(es []api.AuditEntry) []api.AuditEntry { es[1].Detail = json.RawMessage(`{"i":`); return es }, 2, 1, "cannot be hashed"},
		{"hash edited", func(es []api.AuditEntry) []api.AuditEntry { es[3].Hash = strings.Repeat("ab", 32); return es }, 4, 3, "altered"},
		{"hash upper case", func(es []api.AuditEntry) []api.AuditEntry { es[3].Hash = strings.ToUpper(es[3].Hash); return es }, 4, 3, "lower-case"},
		{"prev_hash edited", func(es []api.AuditEntry) []api.AuditEntry { es[3].PrevHash = strings.Repeat("ab", 32); return es }, 4, 3, "prev_hash"},
		{"first prev_hash not zero", func(es []api.AuditEntry) []api.AuditEntry { es[0].PrevHash = es[0].Hash; return es }, 1, 0, "first entry"},
		{"middle deleted", func(es []api.AuditEntry) []api.AuditEntry { return append(es[:2], es[3:]...) }, 4, 2, "entry 3 is missing"},
		{"two deleted", func(es []api.AuditEntry) []api.AuditEntry { return append(es[:1], es[3:]...) }, 4, 1, "entries 2 to 3"},
		{"first deleted", func(es []api.AuditEntry) []api.AuditEntry { return es[1:] }, 2, 0, "missing"},
		{"duplicate", func(es []api.AuditEntry) []api.AuditEntry { return append(es[:3], es[2:]...) }, 3, 3, "duplicate"},
		{"swapped", func(es []api.AuditEntry) []api.AuditEntry { es[1], es[2] = es[2], es[1]; return es }, 3, 1, "entry 2 is missing"},
		{"renumbered", func(es []api.AuditEntry) []api.AuditEntry { es[2].Seq = 0; return es[:3] }, 3, 2, "want seq 3"},
		{
			"deleted and renumbered", // seq fixed up, but the link is gone
			func(es []api.AuditEntry) []api.AuditEntry {
				es = append(es[:2], es[3:]...)
				es[2].Seq, es[3].Seq = 3, 4
				return es
			}, 3, 2, "prev_hash",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := chain(t, 5)
			if tt.mod != nil {
				es = tt.mod(es)
			}
			var v Verifier
			var firstErr error
			for _, e := range es {
				if err := v.Add(e); err != nil && firstErr == nil {
					firstErr = err
				}
			}
			r := v.Result()
			if got, want := r.OK, tt.wantBroken == 0; got != want {
				t.Fatalf("OK = %v, want %v (result %+v)", got, want, r)
			}
			if got, want := r.BrokenSeq, tt.wantBroken; got != want {
				t.Errorf("BrokenSeq = %d, want %d (problem %q)", got, want, r.Problem)
			}
			if got, want := r.Entries, tt.wantN; got != want {
				t.Errorf("Entries = %d, want %d", got, want)
			}
			if !strings.Contains(r.Problem, tt.problem) {
				t.Errorf("Problem = %q, want it to mention %q", r.Problem, tt.problem)
			}
			if (firstErr == nil) != r.OK {
				t.Errorf("Add error = %v with OK = %v", firstErr, r.OK)
			}
			if firstErr != nil {
				be, ok := firstErr.(*BreakError)
				if !ok || be.Seq != tt.wantBroken {
					t.Errorf("Add error = %#v, want *BreakError at seq %d", firstErr, tt.wantBroken)
				}
			}
			if r.OK && r.Entries > 0 {
				if got, want := r.Head, es[len(es)-1].Hash; got != want {
					t.Errorf("Head = %s, want %s", got, want)
				}
			}
		})
	}
}

func TestParamsDigest(t *testing.T) {
	const nullDigest = "sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
	tests := []struct {
		params string
		want   string
	}{
		{"", nullDigest},
		{"null", nullDigest},
		{" \n null\t", nullDigest},
		{`{"a":1,"b":[true,"x"]}`, "sha256:63e8063d9dc6f0fd5a24b4706818a165fd57c3531b74466cf5dea62bff09b0b6"},
		{`{ "b": [true, "x"], "a": 1.0 }`, "sha256:63e8063d9dc6f0fd5a24b4706818a165fd57c3531b74466cf5dea62bff09b0b6"},
	}
	for _, tt := range tests {
		if got := ParamsDigest(json.RawMessage(tt.params)); got != tt.want {
			t.Errorf("ParamsDigest(%q) = %s, want %s", tt.params, got, tt.want)
		}
	}
	if got := ParamsDigest(nil); got != nullDigest {
		t.Errorf("ParamsDigest(nil) = %s, want %s", got, nullDigest)
	}
	if a, b := ParamsDigest(json.RawMessage(`{"a":1}`)), ParamsDigest(json.RawMessage(`{"a":2}`)); a == b {
		t.Errorf("different params digest alike: %s", a)
	}
}

// The direct encoder and the general RFC 8785 path must agree byte for
// byte, or old chains would stop verifying.
func FuzzCanonicalPathsAgree(f *testing.F) {
	f.Add(int64(1), "2023-11-13T11:55:43.000000000Z", "invoke", "SystemIntelligence", "agent:uid=1000,pid=42", "org.example.mail", "org.example.mail.compose", "sha256:00", "success", int64(12), `{"a":[1,2],"b":"\u2028"}`)
	f.Add(int64(9007199254740991), "t", "k", "", "", "", "", "", "", int64(-5), ``)
	f.Add(int64(3), "\x00\"\\", "é€😀", "\xff", "", "", "", "", "x", int64(0), `{"b":1,"a":2}`)
	f.Fuzz(func(t *testing.T, seq int64, tm, kind, source, actor, app, capID, digest, outcome string, dur int64, detail string) {
		e := api.AuditEntry{Seq: seq, Time: tm, Kind: kind, Source: source, Actor: actor, AppID: app,
			CapabilityID: capID, ParamsDigest: digest, Outcome: outcome, DurationUS: dur}
		if detail != "" {
			e.Detail = json.RawMessage(detail)
		}
		fast, ok := appendCanonical(nil, &e, false)
		if !ok {
			return
		}
		slow, err := canonjson.Marshal(canonicalEntry{Seq: e.Seq, Time: e.Time, Kind: e.Kind, Source: e.Source, Actor: e.Actor,
			AppID: e.AppID, CapabilityID: e.CapabilityID, ParamsDigest: e.ParamsDigest, Outcome: e.Outcome, DurationUS: e.DurationUS, Detail: e.Detail})
		if err != nil {
			t.Fatalf("general path failed where the direct one did not: %v (%s)", err, fast)
		}
		if !bytes.Equal(fast, slow) {
			t.Fatalf("paths differ:\n direct: %s\ngeneral: %s", fast, slow)
		}
	})
}

// A walk resumed at any checkpoint ends where the whole walk does, and
// an edited checkpoint entry breaks it.
func TestResume(t *testing.T) {
	es := chain(t, 8)
	var whole Verifier
	for _, e := range es {
		if err := whole.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	for k := range len(es) + 1 {
		var first Verifier
		for _, e := range es[:k] {
			first.Add(e)
		}
		v := Resume(first.Checkpoint())
		from := max(k-1, 0)
		for _, e := range es[from:] {
			if err := v.Add(e); err != nil {
				t.Fatalf("resumed at %d: %v", k, err)
			}
		}
		if got, want := v.Result(), whole.Result(); got != want {
			t.Errorf("resumed at %d: %+v, want %+v", k, got, want)
		}
	}
	var first Verifier
	for _, e := range es[:4] {
		first.Add(e)
	}
	edited := es[3]
	edited.Outcome = "forged"
	if err := Resume(first.Checkpoint()).Add(edited); err == nil {
		t.Error("an edited checkpoint entry verified")
	}
}

// ParseCanonical reads back what Prepare and Seal produce, and refuses
// text that is not exactly an entry's canonical form.
func TestParseCanonical(t *testing.T) {
	p, err := Prepare(Record{Time: time.Unix(1, 0), Kind: "invoke", Outcome: "success", AppID: "a", Detail: json.RawMessage(`{"b":1,"a":2}`)})
	if err != nil {
		t.Fatal(err)
	}
	e, h, err := p.Seal(nil, 7)
	if err != nil {
		t.Fatal(err)
	}
	c := p.AppendCanonical(nil, 7)
	got, err := ParseCanonical(c, make([]byte, HashSize), h)
	if err != nil || got.Hash != e.Hash || got.PrevHash != e.PrevHash || got.Seq != 7 || string(got.Detail) != `{"a":2,"b":1}` {
		t.Fatalf("ParseCanonical = %+v, %v; want %+v", got, err, e)
	}
	for _, bad := range []string{
		strings.Replace(string(c), `"kind"`, `"extra":1,"kind"`, 1),     // unknown member
		strings.Replace(string(c), `{"a":2,"b":1}`, `{"b":1,"a":2}`, 1), // detail out of order
		strings.Replace(string(c), `"seq":7`, `"seq":7.0`, 1),           // a number not canonical
		string(c) + " ",
		`{"seq":`,
	} {
		if _, err := ParseCanonical([]byte(bad), make([]byte, HashSize), h); err == nil {
			t.Errorf("ParseCanonical(%s) succeeded", bad)
		}
	}
}
