package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

// testClock is a clock that moves one second each time it is read, so
// every write gets a distinct, predictable timestamp.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

func openTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notes.db")
	st, err := OpenStore(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	clock := &testClock{t: time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)}
	st.now = clock.now
	return st, path
}

func mustCreate(t *testing.T, st *Store, title, body string, tags ...string) *Note {
	t.Helper()
	n, err := st.Create(t.Context(), title, body, tags)
	if err != nil {
		t.Fatalf("Create(%q): %v", title, err)
	}
	return n
}

func ids(sums []Summary) []int64 {
	out := []int64{}
	for _, s := range sums {
		out = append(out, s.ID)
	}
	return out
}

func TestCreateAndGet(t *testing.T) {
	st, _ := openTestStore(t)
	ctx := t.Context()
	n, err := st.Create(ctx, "  Groceries ", "milk\neggs", []string{"home", " errands ", "home"})
	if err != nil {
		t.Fatal(err)
	}
	if n.ID != 1 {
		t.Errorf("first id = %d, want 1", n.ID)
	}
	got, err := st.Get(ctx, n.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := &Note{
		ID: 1, Title: "Groceries", Body: "milk\neggs", Tags: []string{"home", "errands"},
		CreatedAt: time.Date(2025, 3, 1, 9, 0, 1, 0, time.UTC),
		UpdatedAt: time.Date(2025, 3, 1, 9, 0, 1, 0, time.UTC),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Get (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, n); diff != "" {
		t.Errorf("Create returned (-want +got):\n%s", diff)
	}

	// A note without tags reads back with an empty list, not nil, so the
	// agent sees [] rather than null.
	bare := mustCreate(t, st, "bare", "")
	got, err = st.Get(ctx, bare.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tags == nil || len(got.Tags) != 0 {
		t.Errorf("tags of an untagged note = %#v, want empty non-nil", got.Tags)
	}
}

func TestGetUnknown(t *testing.T) {
	st, _ := openTestStore(t)
	_, err := st.Get(t.Context(), 42)
	var nf *NotFoundError
	if !errors.As(err, &nf) || nf.ID != 42 || !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(42) = %v, want NotFoundError{42}", err)
	}
	if got, want := err.Error(), "no note 42"; got != want {
		t.Errorf("message = %q, want %q", got, want)
	}
}

func TestCreateValidation(t *testing.T) {
	manyTags := make([]string, MaxTags+1)
	for i := range manyTags {
		manyTags[i] = "t" + strings.Repeat("x", i)
	}
	tests := []struct {
		name, title, body string
		tags              []string
		field             string // "" means no error
	}{
		{"ok", "t", "b", nil, ""},
		{"empty title", "", "b", nil, "title"},
		{"blank title", " \t ", "b", nil, "title"},
		{"two-line title", "a\nb", "b", nil, "title"},
		{"longest title", strings.Repeat("t", MaxTitle), "", nil, ""},
		{"title too long", strings.Repeat("t", MaxTitle+1), "", nil, "title"},
		{"invalid UTF-8 title", "a\xffb", "", nil, "title"},
		{"empty body", "t", "", nil, ""},
		{"largest body", "t", strings.Repeat("b", MaxBody), nil, ""},
		{"body too long", "t", strings.Repeat("b", MaxBody+1), nil, "body"},
		{"invalid UTF-8 body", "t", "\xc3", nil, "body"},
		{"empty tag", "t", "", []string{"a", " "}, "tags"},
		{"tag too long", "t", "", []string{strings.Repeat("g", MaxTag+1)}, "tags"},
		{"too many tags", "t", "", manyTags, "tags"},
		{"most tags", "t", "", manyTags[:MaxTags], ""},
	}
	st, _ := openTestStore(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := st.Create(t.Context(), tt.title, tt.body, tt.tags)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("got error %v, want none", err)
				}
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("got error %v, want a FieldError for %q", err, tt.field)
			}
			if fe.Field != tt.field {
				t.Errorf("got field %q (%v), want %q", fe.Field, fe, tt.field)
			}
		})
	}
}

