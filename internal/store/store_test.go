package store

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"

	"github.com/pcp-dev/pcp/internal/stored"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)

// openFile opens a store on a new file under t.TempDir and closes it at
// the end of the test.
func openFile(t testing.TB, opts ...Option) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state", "pcp.db")
	s, err := Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, path
}

func reopen(t *testing.T, s *Store, path string, opts ...Option) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s2, err := Open(context.Background(), path, opts...)
	if err != nil {
		t.Fatalf("reopening: %v", err)
	}
	t.Cleanup(func() { s2.Close() })
	return s2
}

// rawDB opens a separate, writable connection to the file, standing in
// for another process editing it.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", fileDSN(path, url.Values{"_pragma": {"busy_timeout(5000)"}}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func record(i int) audit.Record {
	return audit.Record{
		Time:         t0.Add(time.Duration(i) * time.Second),
		Kind:         "invoke",
		Source:       string(api.SourceSystemIntelligence),
		AppID:        "org.example.mail",
		CapabilityID: "org.example.mail.compose",
		ParamsDigest: audit.ParamsDigest(json.RawMessage(fmt.Sprintf(`{"n":%d}`, i))),
		Outcome:      "success",
		Duration:     time.Duration(i) * time.Millisecond,
		Detail:       json.RawMessage(fmt.Sprintf(`{"i": %d, "note": "entry"}`, i)),
	}
}

func appendN(t testing.TB, s *Store, n int) []api.AuditEntry {
	t.Helper()
	var out []api.AuditEntry
	for i := range n {
		e, err := s.AppendAudit(context.Background(), record(i))
		if err != nil {
			t.Fatalf("AppendAudit %d: %v", i, err)
		}
		out = append(out, e)
	}
	return out
}

// backends runs f against a file store and a memory store.
func backends(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("file", func(t *testing.T) {
		s, _ := openFile(t)
		f(t, s)
	})
	t.Run("memory", func(t *testing.T) {
		s, err := OpenMemory(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		f(t, s)
	})
}

func TestApps(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		mail := stored.App{AppID: "org.example.mail", Manifest: json.RawMessage(`{"version":"1"}`), Publisher: "Example", Signed: true, UpdatedAt: t0}
		notes := stored.App{AppID: "org.example.notes", Manifest: json.RawMessage(`{"version":"2"}`), UpdatedAt: t0.Add(time.Hour)}
		mail3 := mail
		mail3.Manifest = json.RawMessage(`{"version":"3"}`)
		mail3.Signed = false
		steps := []struct {
			name string
			do   func() error
			want []stored.App
		}{
			{"save one", func() error { return s.SaveApp(ctx, mail) }, []stored.App{mail}},
			{"save another", func() error { return s.SaveApp(ctx, notes) }, []stored.App{mail, notes}},
			{"replace", func() error { return s.SaveApp(ctx, mail3) }, []stored.App{mail3, notes}},
			{"delete", func() error { return s.DeleteApp(ctx, mail.AppID) }, []stored.App{notes}},
			{"delete missing", func() error { return s.DeleteApp(ctx, "org.example.none") }, []stored.App{notes}},
		}
		for _, st := range steps {
			if err := st.do(); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			got, err := s.LoadApps(ctx)
			if err != nil {
				t.Fatalf("%s: LoadApps: %v", st.name, err)
			}
			if d := cmp.Diff(st.want, got); d != "" {
				t.Errorf("%s: LoadApps (-want +got):\n%s", st.name, d)
			}
		}

		for _, bad := range []stored.App{{AppID: "", Manifest: json.RawMessage(`{}`)}, {AppID: "x", Manifest: json.RawMessage(`{`)}} {
			if err := s.SaveApp(ctx, bad); err == nil {
				t.Errorf("SaveApp(%+v) succeeded, want an error", bad)
			}
		}
	})
}

