// Package store keeps PCP's durable state: the audit log, an append-only
// file of checksummed records with a Merkle tree over them
// (internal/tlog; its hash chain is defined by internal/audit), and one
// SQLite file with registered apps, revocations, deferred jobs, the
// bounded event journal and the audit log's index. docs/audit.md
// describes the log.
//
// # Writes: the appender and the writer, group commit
//
// Audit appends are written by the appender: the caller that finds no
// write in progress writes everything queued with one write(2) (group
// commit with a leader) and the others wait for it; the appender gives
// each entry its seq and hashes in write order, so the chain is
// sequential without any lock held across I/O by callers. Callers are
// released once their group is written.
//
// Everything else goes through the writer goroutine, which owns the
// database's write connection: it drains what is queued (state changes
// such as SaveApp, whose callers wait, the audit index rows of written
// entries, and journal events) into one transaction and commits it. Index
// rows and events wait for a batch (see pendingLocked), so no database
// write is on an audit append's path. If a batch fails, the writer rolls
// it back and retries each part in its own transaction, so one bad change
// fails only its own caller.
//
// Durability: the log is not fsynced unless WithAuditSync asks; the
// database is in WAL mode with synchronous=NORMAL. A written entry and a
// committed change survive the process being killed; after a power loss
// or an OS crash the newest may be lost, and Open repairs what it can
// (see Recovery).
//
// # Reads
//
// Reads use a separate pool of read-only connections and see the latest
// committed state of the file, including changes other processes made;
// audit reads first wait for the index to hold every entry written. The
// in-memory store (OpenMemory) has a single connection shared by the
// writer and readers, and its log in a temporary directory.
//
// Only one Store may have a state directory open at a time: the log is
// flocked by the process appending to it.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/tlog"
)

// DefaultJournalLimit is how many events the journal keeps by default.
const DefaultJournalLimit = 10000

// busyTimeoutMS is how long a statement waits for a lock another
// connection holds (a reader checkpointing, pcpctl, an external tool).
const busyTimeoutMS = 5000

// ErrClosed is returned by operations on a closed Store.
var ErrClosed = errors.New("store: closed")

// Option configures Open and OpenMemory.
type Option func(*options)

type options struct {
	journalLimit int
	auditSync    bool
	segmentSize  int64
}

// WithAuditSync makes every group of audit appends fsync the log before
// its callers are released, so that an acknowledged entry survives a
// power loss too; without it (the default) it survives the process being
// killed, as the database's synchronous=NORMAL does.
func WithAuditSync(on bool) Option { return func(o *options) { o.auditSync = on } }

// withSegmentSize sets the audit log's segment size (tests).
func withSegmentSize(n int64) Option { return func(o *options) { o.segmentSize = n } }

// WithJournalLimit sets how many events the journal keeps; older ones are
// deleted as new ones arrive. n <= 0 selects DefaultJournalLimit.
func WithJournalLimit(n int) Option {
	return func(o *options) {
		if n > 0 {
			o.journalLimit = n
		}
	}
}

