package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// Limits on what a note may hold. They keep one invocation's reply well
// inside the daemon's line limit and make a runaway agent's mistakes cheap.
const (
	MaxTitle = 1024    // bytes
	MaxBody  = 1 << 20 // bytes
	MaxTags  = 32
	MaxTag   = 64 // bytes
	MaxQuery = 1024
	// DefaultLimit and MaxLimit bound how many notes list and search return.
	DefaultLimit = 50
	MaxLimit     = 500
)

// snippetContext is how many bytes of text a search snippet keeps on each
// side of the match.
const snippetContext = 60

// timeFormat is how timestamps are stored: fixed width in UTC, so that
// text order is time order.
const timeFormat = "2006-01-02T15:04:05.000Z"

// ErrNotFound is returned, wrapped in a *NotFoundError, for a note id that
// does not exist (or no longer does).
var ErrNotFound = errors.New("note not found")

// NotFoundError names the id that was not found. errors.Is(err,
// ErrNotFound) matches it.
type NotFoundError struct{ ID int64 }

func (e *NotFoundError) Error() string        { return fmt.Sprintf("no note %d", e.ID) }
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// FieldError rejects an input. Field is the parameter's name as the
// manifest declares it ("title", "tags"), or "" when the input as a whole
// is wrong.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func fieldErrorf(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Note is a full note.
type Note struct {
	ID        int64     `json:"id"`
	Title     string    `json:"title"`
	Body      string    `json:"body"`
	Tags      []string  `json:"tags"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Summary is a note as list and search return it: no body, and for search
// a snippet of text around the match.
type Summary struct {
	ID        int64     `json:"id"`
	Title     string    `json:"title"`
	Tags      []string  `json:"tags"`
	UpdatedAt time.Time `json:"updated_at"`
	Snippet   string    `json:"snippet,omitempty"`
}

// Patch is a partial update; nil fields are left as they are.
type Patch struct {
	Title *string
	Body  *string
	Tags  *[]string
}

// Store keeps notes in one SQLite file. Its methods are safe for
// concurrent use.
type Store struct {
	db  *sql.DB
	now func() time.Time
}

// migrations[i] takes the schema from version i to i+1 (PRAGMA
// user_version). Append new steps; never edit old ones.
var migrations = []string{
	// Ids come from AUTOINCREMENT so that a deleted note's id is never
	// reused: an agent holding an old id must not reach a different note.
	`
CREATE TABLE notes (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	title      TEXT NOT NULL,
	body       TEXT NOT NULL,
	created_at TEXT NOT NULL,
	updated_at TEXT NOT NULL
) STRICT;
CREATE INDEX notes_updated ON notes (updated_at DESC, id DESC);

CREATE TABLE note_tags (
	note_id INTEGER NOT NULL REFERENCES notes (id) ON DELETE CASCADE,
	tag     TEXT NOT NULL,
	pos     INTEGER NOT NULL,
	PRIMARY KEY (note_id, tag)
) STRICT;
CREATE INDEX note_tags_tag ON note_tags (tag);
`,
}

// DefaultDBPath is $XDG_STATE_HOME/pcp-notes/notes.db, falling back to
// ~/.local/state.
func DefaultDBPath() string {
	state := os.Getenv("XDG_STATE_HOME")
	if state == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		state = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(state, "pcp-notes", "notes.db")
}

// OpenStore opens (creating if needed) the notes database at path.
func OpenStore(ctx context.Context, path string) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("notes: database %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("notes: database %s: %w", abs, err)
	}
	// Create the file ourselves: SQLite would use the umask, and notes are
	// private.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("notes: database %s: %w", abs, err)
	}
	f.Close()

	q := url.Values{
		"_pragma": {"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(NORMAL)", "foreign_keys(1)"},
		"_txlock": {"immediate"},
	}
	dsn := (&url.URL{Scheme: "file", OmitHost: true, Path: filepath.ToSlash(abs), RawQuery: q.Encode()}).String()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("notes: database %s: %w", abs, err)
	}
	// One connection serialises this process's writes, so a transaction
	// never waits on another of ours; busy_timeout covers other processes.
	db.SetMaxOpenConns(1)
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("notes: database %s: %w", abs, err)
	}
	return &Store{db: db, now: time.Now}, nil
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

func migrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("schema version %d is newer than this program's %d", v, len(migrations))
	}
	for ; v < len(migrations); v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("migrating schema to version %d: %w", v+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", v)); err != nil {
		return err
	}
	return tx.Commit()
}

// Create adds a note and returns it.
func (s *Store) Create(ctx context.Context, title, body string, tags []string) (*Note, error) {
	title, err := checkTitle(title)
	if err != nil {
		return nil, err
	}
	if err := checkBody(body); err != nil {
		return nil, err
	}
	if tags, err = checkTags(tags); err != nil {
		return nil, err
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	ts := now.Format(timeFormat)

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `INSERT INTO notes (title, body, created_at, updated_at) VALUES (?, ?, ?, ?)`, title, body, ts, ts)
	if err != nil {
		return nil, fmt.Errorf("creating note: %w", err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, fmt.Errorf("creating note: %w", err)
	}
	if err := setTags(ctx, tx, id, tags); err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("creating note: %w", err)
	}
	return &Note{ID: id, Title: title, Body: body, Tags: tags, CreatedAt: now, UpdatedAt: now}, nil
}

// Get returns the note id, or a *NotFoundError.
func (s *Store) Get(ctx context.Context, id int64) (*Note, error) {
	return get(ctx, s.db, id)
}

// querier is what get needs: a *sql.DB or a *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// tagsColumn selects a note's tags, in the order they were given, as a
// JSON array.
const tagsColumn = `(SELECT json_group_array(tag) FROM (SELECT tag FROM note_tags WHERE note_id = n.id ORDER BY pos))`

func get(ctx context.Context, q querier, id int64) (*Note, error) {
	var (
		n                    Note
		tags                 string
		createdAt, updatedAt string
	)
	err := q.QueryRowContext(ctx, `SELECT n.id, n.title, n.body, `+tagsColumn+`, n.created_at, n.updated_at FROM notes n WHERE n.id = ?`, id).
		Scan(&n.ID, &n.Title, &n.Body, &tags, &createdAt, &updatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, &NotFoundError{ID: id}
	}
	if err != nil {
		return nil, fmt.Errorf("reading note %d: %w", id, err)
	}
	if n.Tags, err = decodeTags(tags); err != nil {
		return nil, fmt.Errorf("reading note %d: %w", id, err)
	}
	if n.CreatedAt, err = parseTime(createdAt); err != nil {
		return nil, fmt.Errorf("reading note %d: %w", id, err)
	}
	if n.UpdatedAt, err = parseTime(updatedAt); err != nil {
		return nil, fmt.Errorf("reading note %d: %w", id, err)
	}
	return &n, nil
}

// List returns up to limit notes, most recently updated first, only those
// tagged tag when tag is not empty.
func (s *Store) List(ctx context.Context, tag string, limit int) ([]Summary, error) {
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	query := `SELECT n.id, n.title, ` + tagsColumn + `, n.updated_at FROM notes n`
	args := []any{}
	if tag != "" {
		query += ` WHERE EXISTS (SELECT 1 FROM note_tags t WHERE t.note_id = n.id AND t.tag = ?)`
		args = append(args, tag)
	}
	query += ` ORDER BY n.updated_at DESC, n.id DESC LIMIT ?`
	args = append(args, limit)
	return s.summaries(ctx, query, args, nil)
}

// Search returns up to limit notes whose title or body contains query,
// ignoring the case of ASCII letters; title matches first, then most
// recently updated first. Each carries a snippet around the first match.
func (s *Store) Search(ctx context.Context, query string, limit int) ([]Summary, error) {
	if err := checkQuery(query); err != nil {
		return nil, err
	}
	if err := checkLimit(limit); err != nil {
		return nil, err
	}
	// SQLite's lower() folds only ASCII; lowerASCII below matches it, so
	// the snippet finds exactly what the query found.
	q := `SELECT n.id, n.title, ` + tagsColumn + `, n.updated_at, n.body FROM notes n
		WHERE instr(lower(n.title), lower(?1)) > 0 OR instr(lower(n.body), lower(?1)) > 0
		ORDER BY instr(lower(n.title), lower(?1)) = 0, n.updated_at DESC, n.id DESC LIMIT ?2`
	return s.summaries(ctx, q, []any{query, limit}, func(sum *Summary, body string) {
		sum.Snippet = snippet(sum.Title, body, query)
	})
}

// summaries runs a query selecting id, title, tags, updated_at and, when
// withBody is not nil, body.
func (s *Store) summaries(ctx context.Context, query string, args []any, withBody func(*Summary, string)) ([]Summary, error) {
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("listing notes: %w", err)
	}
	defer rows.Close()
	out := []Summary{}
	for rows.Next() {
		var (
			sum           Summary
			tags, updated string
			body          string
		)
		dst := []any{&sum.ID, &sum.Title, &tags, &updated}
		if withBody != nil {
			dst = append(dst, &body)
		}
		if err := rows.Scan(dst...); err != nil {
			return nil, fmt.Errorf("listing notes: %w", err)
		}
		if sum.Tags, err = decodeTags(tags); err != nil {
			return nil, fmt.Errorf("listing notes: note %d: %w", sum.ID, err)
		}
		if sum.UpdatedAt, err = parseTime(updated); err != nil {
			return nil, fmt.Errorf("listing notes: note %d: %w", sum.ID, err)
		}
		if withBody != nil {
			withBody(&sum, body)
		}
		out = append(out, sum)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("listing notes: %w", err)
	}
	return out, nil
}

// Update applies p to note id and returns the result. An empty patch is
// an error: an update that changes nothing is a caller's mistake.
func (s *Store) Update(ctx context.Context, id int64, p Patch) (*Note, error) {
	if p.Title == nil && p.Body == nil && p.Tags == nil {
		return nil, errNothingToUpdate()
	}
	var sets []string
	var args []any
	if p.Title != nil {
		title, err := checkTitle(*p.Title)
		if err != nil {
			return nil, err
		}
		sets, args = append(sets, "title = ?"), append(args, title)
	}
	if p.Body != nil {
		if err := checkBody(*p.Body); err != nil {
			return nil, err
		}
		sets, args = append(sets, "body = ?"), append(args, *p.Body)
	}
	var tags []string
	if p.Tags != nil {
		var err error
		if tags, err = checkTags(*p.Tags); err != nil {
			return nil, err
		}
	}
	ts := s.now().UTC().Truncate(time.Millisecond).Format(timeFormat)
	sets, args = append(sets, "updated_at = ?"), append(args, ts, id)

	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `UPDATE notes SET `+strings.Join(sets, ", ")+` WHERE id = ?`, args...)
	if err != nil {
		return nil, fmt.Errorf("updating note %d: %w", id, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return nil, fmt.Errorf("updating note %d: %w", id, err)
	} else if n == 0 {
		return nil, &NotFoundError{ID: id}
	}
	if p.Tags != nil {
		if _, err := tx.ExecContext(ctx, `DELETE FROM note_tags WHERE note_id = ?`, id); err != nil {
			return nil, fmt.Errorf("updating note %d: %w", id, err)
		}
		if err := setTags(ctx, tx, id, tags); err != nil {
			return nil, err
		}
	}
	n, err := get(ctx, tx, id)
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("updating note %d: %w", id, err)
	}
	return n, nil
}

// Count returns how many notes there are.
func (s *Store) Count(ctx context.Context) (int64, error) {
	var n int64
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM notes`).Scan(&n); err != nil {
		return 0, fmt.Errorf("counting notes: %w", err)
	}
	return n, nil
}