func TestRevocations(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		steps := []struct {
			name          string
			do            func() (bool, error)
			wantRevoked   bool
			wantRevocList []stored.Revocation
		}{
			{"revoke", func() (bool, error) { return false, s.Revoke(ctx, "a", "spam", t0) }, false,
				[]stored.Revocation{{AppID: "a", Reason: "spam", RevokedAt: t0}}},
			{"revoke again replaces", func() (bool, error) { return false, s.Revoke(ctx, "a", "worse", t0.Add(time.Minute)) }, false,
				[]stored.Revocation{{AppID: "a", Reason: "worse", RevokedAt: t0.Add(time.Minute)}}},
			{"revoke other", func() (bool, error) { return false, s.Revoke(ctx, "b", "", t0) }, false,
				[]stored.Revocation{{AppID: "a", Reason: "worse", RevokedAt: t0.Add(time.Minute)}, {AppID: "b", Reason: "", RevokedAt: t0}}},
			{"allow", func() (bool, error) { return s.Allow(ctx, "a") }, true,
				[]stored.Revocation{{AppID: "b", Reason: "", RevokedAt: t0}}},
			{"allow not revoked", func() (bool, error) { return s.Allow(ctx, "a") }, false,
				[]stored.Revocation{{AppID: "b", Reason: "", RevokedAt: t0}}},
		}
		for _, st := range steps {
			was, err := st.do()
			if err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
			if was != st.wantRevoked {
				t.Errorf("%s: wasRevoked = %v, want %v", st.name, was, st.wantRevoked)
			}
			got, err := s.Revocations(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(st.wantRevocList, got); d != "" {
				t.Errorf("%s: Revocations (-want +got):\n%s", st.name, d)
			}
		}
	})
}

func TestAudit(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := context.Background()
		if res, err := s.VerifyAudit(ctx); err != nil || !res.OK || res.Entries != 0 {
			t.Errorf("empty log: VerifyAudit = %+v, %v; want ok with 0 entries", res, err)
		}
		es := appendN(t, s, 10)
		for i, e := range es {
			if got, want := e.Seq, int64(i+1); got != want {
				t.Errorf("entry %d: seq = %d, want %d", i, got, want)
			}
		}
		if got, want := es[0].PrevHash, strings.Repeat("0", 64); got != want {
			t.Errorf("first prev_hash = %s, want %s", got, want)
		}
		if got, want := string(es[3].Detail), `{"i":3,"note":"entry"}`; got != want {
			t.Errorf("detail = %s, want canonical %s", got, want)
		}
		tail, err := s.AuditTail(ctx, 3)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(es[7:], tail); d != "" {
			t.Errorf("AuditTail(3) (-want +got):\n%s", d)
		}
		all, err := s.AuditTail(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if d := cmp.Diff(es, all); d != "" {
			t.Errorf("AuditTail(100) (-want +got):\n%s", d)
		}
		res, err := s.VerifyAudit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := (api.AuditVerifyResult{OK: true, Entries: 10, Head: es[9].Hash}); res != want {
			t.Errorf("VerifyAudit = %+v, want %+v", res, want)
		}

		// A zero time means now.
		before := time.Now()
		e, err := s.AppendAudit(ctx, audit.Record{Kind: "allow", AppID: "a"})
		if err != nil {
			t.Fatal(err)
		}
		if tm, err := time.Parse(time.RFC3339Nano, e.Time); err != nil || tm.Before(before.Add(-time.Second)) {
			t.Errorf("time = %q, want about %v", e.Time, before)
		}
	})
}

