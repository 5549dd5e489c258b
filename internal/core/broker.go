// Package core is the PCP broker: the registry of apps and capabilities,
// the invocation pipeline, adapters, event subscriptions, revocation and
// the audit trail. It is the spec's in-process transport: a typed Go API
// that every protocol face translates onto. No face holds a business rule.
//
// Every method takes the caller's *Session from the context (WithSession);
// a call without one acts as an anonymous agent with the least privilege.
//
// Every invocation, whichever face it came from (invoke.capability,
// spec 001's ExecuteRequest, a queued job), runs one pipeline: the audit
// gate and the connection's limit, resolve the owner, the app's limit,
// parameters and the trust level (confirmation, deferral), execute under
// the capability's timeout, audit (refusals in aggregate), publish. The
// execution step is spec 001's dispatch, in this order (see dispatch.go):
// in-process services; the system and compositor domains through the
// PlatformAdapter; an app's native channel (a Tier 1 socket or a JSON-RPC
// connection serving it); else the AccessibilityAdapters (the AT-SPI2
// path), by priority. The audit entry of each invocation names the route.
//
// Concurrency: Broker's methods are safe for concurrent use. b.mu guards
// the registry (apps, caps, revoked, adapters, access, sessions, subs). b.evMu
// serialises event publication so sequence numbers reach every subscriber
// in order. b.confMu guards confirmations, b.jobMu queued jobs, a
// Session's mu its own fields. Lock order: b.mu before b.evMu, b.confMu
// and Session.mu; b.prompter.mu (the prompter's calls, prompt.go) before
// b.confMu; b.jobMu and the limiters' lock are leaves; the audit gate is an
// atomic. Providers,
// adapters, a connection's roles (Endpoint) and store calls that wait for
// a commit are never called while holding any of them (Journal.AppendEvent,
// which only queues, is called under b.evMu so the journal keeps sequence
// order).
//
// The core speaks Go types only: a connection declares the typed roles it
// offers when its session opens (Endpoint: an app channel, an adapter, an
// event sink), and each face encodes them in its own wire format.
package core

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/manifest"
	"github.com/pcp-dev/pcp/internal/policy"
	"github.com/pcp-dev/pcp/internal/stored"
)

// Version is the daemon's version, reported by health.check.
const Version = api.Version

// DefaultTimeout bounds one execution unless the manifest says otherwise.
const DefaultTimeout = 30 * time.Second

// The broker's persistence, one small interface per part of the core
// that uses it; *store.Store implements all four. Methods may be called
// concurrently. Those that take a context return once their write is
// committed (or their read done); AppendEvent only queues.

// AppStore keeps registered apps and revocations (the registry).
type AppStore interface {
	SaveApp(ctx context.Context, r stored.App) error
	DeleteApp(ctx context.Context, appID string) error
	LoadApps(ctx context.Context) ([]stored.App, error)
	Revoke(ctx context.Context, appID, reason string, at time.Time) error
	Allow(ctx context.Context, appID string) (wasRevoked bool, err error)
	Revocations(ctx context.Context) ([]stored.Revocation, error)
}

// AuditLog is the hash-chained audit log with its Merkle tree.
type AuditLog interface {
	AppendAudit(ctx context.Context, r audit.Record) (api.AuditEntry, error)
	AuditBefore(ctx context.Context, before int64, n int) ([]api.AuditEntry, error)
	VerifyAudit(ctx context.Context) (api.AuditVerifyResult, error)
	VerifyAuditIncremental(ctx context.Context) (api.AuditVerifyResult, error)
	AuditCheckpoint(ctx context.Context) (api.AuditCheckpointResult, error)
	AuditProve(ctx context.Context, seq int64) (api.AuditProveResult, error)
	AuditConsistency(ctx context.Context, checkpoint string) (api.AuditConsistencyResult, error)
}

// Journal is the bounded event journal. AppendEvent is called under
// b.evMu, so it must not wait for I/O.
type Journal interface {
	AppendEvent(ev api.Event)
	EventsBefore(ctx context.Context, before int64, limit int) ([]api.Event, error)
	JournalLength() int64
	LastEventSeq(ctx context.Context) (int64, error)
}

// JobStore keeps deferred jobs.
type JobStore interface {
	SaveJob(ctx context.Context, j stored.Job) error
	JobsBefore(ctx context.Context, before string, limit int) ([]stored.Job, error)
	Job(ctx context.Context, id string) (stored.Job, bool, error)
	InterruptJobs(ctx context.Context, now time.Time, reason string) ([]stored.Job, error)
}