// Store is the daemon's durable state. Its methods are safe for concurrent
// use.
//
// Goroutines: Open starts exactly one, the writer (writer.run). Close stops
// it after it has committed everything queued, and waits for it.
type Store struct {
	// wdb is the write connection (a pool limited to one). After Open
	// returns it is used only by the writer goroutine; in memory mode
	// readers share it too (rdb == wdb).
	wdb *sql.DB
	// rdb is the read pool; safe for concurrent use.
	rdb *sql.DB

	journalLimit int
	// journalLen is the number of committed rows in the events table;
	// stored by the writer after each commit, read by anyone.
	journalLen atomic.Int64
	// journalHeld counts the events the journal holds once every accepted
	// event is committed: the rows at start plus each AppendEvent, capped
	// at journalLimit. It moves with AppendEvent, so it is exact at once.
	journalHeld atomic.Int64

	w *writer
	a *appender
	// key signs checkpoints of the audit log.
	key *tlog.Key
	// logDir is the audit log's directory; tmpDir, when set, is removed
	// by Close (OpenMemory).
	logDir, tmpDir string
	// recovery is what opening the audit log found and did.
	recovery Recovery

	// mu guards the fields below. It is never held across I/O.
	mu sync.Mutex
	// appends holds audit appends the appender has not taken yet; ops the
	// changes (and Flushes) the writer has not taken yet, in arrival order.
	appends, ops []*request
	// index holds written audit entries whose index rows the writer has
	// not taken yet.
	index []api.AuditEntry
	// indexedSeq is the newest entry in the index; indexErr is why the
	// last write of index rows failed (nil once one succeeds).
	indexedSeq int64
	indexErr   error
	// events holds journal events the writer has not taken yet, at most
	// journalLimit of them (older pending events would be trimmed anyway).
	events []api.Event
	// closing is set by Close; no new work is queued after it.
	closing bool
	// due is set when the oldest pending index row or event has waited
	// pendingDelay, or pendingBatch are waiting; the writer then writes
	// them even without other work to share the transaction with.
	// timerArmed says a timer will set it.
	due, timerArmed bool
	// head is the last written audit entry; the appender sets it after
	// each group.
	head chainHead

	// wake has capacity one; a send tells the writer there is work (or
	// that closing is set). Senders never block.
	wake chan struct{}
	// writerDone is closed when the writer goroutine returns.
	writerDone chan struct{}
	// awake and appenderDone are the appender goroutine's wake and done.
	awake        chan struct{}
	appenderDone chan struct{}

	// ver is the state of audit verification (auditlog.go).
	ver verification

	closeOnce sync.Once
	closeErr  error
}

// chainHead is the seq and hash of the newest committed audit entry.
type chainHead struct {
	seq  int64
	hash []byte // nil before the first entry
}

// Open opens (creating if needed) the state database at path, migrates its
// schema, and starts the writer. The parent directory is created with mode
// 0700 and a new file with mode 0600.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	// SQLite would create the file with the umask's permissions; the log
	// is the user's business only.
	f, err := os.OpenFile(abs, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	f.Close()

	wdb, err := sql.Open("sqlite", fileDSN(abs, url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS),
			"journal_mode(WAL)",
			"synchronous(NORMAL)",
			"foreign_keys(1)",
		},
		"_txlock": {"immediate"},
	}))
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", abs, err)
	}
	wdb.SetMaxOpenConns(1)
	var mode string
	if err := wdb.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("store: %s: %w", abs, err)
	}
	if mode != "wal" {
		wdb.Close()
		return nil, fmt.Errorf("store: %s: journal mode is %q, want wal", abs, mode)
	}
	if err := migrate(ctx, wdb); err != nil {
		wdb.Close()
		return nil, fmt.Errorf("store: %s: %w", abs, err)
	}
	rdb, err := sql.Open("sqlite", fileDSN(abs, url.Values{
		"_pragma": {
			fmt.Sprintf("busy_timeout(%d)", busyTimeoutMS),
			"foreign_keys(1)",
			"query_only(1)",
		},
	}))
	if err != nil {
		wdb.Close()
		return nil, fmt.Errorf("store: %s: %w", abs, err)
	}
	rdb.SetMaxOpenConns(8)
	rdb.SetMaxIdleConns(8)
	s, err := start(ctx, wdb, rdb, AuditDir(abs), KeyFile(abs), opts)
	if err != nil {
		rdb.Close()
		wdb.Close()
		return nil, fmt.Errorf("store: %s: %w", abs, err)
	}
	return s, nil
}

// OpenMemory opens an empty store held in memory, for tests. It behaves
// as a file store does except that nothing outlives Close: its audit log
// is in a temporary directory that Close removes.
func OpenMemory(ctx context.Context, opts ...Option) (*Store, error) {
	// Every connection to ":memory:" is a database of its own, so the
	// pool is limited to one connection, shared by writer and readers,
	// and that connection is never closed while the Store is open.
	db, err := sql.Open("sqlite", ":memory:?_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("store: memory: %w", err)
	}
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	db.SetConnMaxIdleTime(0)
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("store: memory: %w", err)
	}
	dir, err := os.MkdirTemp("", "pcp-audit-")
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("store: memory: %w", err)
	}
	s, err := start(ctx, db, db, filepath.Join(dir, "audit"), filepath.Join(dir, "audit.key"), opts)
	if err != nil {
		db.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("store: memory: %w", err)
	}
	s.tmpDir = dir
	return s, nil
}