func TestAppendAuditRejects(t *testing.T) {
	s, _ := openFile(t)
	ctx := context.Background()
	for _, r := range []audit.Record{
		{Time: t0},
		{Time: t0, Kind: "invoke", Detail: json.RawMessage(`[1,2]`)},
		{Time: t0, Kind: "invoke", Detail: json.RawMessage(`{"a":`)},
	} {
		if e, err := s.AppendAudit(ctx, r); err == nil {
			t.Errorf("AppendAudit(%+v) = %+v, want an error", r, e)
		}
	}
	// Rejected records take no seq.
	if e := appendN(t, s, 1)[0]; e.Seq != 1 {
		t.Errorf("seq after rejections = %d, want 1", e.Seq)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.AppendAudit(cctx, record(0)); !errors.Is(err, context.Canceled) {
		t.Errorf("AppendAudit with a cancelled context: err = %v, want context.Canceled", err)
	}
}

func TestRestart(t *testing.T) {
	s, path := openFile(t)
	ctx := context.Background()
	app := stored.App{AppID: "org.example.mail", Manifest: json.RawMessage(`{"version":"1"}`), Publisher: "Example", Signed: true, UpdatedAt: t0}
	if err := s.SaveApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(ctx, "org.example.bad", "malware", t0); err != nil {
		t.Fatal(err)
	}
	before := appendN(t, s, 5)
	for i := 1; i <= 7; i++ {
		s.AppendEvent(api.Event{Sequence: int64(i), Type: api.EventAppConnected, Timestamp: 1000 + int64(i), AppID: "a", Data: json.RawMessage(`{"k":1}`)})
	}
	// Close commits the events, though nobody waited for them.

	s = reopen(t, s, path)
	apps, err := s.LoadApps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]stored.App{app}, apps); d != "" {
		t.Errorf("apps after restart (-want +got):\n%s", d)
	}
	revs, err := s.Revocations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]stored.Revocation{{AppID: "org.example.bad", Reason: "malware", RevokedAt: t0}}, revs); d != "" {
		t.Errorf("revocations after restart (-want +got):\n%s", d)
	}
	if got, want := s.JournalLength(), int64(7); got != want {
		t.Errorf("JournalLength = %d, want %d", got, want)
	}
	if seq, err := s.LastEventSeq(ctx); err != nil || seq != 7 {
		t.Errorf("LastEventSeq = %d, %v; want 7", seq, err)
	}
	evs, err := s.RecentEvents(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []api.Event{
		{Sequence: 6, Type: api.EventAppConnected, Timestamp: 1006, AppID: "a", Data: json.RawMessage(`{"k":1}`)},
		{Sequence: 7, Type: api.EventAppConnected, Timestamp: 1007, AppID: "a", Data: json.RawMessage(`{"k":1}`)},
	}
	if d := cmp.Diff(want, evs); d != "" {
		t.Errorf("RecentEvents after restart (-want +got):\n%s", d)
	}

	tail, err := s.AuditTail(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(before, tail); d != "" {
		t.Errorf("audit after restart (-want +got):\n%s", d)
	}
	e, err := s.AppendAudit(ctx, record(5))
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 6 || e.PrevHash != before[4].Hash {
		t.Errorf("first entry after restart: seq %d prev_hash %s; want seq 6 prev_hash %s", e.Seq, e.PrevHash, before[4].Hash)
	}
	res, err := s.VerifyAudit(ctx)
	if err != nil || !res.OK || res.Entries != 6 || res.Head != e.Hash {
		t.Errorf("VerifyAudit after restart = %+v, %v; want ok, 6 entries, head %s", res, err, e.Hash)
	}
}

func TestJournalBound(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t, WithJournalLimit(10))
	for i := 1; i <= 25; i++ {
		s.AppendEvent(api.Event{Sequence: int64(i), Type: api.EventSurfaceCreated, Timestamp: int64(i)})
		if i%7 == 0 {
			if err := s.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A repeated sequence is ignored and not counted.
	s.AppendEvent(api.Event{Sequence: 25, Type: "dup", Timestamp: 99})
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(name string, n int64, first int64) {
		t.Helper()
		if got := s.JournalLength(); got != n {
			t.Errorf("%s: JournalLength = %d, want %d", name, got, n)
		}
		evs, err := s.RecentEvents(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(evs)) != n || evs[0].Sequence != first || evs[len(evs)-1].Sequence != 25 || evs[len(evs)-1].Type != api.EventSurfaceCreated {
			t.Errorf("%s: RecentEvents = %+v, want seqs %d..25", name, evs, first)
		}
		if evs[0].Data != nil {
			t.Errorf("%s: absent data read back as %q, want nil", name, evs[0].Data)
		}
	}
	check("limit 10", 10, 16)
	s = reopen(t, s, path, WithJournalLimit(4))
	check("reopened with limit 4", 4, 22)
}

func TestPendingEventsBounded(t *testing.T) {
	s, err := OpenMemory(context.Background(), WithJournalLimit(3))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// Hold the writer's connection, so events pile up.
	conn, err := s.wdb.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 100; i++ {
		s.AppendEvent(api.Event{Sequence: int64(i), Type: "t"})
	}
	s.mu.Lock()
	pending := len(s.events)
	s.mu.Unlock()
	if pending > 3 {
		t.Errorf("%d events pending, want at most the journal limit 3", pending)
	}
	conn.Close()
	if err := s.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	evs, err := s.RecentEvents(context.Background(), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 || evs[0].Sequence != 98 {
		t.Errorf("journal = %+v, want seqs 98..100", evs)
	}
}

// TestTamper edits one field of one entry in the log's files, with the
// record's checksum made right again, as a process that can write the
// files would, and expects both verifiers to name it.
func TestTamper(t *testing.T) {
	const n, victim = 10, 6
	tests := []struct {
		name    string
		edit    func(e *api.AuditEntry)
		raw     func(c []byte) []byte // edits the canonical bytes instead
		problem string
	}{
		{"outcome", func(e *api.AuditEntry) { e.Outcome = "denied" }, nil, "altered"},
		{"app_id", func(e *api.AuditEntry) { e.AppID = "org.example.evil" }, nil, "altered"},
		{"detail", func(e *api.AuditEntry) { e.Detail = []byte(`{"i":99,"note":"entry"}`) }, nil, "altered"},
		{"detail removed", func(e *api.AuditEntry) { e.Detail = nil }, nil, "altered"},
		{"time", func(e *api.AuditEntry) { e.Time = "2025-06-01T12:00:05.000000000Z" }, nil, "altered"},
		{"kind", func(e *api.AuditEntry) { e.Kind = "allow" }, nil, "altered"},
		{"duration_us", func(e *api.AuditEntry) { e.DurationUS = 0 }, nil, "altered"},
		{"hash", func(e *api.AuditEntry) { e.Hash = strings.Repeat("a", 64) }, nil, "altered"},
		{"prev_hash", func(e *api.AuditEntry) { e.PrevHash = strings.Repeat("b", 64) }, nil, "prev_hash"},
		{"detail not JSON", nil, func(c []byte) []byte { return bytes.Replace(c, []byte(`"detail":{`), []byte(`"detail":{{`), 1) }, "cannot be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, path := openFile(t)
			appendN(t, s, n)
			if res, err := s.VerifyAudit(context.Background()); err != nil || !res.OK {
				t.Fatalf("before tampering: VerifyAudit = %+v, %v", res, err)
			}
			if tt.edit != nil {
				editEntries(t, path, func(es []api.AuditEntry) []api.AuditEntry {
					tt.edit(&es[victim-1])
					return es
				})
			} else {
				recs := readRecords(t, path)
				recs[victim-1].Canonical = tt.raw(recs[victim-1].Canonical)
				writeRecords(t, path, recs)
			}
			check := func(name string, res api.AuditVerifyResult, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if res.OK || res.BrokenSeq != victim || res.Entries != victim-1 || !strings.Contains(res.Problem, tt.problem) {
					t.Errorf("%s = %+v; want broken at seq %d after %d entries, problem mentioning %q",
						name, res, victim, victim-1, tt.problem)
				}
			}
			res, err := s.VerifyAudit(context.Background())
			check("VerifyAudit", res, err)
			res, err = VerifyFile(context.Background(), path)
			check("VerifyFile while open", res, err)
			s.Close()
			res, err = VerifyFile(context.Background(), path)
			check("VerifyFile after close", res, err)
		})
	}
}

// TestFlippedByte flips one byte of an old record without fixing its
// checksum: the verifiers name the entry and where its record is, and a
// restart opens the log refusing appends instead of cutting it short.
func TestFlippedByte(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	appendN(t, s, 10)
	b, name := segmentBytes(t, path)
	off := recordOffset(t, b, 4)
	b[off+8+72+5] ^= 0x20 // inside the canonical entry
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		name string
		fn   func() (api.AuditVerifyResult, error)
	}{
		{"VerifyAudit", func() (api.AuditVerifyResult, error) { return s.VerifyAudit(ctx) }},
		{"VerifyFile", func() (api.AuditVerifyResult, error) { return VerifyFile(ctx, path) }},
	} {
		res, err := v.fn()
		if err != nil || res.OK || res.BrokenSeq != 4 || res.Entries != 3 || !strings.Contains(res.Problem, "checksum") ||
			!strings.Contains(res.Problem, fmt.Sprintf("offset %d", off)) {
			t.Errorf("%s = %+v, %v; want broken at entry 4 (offset %d) by its checksum after 3 entries", v.name, res, err, off)
		}
	}
	s = reopen(t, s, path)
	rec := s.AuditRecovery()
	if !strings.Contains(rec.Corrupt, "entry 4") || rec.Torn != "" {
		t.Errorf("recovery = %+v; want the damage at entry 4 reported, nothing cut off", rec)
	}
	if _, err := s.AppendAudit(ctx, record(11)); !errors.Is(err, audit.ErrUnavailable) || !strings.Contains(err.Error(), "entry 4") {
		t.Errorf("append to a damaged log: %v; want ErrUnavailable naming entry 4", err)
	}
	after, _ := segmentBytes(t, path)
	if len(after) != len(b) {
		t.Errorf("the damaged log was cut from %d to %d bytes", len(b), len(after))
	}
}

// TestTornRecord cuts the segment inside its last record, as a process
// killed in the middle of a write leaves it: the next start reports and
// cuts the incomplete record, and the log goes on after the entry before.
func TestTornRecord(t *testing.T) {
	ctx := context.Background()
	for _, cut := range []int{1, 7, 8, 50, -1} {
		t.Run(fmt.Sprint(cut), func(t *testing.T) {
			s, path := openFile(t)
			es := appendN(t, s, 5)
			s.Close()
			// A write cut short was never acknowledged, so never indexed.
			if _, err := rawDB(t, path).Exec(`DELETE FROM audit WHERE seq = 5`); err != nil {
				t.Fatal(err)
			}
			b, name := segmentBytes(t, path)
			last := recordOffset(t, b, 5)
			n := last + cut
			if cut < 0 {
				n = len(b) + cut
			}
			if err := os.WriteFile(name, b[:n], 0o600); err != nil {
				t.Fatal(err)
			}
			res, err := VerifyFile(ctx, path)
			if err != nil || !res.OK || res.Entries != 4 {
				t.Errorf("VerifyFile of the torn log = %+v, %v; want ok with 4 entries (the torn write was never acknowledged)", res, err)
			}
			s = reopen(t, s, path)
			rec := s.AuditRecovery()
			if !strings.Contains(rec.Torn, "entry 5") || rec.Corrupt != "" || rec.Entries != 4 {
				t.Errorf("recovery = %+v; want the torn entry 5 reported and cut", rec)
			}
			if after, _ := segmentBytes(t, path); len(after) != last {
				t.Errorf("segment is %d bytes after recovery, want %d", len(after), last)
			}
			e, err := s.AppendAudit(ctx, record(9))
			if err != nil || e.Seq != 5 || e.PrevHash != es[3].Hash {
				t.Fatalf("append after recovery = seq %d prev %s, %v; want seq 5 after %s", e.Seq, e.PrevHash, err, es[3].Hash)
			}
			if res, err := s.VerifyAudit(ctx); err != nil || !res.OK || res.Entries != 5 {
				t.Errorf("VerifyAudit = %+v, %v", res, err)
			}
			// The index, which had entry 5 as it was, is rebuilt to the log's.
			tail, err := s.AuditTail(ctx, 10)
			if err != nil || len(tail) != 5 || tail[4].Hash != e.Hash {
				t.Errorf("AuditTail after recovery = %d entries, %v; want 5 ending with the new entry", len(tail), err)
			}
		})
	}
}

func TestDeletedRows(t *testing.T) {
	tests := []struct {
		name      string
		drop      func(seq int64) bool
		file      bool // whether VerifyFile can see it
		broken    int64
		entries   int64
		problem   string
		problemVA string // VerifyAudit's problem, if different
	}{
		{"middle", func(q int64) bool { return q == 4 }, true, 5, 3, "entry 4 is missing", ""},
		{"first", func(q int64) bool { return q == 1 }, true, 2, 0, "entry 1 is missing", ""},
		{"range", func(q int64) bool { return q >= 3 && q <= 6 }, true, 7, 2, "entries 3 to 6 are missing", ""},
		{"newest", func(q int64) bool { return q == 8 }, false, 8, 7, "", "entry 8 was removed"},
		{"newest three", func(q int64) bool { return q >= 6 }, false, 6, 5, "", "entries 6 to 8 were removed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, path := openFile(t)
			appendN(t, s, 8)
			editEntries(t, path, func(es []api.AuditEntry) []api.AuditEntry {
				var kept []api.AuditEntry
				for _, e := range es {
					if !tt.drop(e.Seq) {
						kept = append(kept, e)
					}
				}
				return kept
			})
			res, err := s.VerifyAudit(context.Background())
			want := tt.problem
			if tt.problemVA != "" {
				want = tt.problemVA
			}
			if err != nil || res.OK || res.BrokenSeq != tt.broken || res.Entries != tt.entries || !strings.Contains(res.Problem, want) {
				t.Errorf("VerifyAudit = %+v, %v; want broken at %d after %d entries, problem mentioning %q", res, err, tt.broken, tt.entries, want)
			}
			res, err = VerifyFile(context.Background(), path)
			if err != nil {
				t.Fatal(err)
			}
			if !tt.file {
				if !res.OK {
					t.Errorf("VerifyFile = %+v; a truncated chain is still a chain", res)
				}
				return
			}
			if res.OK || res.BrokenSeq != tt.broken || !strings.Contains(res.Problem, tt.problem) {
				t.Errorf("VerifyFile = %+v; want broken at %d, problem mentioning %q", res, tt.broken, tt.problem)
			}
		})
	}
}