// stores holds the broker's persistence under one field, so that each
// part of the broker reads b.store.X whichever interface X belongs to.
type stores struct {
	AppStore
	AuditLog
	Journal
	JobStore
}

// Config configures a Broker.
type Config struct {
	// Apps, Audit, Journal and Jobs are the broker's persistence; all
	// are required.
	Apps    AppStore
	Audit   AuditLog
	Journal Journal
	Jobs    JobStore
	// TrustDir holds trusted publisher keys; it is read at each
	// registration so a key dropped in takes effect without a restart.
	TrustDir string
	// AllowUnsigned accepts manifests with an empty signature. A present
	// but invalid signature is refused all the same.
	AllowUnsigned bool
	// SessionID is reported by query.session_context; empty means
	// $XDG_SESSION_ID or a random id.
	SessionID string
	// SubscriberQueue bounds each subscription's queue; 0 means 256.
	SubscriberQueue int
	Logger          *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// NewID makes subscription and session ids; nil means a counter with
	// a random suffix. Tests make them deterministic.
	NewID func(prefix string) string
	// RateLimits bound invocations; nil means DefaultRateLimits.
	RateLimits *RateLimits
	// LivenessInterval is how often a connection serving an app is asked
	// health.check; 0 means DefaultLivenessInterval, negative disables
	// the checks. LivenessTimeout bounds the wait for the answer; 0 means
	// DefaultLivenessTimeout.
	LivenessInterval, LivenessTimeout time.Duration
	// ConfirmationTTL is how long a confirmation waits for the user and
	// an approval for its use; 0 means DefaultConfirmationTTL.
	ConfirmationTTL time.Duration
	// Policy is the user's policy in force at start; nil means the
	// built-in defaults. ReloadPolicy rereads its file.
	Policy *policy.Policy
	// AfterFunc runs f after d and returns a function that cancels it;
	// nil means time.AfterFunc. Tests pass a controllable clock's.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
}

// Broker is the PCP core.
type Broker struct {
	cfg     Config
	store   stores
	log     *slog.Logger
	now     func() time.Time
	started time.Time
	session string

	mu       sync.RWMutex
	apps     map[string]*appEntry // by app id
	caps     map[string]*capEntry // by capability id
	revoked  map[string]stored.Revocation
	adapters []*adapterEntry
	// access are the accessibility adapters in the order they are asked.
	// The slice is replaced, never modified in place, so a copy of its
	// header taken under b.mu stays valid after unlocking.
	access []*accessEntry
	// platform is the platform adapter, nil when none.
	platform PlatformAdapter
	// appSockets opens Tier 1 per-app sockets; nil when not offered.
	appSockets AppSocketOpener
	sessions   map[string]*Session
	subs       map[string]*subscription
	closed     bool

	evMu   sync.Mutex
	evSeq  int64
	nextID atomic.Int64

	limits *limiters
	// baseLimits are the limits before the policy file: Config.RateLimits
	// or the defaults.
	baseLimits RateLimits
	// pol is the policy in force; swapped whole on reload.
	pol atomic.Pointer[policy.Policy]

	// confMu guards confs and the confirmations in it.
	confMu sync.Mutex
	confs  map[string]*confirmation
	// jobMu guards jobs (the queued and running ones) and their fields.
	jobMu sync.Mutex
	jobs  map[string]*job

	// gate refuses every action once an audit append has failed.
	gate auditGate

	// agents are the contained agents whose sockets are open (agents.go).
	agents agentTable
	// prompter shows pending confirmations to the user (prompt.go).
	prompter promptSlot
	// dashboard mints the web dashboard's login URLs (dashboard.go).
	dashboard atomic.Pointer[dashboardSlot]
}