// fileDSN returns the driver's URI for the file at the absolute path abs.
// The path is escaped, so names holding '?', '#' or '%' are safe.
func fileDSN(abs string, q url.Values) string {
	u := url.URL{Scheme: "file", OmitHost: true, Path: filepath.ToSlash(abs), RawQuery: q.Encode()}
	return u.String()
}

// AuditDir is the directory of the audit log that belongs to the state
// database at dbPath: "audit" beside it.
func AuditDir(dbPath string) string { return filepath.Join(filepath.Dir(dbPath), "audit") }

// KeyFile is the file of the key that signs the audit log's checkpoints
// for the state database at dbPath: "audit.key" beside it. It is kept
// outside the log's directory so that moving a damaged log aside keeps
// the log's identity.
func KeyFile(dbPath string) string { return filepath.Join(filepath.Dir(dbPath), "audit.key") }

// start opens the audit log, reconciles its index with it, loads the
// state the writer needs and starts the appender and the writer.
func start(ctx context.Context, wdb, rdb *sql.DB, logDir, keyPath string, opts []Option) (*Store, error) {
	o := options{journalLimit: DefaultJournalLimit}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Store{
		wdb:          wdb,
		rdb:          rdb,
		journalLimit: o.journalLimit,
		logDir:       logDir,
		wake:         make(chan struct{}, 1),
		writerDone:   make(chan struct{}),
		awake:        make(chan struct{}, 1),
		appenderDone: make(chan struct{}),
	}

	// Trim first, in case the limit was lowered since the last run.
	if _, err := wdb.ExecContext(ctx, trimEventsSQL, s.journalLimit-1); err != nil {
		return nil, fmt.Errorf("trimming event journal: %w", err)
	}
	var n int64
	if err := wdb.QueryRowContext(ctx, `SELECT count(*) FROM events`).Scan(&n); err != nil {
		return nil, fmt.Errorf("counting event journal: %w", err)
	}
	s.journalLen.Store(n)
	s.journalHeld.Store(n)

	w, err := newWriter(ctx, s, n)
	if err != nil {
		return nil, err
	}
	s.w = w
	s.a = &appender{s: s}
	if err := s.openLog(ctx, o, keyPath); err != nil {
		w.close()
		if s.a.log != nil {
			s.a.log.Close()
		}
		return nil, err
	}
	go s.a.run()
	go w.run()
	return s, nil
}

// Close writes everything queued, stops the appender and the writer and
// closes the log and the database. Later calls return the first call's
// result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.pokeAppender()
		s.poke()
		<-s.appenderDone
		<-s.writerDone
		s.w.close()
		var errs []error
		errs = append(errs, s.a.log.Close())
		if s.rdb != s.wdb {
			errs = append(errs, s.rdb.Close())
		}
		errs = append(errs, s.wdb.Close())
		if s.tmpDir != "" {
			errs = append(errs, os.RemoveAll(s.tmpDir))
		}
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// poke wakes the writer without blocking.
func (s *Store) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pokeAppender wakes the appender goroutine without blocking.
func (s *Store) pokeAppender() {
	select {
	case s.awake <- struct{}{}:
	default:
	}
}

// enqueue hands r to the appender (an audit append) or the writer; it
// fails once Close has begun.
func (s *Store) enqueue(r *request) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return ErrClosed
	}
	if r.rec != nil {
		s.appends = append(s.appends, r)
		s.mu.Unlock()
		s.a.lead()
		return nil
	}
	s.ops = append(s.ops, r)
	s.mu.Unlock()
	s.poke()
	return nil
}

// do runs op in the writer's next transaction and waits for the commit.
// If ctx ends first do returns ctx.Err(), and op may still run and commit.
func (s *Store) do(ctx context.Context, op func(context.Context, *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r := newRequest()
	r.op = op
	if err := s.enqueue(r); err != nil {
		return err
	}
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Flush waits until everything queued before the call is committed to
// the database: changes, events from AppendEvent, and the index rows of
// the audit entries written so far.
func (s *Store) Flush(ctx context.Context) error {
	return s.do(ctx, func(context.Context, *sql.Tx) error { return nil })
}

// formatTime is how every timestamp column stores time: the audit
// layout, UTC with nine fractional digits, so text order is time order.
func formatTime(t time.Time) string { return t.UTC().Format(audit.TimeFormat) }

func parseTime(col, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: column %s: %w", col, err)
	}
	return t, nil
}