// TestRewrittenLog replaces the whole log with a valid chain of other
// entries; only the written head gives it away.
func TestRewrittenLog(t *testing.T) {
	s, path := openFile(t)
	appendN(t, s, 3)
	var prev []byte
	var es []api.AuditEntry
	for i := range 3 {
		r := record(i)
		r.Outcome = "forged"
		e, h, err := audit.Seal(prev, int64(i+1), r)
		if err != nil {
			t.Fatal(err)
		}
		prev = h
		es = append(es, e)
	}
	editEntries(t, path, func([]api.AuditEntry) []api.AuditEntry { return es })
	res, err := s.VerifyAudit(context.Background())
	if err != nil || res.OK || res.BrokenSeq != 3 || !strings.Contains(res.Problem, "rewritten") {
		t.Errorf("VerifyAudit = %+v, %v; want broken at 3, rewritten", res, err)
	}
}

func TestConcurrentAppend(t *testing.T) {
	const workers, each = 64, 200
	s, path := openFile(t)
	ctx := context.Background()
	seqs := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				e, err := s.AppendAudit(ctx, record(w*each+i))
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				seqs[w] = append(seqs[w], e.Seq)
				if i%50 == 0 {
					s.AppendEvent(api.Event{Sequence: e.Seq, Type: api.EventCapabilityInvoked})
				}
				if i%100 == 0 {
					if err := s.SaveApp(ctx, stored.App{AppID: fmt.Sprintf("app%d", w), Manifest: json.RawMessage(`{}`)}); err != nil {
						t.Errorf("worker %d: %v", w, err)
					}
				}
			}
		})
	}
	wg.Wait()
	seen := make([]bool, workers*each+1)
	for w, ss := range seqs {
		for i, q := range ss {
			if q < 1 || q > workers*each || seen[q] {
				t.Fatalf("seq %d returned twice or out of range", q)
			}
			seen[q] = true
			if i > 0 && q <= ss[i-1] {
				t.Errorf("worker %d: seq %d after %d; a caller's entries must be in its order", w, q, ss[i-1])
			}
		}
	}
	res, err := s.VerifyAudit(ctx)
	if err != nil || !res.OK || res.Entries != workers*each {
		t.Errorf("VerifyAudit = %+v, %v; want ok with %d entries", res, err, workers*each)
	}
	var min, max, count int64
	if err := rawDB(t, path).QueryRow(`SELECT min(seq), max(seq), count(*) FROM audit`).Scan(&min, &max, &count); err != nil {
		t.Fatal(err)
	}
	if min != 1 || max != workers*each || count != workers*each {
		t.Errorf("audit seqs: min %d max %d count %d; want 1..%d contiguous", min, max, count, workers*each)
	}
	apps, err := s.LoadApps(ctx)
	if err != nil || len(apps) != workers {
		t.Errorf("LoadApps: %d apps, %v; want %d", len(apps), err, workers)
	}
}