// New loads persisted state and returns a running broker.
func New(ctx context.Context, cfg Config) (*Broker, error) {
	switch {
	case cfg.Apps == nil:
		return nil, fmt.Errorf("core: Config.Apps is required")
	case cfg.Audit == nil:
		return nil, fmt.Errorf("core: Config.Audit is required")
	case cfg.Journal == nil:
		return nil, fmt.Errorf("core: Config.Journal is required")
	case cfg.Jobs == nil:
		return nil, fmt.Errorf("core: Config.Jobs is required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LivenessInterval == 0 {
		cfg.LivenessInterval = DefaultLivenessInterval
	}
	if cfg.LivenessTimeout <= 0 {
		cfg.LivenessTimeout = DefaultLivenessTimeout
	}
	if cfg.SubscriberQueue <= 0 {
		cfg.SubscriberQueue = 256
	}
	b := &Broker{
		cfg:      cfg,
		store:    stores{cfg.Apps, cfg.Audit, cfg.Journal, cfg.Jobs},
		log:      cfg.Logger,
		now:      cfg.Now,
		apps:     make(map[string]*appEntry),
		caps:     make(map[string]*capEntry),
		revoked:  make(map[string]stored.Revocation),
		sessions: make(map[string]*Session),
		subs:     make(map[string]*subscription),
		confs:    make(map[string]*confirmation),
		jobs:     make(map[string]*job),
	}
	rl := DefaultRateLimits
	if cfg.RateLimits != nil {
		rl = *cfg.RateLimits
	}
	b.baseLimits = rl
	b.limits = newLimiters(rl)
	if cfg.Policy == nil {
		cfg.Policy = policy.Default()
	}
	b.setPolicy(cfg.Policy)
	b.started = b.now()
	b.session = cfg.SessionID
	if b.session == "" {
		b.session = os.Getenv("XDG_SESSION_ID")
	}
	if b.session == "" {
		b.session = "pcp-" + randomHex(6)
	}
	seq, err := b.store.LastEventSeq(ctx)
	if err != nil {
		return nil, fmt.Errorf("core: reading the event journal: %w", err)
	}
	b.evSeq = seq
	revs, err := b.store.Revocations(ctx)
	if err != nil {
		return nil, fmt.Errorf("core: loading revocations: %w", err)
	}
	for _, r := range revs {
		b.revoked[r.AppID] = r
	}
	if err := b.recoverJobs(ctx); err != nil {
		return nil, fmt.Errorf("core: recovering jobs: %w", err)
	}
	recs, err := b.store.LoadApps(ctx)
	if err != nil {
		return nil, fmt.Errorf("core: loading manifests: %w", err)
	}
	for _, r := range recs {
		m, err := manifest.Parse(r.AppID, r.Manifest)
		if err != nil {
			b.log.Warn("stored manifest no longer valid; skipped", "app_id", r.AppID, "err", err)
			continue
		}
		if _, gone := b.revoked[r.AppID]; gone {
			continue
		}
		a := &appEntry{id: r.AppID, manifest: m, raw: r.Manifest, publisher: r.Publisher, signed: r.Signed}
		b.indexAppLocked(a)
	}
	return b, nil
}

func (b *Broker) afterFunc(d time.Duration, f func()) func() bool {
	if b.cfg.AfterFunc != nil {
		return b.cfg.AfterFunc(d, f)
	}
	return time.AfterFunc(d, f).Stop
}

func randomHex(n int) string {
	buf := make([]byte, n)
	rand.Read(buf)
	return hex.EncodeToString(buf)
}

func (b *Broker) newID(prefix string) string {
	if b.cfg.NewID != nil {
		return b.cfg.NewID(prefix)
	}
	return fmt.Sprintf("%s-%d%s", prefix, b.nextID.Add(1), randomHex(3))
}

// Close ends every session and subscription. The store is the caller's to
// close afterwards.
func (b *Broker) Close() {
	b.mu.Lock()
	b.closed = true
	sessions := make([]*Session, 0, len(b.sessions))
	for _, s := range b.sessions {
		sessions = append(sessions, s)
	}
	b.mu.Unlock()
	for _, s := range sessions {
		s.Close()
	}
	// Queued jobs stay queued in the store; the next start cancels them.
	b.jobMu.Lock()
	for _, j := range b.jobs {
		if j.stop != nil {
			j.stop()
		}
	}
	b.jobMu.Unlock()
	// The refusals counted since the last written entry are written now,
	// or they would never be.
	b.flushRefusals(context.Background(), "")
}

// audit appends r and waits for it to be committed. The reply to the
// request that caused it must not go out before this returns.
func (b *Broker) audit(ctx context.Context, r audit.Record) error {
	if r.Time.IsZero() {
		r.Time = b.now()
	}
	// The entry is committed even when the requester has gone away.
	_, err := b.store.AppendAudit(context.WithoutCancel(ctx), r)
	if err != nil {
		b.log.Error("audit append failed", "kind", r.Kind, "app_id", r.AppID, "err", err)
		if errors.Is(err, audit.ErrUnavailable) {
			return b.auditUnavailable(err)
		}
		return &api.Error{Code: api.CodeInternalError, Message: "audit log unavailable: " + err.Error()}
	}
	return nil
}

// detailOf encodes an audit detail, one of api's Audit*Detail structs.
func detailOf(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func detailJSON(v map[string]any) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	b, _ := json.Marshal(v)
	return b
}
