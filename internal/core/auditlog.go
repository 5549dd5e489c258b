package core

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
)

// maxReplyBytes bounds the encoded items of one page of events.history,
// audit.tail and jobs.list: half the 1 MiB a client may enforce on a
// frame or line (docs/framed.md), which leaves the envelope and any
// re-escaping ample room.
const maxReplyBytes = 512 << 10

// maxPageItems bounds the limit of events.history and audit.tail; a
// larger one is clamped, and the answer says where the next page starts.
const maxPageItems = 1000

// pageLimit checks a paged method's limit: 0 means def, above
// maxPageItems is clamped (clamped is then true).
func pageLimit(limit, def int) (n int, clamped bool, err error) {
	switch {
	case limit < 0:
		return 0, false, api.InvalidParam("limit", "must not be negative")
	case limit == 0:
		return def, false, nil
	case limit > maxPageItems:
		return maxPageItems, true, nil
	}
	return limit, false, nil
}

// fitNewest returns how many of the newest items, counted from the end
// of items (oldest first), fit in maxReplyBytes; at least one.
func fitNewest[T any](items []T) int {
	size := 0
	for n := 0; n < len(items); n++ {
		b, _ := json.Marshal(items[len(items)-1-n])
		if size += len(b) + 1; size > maxReplyBytes && n > 0 {
			return n
		}
	}
	return len(items)
}

// olderPage cuts items (oldest first, with one more than limit when
// older items exist) to limit and to maxReplyBytes. next is true when the
// caller gets fewer items than it asked for and older ones exist: the
// page then carries a cursor.
func olderPage[T any](items []T, limit int, clamped bool) (page []T, next bool) {
	older := len(items) > limit
	if older {
		items = items[len(items)-limit:]
	}
	n := fitNewest(items)
	cut := n < len(items)
	return items[len(items)-n:], cut || (clamped && older)
}

// readPage is one read of a paged method: the limit and the before
// cursor checked (def is the default limit), the connection's token
// spent, up to limit+1 items below before read by read (oldest first)
// and cut by olderPage. seq gives an item's cursor value; next is 0 when
// the page carries no cursor. what names the log in an error.
func readPage[T any](ctx context.Context, b *Broker, limit int, before int64, def int, what string,
	read func(ctx context.Context, before int64, n int) ([]T, error), seq func(*T) int64) (items []T, next int64, err error) {
	n, clamped, err := pageLimit(limit, def)
	if err != nil {
		return nil, 0, err
	}
	if before < 0 {
		return nil, 0, api.InvalidParam("before", "must not be negative")
	}
	if err := b.limits.connection(SessionFrom(ctx), b.now()); err != nil {
		return nil, 0, err
	}
	items, err = read(ctx, before, n+1)
	if err != nil {
		return nil, 0, &api.Error{Code: api.CodeInternalError, Message: "reading " + what + ": " + err.Error()}
	}
	items, more := olderPage(items, n, clamped)
	if items == nil {
		items = []T{}
	}
	if more {
		next = seq(&items[0])
	}
	return items, next, nil
}

// AuditTail returns the newest audit entries, oldest first, a page at a
// time (see api.AuditTailParams).
func (b *Broker) AuditTail(ctx context.Context, p *api.AuditTailParams) (*api.AuditTailResult, error) {
	es, next, err := readPage(ctx, b, p.Limit, p.Before, 20, "the audit log", b.store.AuditBefore, func(e *api.AuditEntry) int64 { return e.Seq })
	if err != nil {
		return nil, err
	}
	return &api.AuditTailResult{Entries: es, Next: next}, nil
}

// AuditVerify checks the audit chain as stored on disk. For the user it
// walks the whole chain; for an agent it checks what was appended since
// the last walk against the head this daemon committed (see
// store.VerifyAuditIncremental), so that its cost is bounded by what the
// daemon wrote, not by the log's length. Concurrent callers share one
// walk.
func (b *Broker) AuditVerify(ctx context.Context) (*api.AuditVerifyResult, error) {
	if err := b.limits.connection(SessionFrom(ctx), b.now()); err != nil {
		return nil, err
	}
	verify := b.store.VerifyAuditIncremental
	if roleOf(ctx) == RoleUser {
		verify = b.store.VerifyAudit
	}
	r, err := verify(ctx)
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "verifying the audit log: " + err.Error()}
	}
	return &r, nil
}

// AuditCheckpoint returns a signed checkpoint of the audit log's Merkle
// tree as written so far.
func (b *Broker) AuditCheckpoint(ctx context.Context) (*api.AuditCheckpointResult, error) {
	if err := b.limits.connection(SessionFrom(ctx), b.now()); err != nil {
		return nil, err
	}
	r, err := b.store.AuditCheckpoint(ctx)
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "signing an audit checkpoint: " + err.Error()}
	}
	return &r, nil
}

// AuditProve returns the inclusion proof of one audit entry.
func (b *Broker) AuditProve(ctx context.Context, p *api.AuditProveParams) (*api.AuditProveResult, error) {
	if err := b.limits.connection(SessionFrom(ctx), b.now()); err != nil {
		return nil, err
	}
	if p.Seq < 1 {
		return nil, api.InvalidParam("seq", "must be at least 1")
	}
	r, err := b.store.AuditProve(ctx, p.Seq)
	if errors.Is(err, audit.ErrNoEntry) {
		return nil, api.InvalidParam("seq", "%s", strings.TrimPrefix(err.Error(), audit.ErrNoEntry.Error()+": "))
	}
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "proving an audit entry: " + err.Error()}
	}
	return &r, nil
}

// AuditConsistency rereads the audit log and proves that it extends the
// tree of a checkpoint signed earlier, or says how it does not.
func (b *Broker) AuditConsistency(ctx context.Context, p *api.AuditConsistencyParams) (*api.AuditConsistencyResult, error) {
	if err := b.limits.connection(SessionFrom(ctx), b.now()); err != nil {
		return nil, err
	}
	if p.Checkpoint == "" {
		return nil, api.MissingParam("checkpoint")
	}
	r, err := b.store.AuditConsistency(ctx, p.Checkpoint)
	if errors.Is(err, audit.ErrBadCheckpoint) {
		return nil, api.InvalidParam("checkpoint", "%s", strings.TrimPrefix(err.Error(), audit.ErrBadCheckpoint.Error()+": "))
	}
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "checking an audit checkpoint: " + err.Error()}
	}
	return &r, nil
}
