package core

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// RateLimits bound how fast invocations are accepted. A zero rate
// disables that limit.
type RateLimits struct {
	// PerApp bounds the invocations of one app's capabilities from one
	// invocation source, per second, with bursts of PerAppBurst. It keeps
	// an agent from hammering an app; other apps are unaffected.
	PerApp      float64
	PerAppBurst int
	// PerConnection bounds the invocations and actions of one connection,
	// per second, with bursts of PerConnectionBurst. It keeps one client
	// from starving the others.
	PerConnection      float64
	PerConnectionBurst int
}

// DefaultRateLimits are generous for an agent acting for a person and
// tight enough that a runaway loop is stopped within a second.
var DefaultRateLimits = RateLimits{PerApp: 50, PerAppBurst: 100, PerConnection: 500, PerConnectionBurst: 1000}

// limiters holds the per-app limiters and the audit throttle for
// refusals. mu guards its maps; it is a leaf lock.
type limiters struct {
	cfg RateLimits

	mu      sync.Mutex
	perApp  map[appKey]*rate.Limiter
	noticed map[string]*rejections
}

type appKey struct{ source, app string }

// rejections throttles the audit entries of one kind of refusal (see
// refusalKey): the first in each second is written with the count
// suppressed before it; the others are counted, and the newest of them
// is kept so that the count can still be written when no further
// refusal comes (flushRefusals).
type rejections struct {
	last       time.Time
	suppressed int
	// pending is the newest suppressed refusal's record; meaningful
	// while suppressed > 0.
	pending audit.Record
}

func newLimiters(cfg RateLimits) *limiters {
	return &limiters{cfg: cfg, perApp: map[appKey]*rate.Limiter{}, noticed: map[string]*rejections{}}
}

func newLimiter(perSecond float64, burst int) *rate.Limiter {
	if perSecond <= 0 {
		return nil
	}
	if burst < 1 {
		burst = int(math.Ceil(perSecond))
	}
	return rate.NewLimiter(rate.Limit(perSecond), burst)
}

// take spends one token of l at now, or answers RATE_LIMITED with the
// time after which a retry would pass.
func take(l *rate.Limiter, now time.Time, data map[string]any) error {
	if l == nil {
		return nil
	}
	r := l.ReserveN(now, 1)
	if !r.OK() {
		return api.Errorf(api.CodeRateLimited, data, "rate limited")
	}
	delay := r.DelayFrom(now)
	if delay <= 0 {
		return nil
	}
	r.CancelAt(now)
	retry := delay.Milliseconds()
	if retry < 1 {
		retry = 1
	}
	data["retry_after_ms"] = retry
	data["limit_per_second"] = float64(l.Limit())
	data["burst"] = l.Burst()
	return api.Errorf(api.CodeRateLimited, data, "too many invocations (%s); retry after %d ms", data["scope"], retry)
}

// reset puts new limits in force with fresh buckets.
func (ls *limiters) reset(cfg RateLimits) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	ls.cfg = cfg
	clear(ls.perApp)
}

// app checks the per-app limit of source invoking appID.
func (ls *limiters) app(source api.InvocationSource, appID string, now time.Time) error {
	k := appKey{string(source), appID}
	ls.mu.Lock()
	if ls.cfg.PerApp <= 0 {
		ls.mu.Unlock()
		return nil
	}
	l := ls.perApp[k]
	if l == nil {
		l = newLimiter(ls.cfg.PerApp, ls.cfg.PerAppBurst)
		ls.perApp[k] = l
	}
	ls.mu.Unlock()
	return take(l, now, map[string]any{"scope": "app", "app_id": appID, "source": string(source)})
}

// connection checks the calling session's own limit.
func (ls *limiters) connection(s *Session, now time.Time) error {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	l := s.limiter
	s.mu.Unlock()
	return take(l, now, map[string]any{"scope": "connection"})
}

// connectionLimiter makes a new connection's limiter.
func (ls *limiters) connectionLimiter() *rate.Limiter {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return newLimiter(ls.cfg.PerConnection, ls.cfg.PerConnectionBurst)
}

// forget drops an app's limiters when it is revoked.
func (ls *limiters) forget(appID string) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for k := range ls.perApp {
		if k.app == appID {
			delete(ls.perApp, k)
		}
	}
}

// refusalKey names the aggregate a refusal is counted in: per
// connection (or, for the per-app limit, per source and app), audit kind
// and error code. Keys of a connection start with "conn:<id>:" so that
// its aggregates can be flushed when it closes.
func refusalKey(s *Session, kind string, err *api.Error) string {
	if err.Code == api.CodeRateLimited {
		if d := err.DataMap(); d["scope"] == "app" {
			return fmt.Sprintf("app:%s:%v:%v", kind, d["source"], d["app_id"])
		}
	}
	conn := "inproc"
	if s != nil {
		conn = s.ID
	}
	return "conn:" + conn + ":" + kind + ":" + err.Code.Name()
}

// shouldAudit reports whether a refusal under key is audited now, and
// how many refusals under key went unaudited since the last one. A
// refusal not audited now is kept as rec, to be written by
// flushRefusals if no other comes.
func (ls *limiters) shouldAudit(key string, now time.Time, rec audit.Record) (bool, int) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	r := ls.noticed[key]
	if r == nil {
		r = &rejections{}
		ls.noticed[key] = r
	}
	if !r.last.IsZero() && now.Sub(r.last) < time.Second {
		r.suppressed++
		r.pending = rec
		return false, 0
	}
	n := r.suppressed
	r.last, r.suppressed, r.pending = now, 0, audit.Record{}
	return true, n
}

// flushRefusals takes the refusals counted but not yet written under the
// keys with prefix (all keys for ""), and forgets those keys. Each is
// returned as the newest refusal's record with the number of the others
// in its detail member "suppressed_since_last_entry", the member an
// entry written by shouldAudit carries.
func (ls *limiters) flushRefusals(prefix string) []audit.Record {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	var keys []string
	for k := range ls.noticed {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys) // a stable order for the log
	var out []audit.Record
	for _, k := range keys {
		if r := ls.noticed[k]; r.suppressed > 0 {
			rec := r.pending
			rec.Detail = withSuppressed(rec.Detail, r.suppressed-1)
			out = append(out, rec)
		}
		delete(ls.noticed, k)
	}
	return out
}

// withSuppressed adds "suppressed_since_last_entry": n to a detail
// object (none when n is 0).
func withSuppressed(detail json.RawMessage, n int) json.RawMessage {
	if n == 0 {
		return detail
	}
	m := map[string]any{}
	if len(detail) > 0 {
		json.Unmarshal(detail, &m)
	}
	m["suppressed_since_last_entry"] = n
	return detailJSON(m)
}

// flushRefusals writes the refusals counted under the keys with prefix
// and not yet written (see limiters.flushRefusals). It is called when a
// connection closes (its keys) and when the broker closes (all keys).
func (b *Broker) flushRefusals(ctx context.Context, prefix string) {
	for _, rec := range b.limits.flushRefusals(prefix) {
		b.audit(ctx, rec)
	}
}