func TestList(t *testing.T) {
	st, _ := openTestStore(t)
	ctx := t.Context()
	a := mustCreate(t, st, "a", "", "work")
	b := mustCreate(t, st, "b", "", "home")
	c := mustCreate(t, st, "c", "", "work", "urgent")

	got, err := st.List(ctx, "", DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{c.ID, b.ID, a.ID}, ids(got)); diff != "" {
		t.Errorf("newest first (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"work", "urgent"}, got[0].Tags); diff != "" {
		t.Errorf("tags keep their order (-want +got):\n%s", diff)
	}

	// Touching a moves it to the front.
	title := "a2"
	if _, err := st.Update(ctx, a.ID, Patch{Title: &title}); err != nil {
		t.Fatal(err)
	}
	got, err = st.List(ctx, "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{a.ID, c.ID}, ids(got)); diff != "" {
		t.Errorf("after update, limit 2 (-want +got):\n%s", diff)
	}

	got, err = st.List(ctx, "work", DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{a.ID, c.ID}, ids(got)); diff != "" {
		t.Errorf("tag work (-want +got):\n%s", diff)
	}
	got, err = st.List(ctx, "nope", DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if got == nil || len(got) != 0 {
		t.Errorf("unknown tag: got %#v, want empty non-nil", got)
	}

	for _, limit := range []int{0, -1, MaxLimit + 1} {
		var fe *FieldError
		if _, err := st.List(ctx, "", limit); !errors.As(err, &fe) || fe.Field != "limit" {
			t.Errorf("List limit %d: got %v, want a FieldError for limit", limit, err)
		}
	}
}

func TestSearch(t *testing.T) {
	st, _ := openTestStore(t)
	ctx := t.Context()
	long := strings.Repeat("lorem ipsum ", 20) + "the Quarterly REPORT is due" + strings.Repeat(" dolor sit", 20)
	inBody := mustCreate(t, st, "misc", long)
	inTitle := mustCreate(t, st, "Report draft", "nothing here")
	mustCreate(t, st, "unrelated", "shopping list")

	got, err := st.Search(ctx, "report", DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	// inTitle is also the newer note; the search below, after a newer
	// body match, shows that title matches come first.
	if diff := cmp.Diff([]int64{inTitle.ID, inBody.ID}, ids(got)); diff != "" {
		t.Errorf("search report (-want +got):\n%s", diff)
	}
	snip := got[1].Snippet
	if !strings.Contains(snip, "Quarterly REPORT is due") || !strings.HasPrefix(snip, "…") || !strings.HasSuffix(snip, "…") {
		t.Errorf("body snippet = %q, want the match with … on both sides", snip)
	}
	if len(snip) > 2*snippetContext+len("report")+2*len("…") {
		t.Errorf("body snippet is %d bytes, too long: %q", len(snip), snip)
	}
	if got[0].Snippet != "Report draft" {
		t.Errorf("title snippet = %q, want %q", got[0].Snippet, "Report draft")
	}

	newer := mustCreate(t, st, "zzz", "report in body, newest")
	got, err = st.Search(ctx, "REPORT", DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{inTitle.ID, newer.ID, inBody.ID}, ids(got)); diff != "" {
		t.Errorf("title matches first, then newest (-want +got):\n%s", diff)
	}

	got, err = st.Search(ctx, "no such text", DefaultLimit)
	if err != nil || got == nil || len(got) != 0 {
		t.Errorf("no match: got %#v, %v; want empty non-nil", got, err)
	}
	// LIKE wildcards are plain text to a substring search.
	got, err = st.Search(ctx, "%", DefaultLimit)
	if err != nil || len(got) != 0 {
		t.Errorf("search %%: got %v, %v; want no notes", ids(got), err)
	}

	for _, q := range []string{"", "   ", strings.Repeat("q", MaxQuery+1)} {
		var fe *FieldError
		if _, err := st.Search(ctx, q, DefaultLimit); !errors.As(err, &fe) || fe.Field != "query" {
			t.Errorf("Search(%.10q…): got %v, want a FieldError for query", q, err)
		}
	}
}

func TestSnippet(t *testing.T) {
	tests := []struct {
		title, body, query, want string
	}{
		{"t", "hello world", "WORLD", "hello world"},
		{"Title here", "body", "here", "Title here"},
		{"t", "body", "absent", ""},
		{"t", "a\n\tb  match  c", "match", "a b match c"},
		{"t", strings.Repeat("x", 100) + "match", "match", "…" + strings.Repeat("x", snippetContext) + "match"},
		{"t", "match" + strings.Repeat("y", 100), "match", "match" + strings.Repeat("y", snippetContext) + "…"},
	}
	for _, tt := range tests {
		if got := snippet(tt.title, tt.body, tt.query); got != tt.want {
			t.Errorf("snippet(%q, %.20q, %q) = %q, want %q", tt.title, tt.body, tt.query, got, tt.want)
		}
	}
	// Cuts never split a multi-byte rune, whatever the offset.
	for pad := range 8 {
		body := strings.Repeat("é", 50) + strings.Repeat("a", pad) + "needle" + strings.Repeat("ü", 50)
		if s := snippet("t", body, "needle"); !utf8.ValidString(s) || !strings.Contains(s, "needle") {
			t.Errorf("pad %d: snippet %q is not valid UTF-8 or lost the match", pad, s)
		}
	}
}

func TestUpdate(t *testing.T) {
	st, _ := openTestStore(t)
	ctx := t.Context()
	n := mustCreate(t, st, "title", "body", "a", "b")

	body := "new body"
	got, err := st.Update(ctx, n.ID, Patch{Body: &body})
	if err != nil {
		t.Fatal(err)
	}
	want := *n
	want.Body = body
	want.UpdatedAt = n.UpdatedAt.Add(time.Second)
	if diff := cmp.Diff(&want, got); diff != "" {
		t.Errorf("body update (-want +got):\n%s", diff)
	}

	tags := []string{}
	title := " Renamed "
	if got, err = st.Update(ctx, n.ID, Patch{Title: &title, Tags: &tags}); err != nil {
		t.Fatal(err)
	}
	if got.Title != "Renamed" || len(got.Tags) != 0 || got.Body != body {
		t.Errorf("title+tags update = %+v, want title Renamed, no tags, body kept", got)
	}
	if reread, err := st.Get(ctx, n.ID); err != nil {
		t.Fatal(err)
	} else if diff := cmp.Diff(got, reread); diff != "" {
		t.Errorf("re-read differs from Update's result (-update +get):\n%s", diff)
	}

	var fe *FieldError
	if _, err := st.Update(ctx, n.ID, Patch{}); !errors.As(err, &fe) || fe.Field != "" {
		t.Errorf("empty patch: got %v, want a FieldError for the whole input", err)
	}
	empty := ""
	if _, err := st.Update(ctx, n.ID, Patch{Title: &empty}); !errors.As(err, &fe) || fe.Field != "title" {
		t.Errorf("empty title: got %v, want a FieldError for title", err)
	}
	if _, err := st.Update(ctx, 999, Patch{Body: &body}); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown id: got %v, want ErrNotFound", err)
	}
	// A rejected update changes nothing.
	if reread, err := st.Get(ctx, n.ID); err != nil || reread.Title != "Renamed" {
		t.Errorf("after rejected updates: %+v, %v", reread, err)
	}
}

func TestDelete(t *testing.T) {
	st, _ := openTestStore(t)
	ctx := t.Context()
	a := mustCreate(t, st, "a", "", "x")
	b := mustCreate(t, st, "b", "", "x")
	if err := st.Delete(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(ctx, b.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := st.Delete(ctx, b.ID); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete: %v, want ErrNotFound", err)
	}
	var tagRows int
	if err := st.db.QueryRowContext(ctx, `SELECT count(*) FROM note_tags WHERE note_id = ?`, b.ID).Scan(&tagRows); err != nil {
		t.Fatal(err)
	}
	if tagRows != 0 {
		t.Errorf("%d tag rows left for the deleted note, want 0", tagRows)
	}
	// The deleted id is not handed out again.
	c := mustCreate(t, st, "c", "")
	if c.ID <= b.ID {
		t.Errorf("new note got id %d, want more than the deleted %d", c.ID, b.ID)
	}
	got, err := st.List(ctx, "x", DefaultLimit)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int64{a.ID}, ids(got)); diff != "" {
		t.Errorf("tag x after delete (-want +got):\n%s", diff)
	}
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "notes.db")
	ctx := t.Context()
	st, err := OpenStore(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	n := mustCreate(t, st, "kept", "across restarts", "t")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("database mode = %v, want 0600", perm)
	}

	st, err = OpenStore(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	got, err := st.Get(ctx, n.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(n, got); diff != "" {
		t.Errorf("after reopen (-want +got):\n%s", diff)
	}
}

func TestConcurrentCreates(t *testing.T) {
	st, _ := openTestStore(t)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if _, err := st.Create(context.Background(), "note", strings.Repeat("b", i), nil); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	got, err := st.List(t.Context(), "", MaxLimit)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Errorf("listed %d notes, want %d", len(got), n)
	}
}

func TestDefaultDBPath(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/x/state")
	if got, want := DefaultDBPath(), "/x/state/pcp-notes/notes.db"; got != want {
		t.Errorf("DefaultDBPath() = %q, want %q", got, want)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if got, want := DefaultDBPath(), "/home/u/.local/state/pcp-notes/notes.db"; got != want {
		t.Errorf("DefaultDBPath() without XDG_STATE_HOME = %q, want %q", got, want)
	}
}