// Delete removes note id, or returns a *NotFoundError.
func (s *Store) Delete(ctx context.Context, id int64) error {
	res, err := s.db.ExecContext(ctx, `DELETE FROM notes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("deleting note %d: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("deleting note %d: %w", id, err)
	}
	if n == 0 {
		return &NotFoundError{ID: id}
	}
	return nil
}

func setTags(ctx context.Context, tx *sql.Tx, id int64, tags []string) error {
	for i, t := range tags {
		if _, err := tx.ExecContext(ctx, `INSERT INTO note_tags (note_id, tag, pos) VALUES (?, ?, ?)`, id, t, i); err != nil {
			return fmt.Errorf("tagging note %d: %w", id, err)
		}
	}
	return nil
}

// checkNote applies the rules of Create and Update to the fields given,
// skipping nil ones, in the order those methods apply them; it changes
// nothing.
func checkNote(title, body *string, tags *[]string) error {
	if title != nil {
		if _, err := checkTitle(*title); err != nil {
			return err
		}
	}
	if body != nil {
		if err := checkBody(*body); err != nil {
			return err
		}
	}
	if tags != nil {
		if _, err := checkTags(*tags); err != nil {
			return err
		}
	}
	return nil
}

// errNothingToUpdate refuses an empty Patch.
func errNothingToUpdate() error {
	return fieldErrorf("", "nothing to update: give title, body or tags")
}

func checkQuery(query string) error {
	if strings.TrimSpace(query) == "" {
		return fieldErrorf("query", "must not be empty")
	}
	if len(query) > MaxQuery {
		return fieldErrorf("query", "is %d bytes, want at most %d", len(query), MaxQuery)
	}
	return nil
}

// checkTitle returns the title with surrounding space removed.
func checkTitle(title string) (string, error) {
	title = strings.TrimSpace(title)
	switch {
	case title == "":
		return "", fieldErrorf("title", "must not be empty")
	case len(title) > MaxTitle:
		return "", fieldErrorf("title", "is %d bytes, want at most %d", len(title), MaxTitle)
	case !utf8.ValidString(title):
		return "", fieldErrorf("title", "is not valid UTF-8")
	case strings.ContainsAny(title, "\r\n"):
		return "", fieldErrorf("title", "must be a single line")
	}
	return title, nil
}

func checkBody(body string) error {
	switch {
	case len(body) > MaxBody:
		return fieldErrorf("body", "is %d bytes, want at most %d (1 MiB)", len(body), MaxBody)
	case !utf8.ValidString(body):
		return fieldErrorf("body", "is not valid UTF-8")
	}
	return nil
}

// checkTags returns the tags trimmed, with duplicates removed, in the
// order given; never nil.
func checkTags(tags []string) ([]string, error) {
	if len(tags) > MaxTags {
		return nil, fieldErrorf("tags", "has %d tags, want at most %d", len(tags), MaxTags)
	}
	out := make([]string, 0, len(tags))
	seen := make(map[string]bool, len(tags))
	for i, t := range tags {
		t = strings.TrimSpace(t)
		switch {
		case t == "":
			return nil, fieldErrorf("tags", "tag %d is empty", i)
		case len(t) > MaxTag:
			return nil, fieldErrorf("tags", "tag %d is %d bytes, want at most %d", i, len(t), MaxTag)
		case !utf8.ValidString(t):
			return nil, fieldErrorf("tags", "tag %d is not valid UTF-8", i)
		}
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out, nil
}

func checkLimit(limit int) error {
	if limit < 1 || limit > MaxLimit {
		return fieldErrorf("limit", "must be between 1 and %d, got %d", MaxLimit, limit)
	}
	return nil
}

func decodeTags(s string) ([]string, error) {
	tags := []string{}
	if err := json.Unmarshal([]byte(s), &tags); err != nil {
		return nil, fmt.Errorf("tags: %w", err)
	}
	return tags, nil
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeFormat, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp %q: %w", s, err)
	}
	return t, nil
}

// snippet is the text around the first match of query in body, or in
// title when the body does not contain it, on one line, with "…" where it
// was cut.
func snippet(title, body, query string) string {
	text := body
	i := strings.Index(lowerASCII(body), lowerASCII(query))
	if i < 0 {
		text = title
		if i = strings.Index(lowerASCII(title), lowerASCII(query)); i < 0 {
			return ""
		}
	}
	start, end := i-snippetContext, i+len(query)+snippetContext
	prefix, suffix := "…", "…"
	if start <= 0 {
		start, prefix = 0, ""
	}
	if end >= len(text) {
		end, suffix = len(text), ""
	}
	// Move the cuts onto rune boundaries, outward for the start, inward
	// for the end, so the snippet stays valid UTF-8.
	for start > 0 && !utf8.RuneStart(text[start]) {
		start--
	}
	for end < len(text) && !utf8.RuneStart(text[end]) {
		end--
	}
	return prefix + strings.Join(strings.Fields(text[start:end]), " ") + suffix
}

// lowerASCII lowers ASCII letters only, as SQLite's lower() does; byte
// offsets are unchanged.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