func TestClose(t *testing.T) {
	s, err := OpenMemory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case <-s.writerDone:
	default:
		t.Error("writer goroutine still running after Close")
	}
	if _, err := s.AppendAudit(context.Background(), record(0)); !errors.Is(err, ErrClosed) {
		t.Errorf("AppendAudit after Close: err = %v, want ErrClosed", err)
	}
	if err := s.SaveApp(context.Background(), stored.App{AppID: "a", Manifest: json.RawMessage(`{}`)}); !errors.Is(err, ErrClosed) {
		t.Errorf("SaveApp after Close: err = %v, want ErrClosed", err)
	}
	s.AppendEvent(api.Event{Sequence: 1}) // dropped, must not panic or block
}

func TestSchemaVersion(t *testing.T) {
	s, path := openFile(t)
	s.Close()
	if _, err := rawDB(t, path).Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(context.Background(), path); err == nil || !strings.Contains(err.Error(), "newer") {
		t.Errorf("Open of a newer schema: err = %v, want one saying it is newer", err)
	}
	if _, err := VerifyFile(context.Background(), path); err == nil {
		t.Error("VerifyFile of a newer schema succeeded, want an error")
	}
}

func TestVerifyFileErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := VerifyFile(context.Background(), filepath.Join(dir, "missing.db")); err == nil {
		t.Error("VerifyFile of a missing file succeeded")
	}
	other := filepath.Join(dir, "other.db")
	if _, err := rawDB(t, other).Exec(`CREATE TABLE x (y)`); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyFile(context.Background(), other); err == nil || !strings.Contains(err.Error(), "not a PCP state database") {
		t.Errorf("VerifyFile of another database: err = %v", err)
	}
}

func TestOddPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a dir?#%", "pcp.db")
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	appendN(t, s, 2)
	s.Close()
	if res, err := VerifyFile(context.Background(), path); err != nil || !res.OK || res.Entries != 2 {
		t.Errorf("VerifyFile(%q) = %+v, %v", path, res, err)
	}
}

// TestBatchFailure queues a failing change with others while the writer
// is busy: the failure must reach its caller alone. Audit appends do not
// wait for the writer at all: they are written to the log while the
// database is held.
func TestBatchFailure(t *testing.T) {
	ctx := context.Background()
	s, err := OpenMemory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A change that blocks keeps the writer busy with a batch of its own
	// while the requests under test queue up behind it.
	started, release := make(chan struct{}), make(chan struct{})
	blocked := make(chan error, 1)
	go func() {
		blocked <- s.do(ctx, func(context.Context, *sql.Tx) error {
			close(started)
			<-release
			return nil
		})
	}()
	<-started
	const audits = 6
	for i := range audits {
		e, err := s.AppendAudit(ctx, record(i))
		if err != nil || e.Seq != int64(i+1) {
			t.Fatalf("AppendAudit while the writer is busy = %d, %v; want seq %d", e.Seq, err, i+1)
		}
	}
	errBoom := errors.New("boom")
	errs := make(chan error, 3)
	for i := range 3 {
		go func() {
			if i == 1 {
				errs <- s.do(ctx, func(context.Context, *sql.Tx) error { return errBoom })
				return
			}
			errs <- s.SaveApp(ctx, stored.App{AppID: fmt.Sprintf("org.example.a%d", i), Manifest: []byte(`{}`), UpdatedAt: t0})
		}()
	}
	for {
		s.mu.Lock()
		n := len(s.ops)
		s.mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
	var booms int
	for range 3 {
		if err := <-errs; errors.Is(err, errBoom) {
			booms++
		} else if err != nil {
			t.Errorf("unexpected error: %v", err)
		}
	}
	if booms != 1 {
		t.Errorf("%d callers saw the failing change's error, want 1", booms)
	}
	if res, err := s.VerifyAudit(ctx); err != nil || !res.OK || res.Entries != audits {
		t.Errorf("VerifyAudit = %+v, %v; want ok with %d entries", res, err, audits)
	}
	if es, err := s.AuditTail(ctx, 10); err != nil || len(es) != audits {
		t.Errorf("AuditTail = %d entries, %v; want %d", len(es), err, audits)
	}
}

// Nothing on an append's path touches the database: with another
// process holding the database's write lock, audit appends are written
// and events accepted; the index and the journal catch up once the lock
// is released.
func TestAppendsDoNotWaitForTheDatabase(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	other := rawDB(t, path)
	conn, err := other.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	for i := range 300 { // past pendingBatch, so the writer is woken and blocks
		e, err := s.AppendAudit(ctx, record(i))
		if err != nil || e.Seq != int64(i+1) {
			t.Fatalf("AppendAudit %d with the database locked: seq %d, %v", i, e.Seq, err)
		}
		s.AppendEvent(api.Event{Sequence: e.Seq, Type: api.EventCapabilityInvoked})
	}
	if res, err := s.VerifyAudit(ctx); err != nil || !res.OK || res.Entries != 300 {
		t.Errorf("VerifyAudit with the database locked = %+v, %v", res, err)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	tail, err := s.AuditTail(ctx, 1000)
	if err != nil || len(tail) != 300 {
		t.Errorf("AuditTail after the lock = %d entries, %v; want 300", len(tail), err)
	}
	evs, err := s.RecentEvents(ctx, 1000)
	if err != nil || len(evs) != 300 {
		t.Errorf("RecentEvents after the lock = %d, %v; want 300", len(evs), err)
	}
}

// A database whose audit rows do not form a chain is not moved into a
// new log: Open fails, naming the entry.
func TestMigrateBrokenRows(t *testing.T) {
	s, path := openFile(t)
	appendN(t, s, 5)
	s.Close()
	if err := os.RemoveAll(AuditDir(path)); err != nil {
		t.Fatal(err)
	}
	if _, err := rawDB(t, path).Exec(`UPDATE audit SET outcome = 'denied' WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(context.Background(), path)
	if err == nil {
		s2.Close()
		t.Fatal("Open migrated a broken chain")
	}
	if !strings.Contains(err.Error(), "seq 3") || !strings.Contains(err.Error(), "cannot be moved into the audit log") {
		t.Errorf("Open: %v; want the broken entry 3 named", err)
	}
}

// TestIndexRestoresLostEntries: after a power loss without fsync the log
// may have lost its newest records while the index kept them; the next
// start appends them to the log again, as they continue its chain.
func TestIndexRestoresLostEntries(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	es := appendN(t, s, 6)
	s.Close()
	recs := readRecords(t, path)
	writeRecords(t, path, recs[:4])
	s = reopen(t, s, path)
	if rec := s.AuditRecovery(); rec.Restored != 2 || rec.Entries != 6 {
		t.Errorf("recovery = %+v; want 2 entries restored, 6 in all", rec)
	}
	if res, err := s.VerifyAudit(ctx); err != nil || !res.OK || res.Entries != 6 || res.Head != es[5].Hash {
		t.Errorf("VerifyAudit = %+v, %v; want ok with 6 entries, head %s", res, err, es[5].Hash)
	}
	if e, err := s.AppendAudit(ctx, record(7)); err != nil || e.Seq != 7 || e.PrevHash != es[5].Hash {
		t.Errorf("append after restoring = %+v, %v", e, err)
	}
}

// Index rows the log lost that do not continue its chain are not
// restored: appends are refused instead.
func TestIndexRestoreRefusesAForeignChain(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	appendN(t, s, 6)
	s.Close()
	writeRecords(t, path, readRecords(t, path)[:4])
	if _, err := rawDB(t, path).Exec(`UPDATE audit SET prev_hash = ? WHERE seq = 5`, strings.Repeat("c", 64)); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, path)
	if _, err := s.AppendAudit(ctx, record(7)); !errors.Is(err, audit.ErrUnavailable) || !strings.Contains(err.Error(), "do not continue it") {
		t.Errorf("append: %v; want ErrUnavailable saying the index's entries do not continue the log", err)
	}
}

// TestIndexRebuilt: a missing or different index is rebuilt from the log.
func TestIndexRebuilt(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	es := appendN(t, s, 6)
	s.Close()
	if _, err := rawDB(t, path).Exec(`DELETE FROM audit WHERE seq > 2`); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, path)
	if rec := s.AuditRecovery(); rec.Indexed != 4 || rec.Rebuilt {
		t.Errorf("recovery = %+v; want 4 entries indexed", rec)
	}
	tail, err := s.AuditTail(ctx, 10)
	if err != nil || !cmp.Equal(tail, es) {
		t.Errorf("AuditTail after catching up = %v, %v; want %v", tail, err, es)
	}
	s.Close()
	if _, err := rawDB(t, path).Exec(`UPDATE audit SET hash = ? WHERE seq = 6`, strings.Repeat("d", 64)); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, path)
	if rec := s.AuditRecovery(); !rec.Rebuilt || rec.Indexed != 6 {
		t.Errorf("recovery = %+v; want the index rebuilt with 6 entries", rec)
	}
	tail, err = s.AuditTail(ctx, 10)
	if err != nil || !cmp.Equal(tail, es) {
		t.Errorf("AuditTail after the rebuild = %v, %v; want %v", tail, err, es)
	}
}

// TestMigrateRows: a state database from before the log has its audit
// rows moved into a new log on first start; the key that signs
// checkpoints lives beside the database, so a damaged log moved aside
// and rebuilt the same way keeps its identity.
func TestMigrateRows(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	es := appendN(t, s, 5)
	cp, err := s.AuditCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Rename(AuditDir(path), AuditDir(path)+".damaged"); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, path)
	if rec := s.AuditRecovery(); rec.Migrated != 5 || rec.Entries != 5 {
		t.Errorf("recovery = %+v; want 5 entries migrated", rec)
	}
	if res, err := s.VerifyAudit(ctx); err != nil || !res.OK || res.Entries != 5 || res.Head != es[4].Hash {
		t.Errorf("VerifyAudit after migrating = %+v, %v", res, err)
	}
	if res, err := s.AuditConsistency(ctx, cp.Checkpoint); err != nil || !res.OK {
		t.Errorf("the checkpoint of the log before against the migrated one: %+v, %v", res, err)
	}
	if e, err := s.AppendAudit(ctx, record(7)); err != nil || e.Seq != 6 || e.PrevHash != es[4].Hash {
		t.Errorf("append after migrating = %+v, %v", e, err)
	}
}
