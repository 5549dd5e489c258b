package core

import (
	"context"
	"encoding/json"

	"github.com/pcp-dev/pcp/api"
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

// AuditTail returns the newest audit entries, oldest first, a page at a
// time (see api.AuditTailParams).
func (b *Broker) AuditTail(ctx context.Context, p *api.AuditTailParams) (*api.AuditTailResult, error) {
	n, clamped, err := pageLimit(p.Limit, 20)
	if err != nil {
		return nil, err
	}
	if p.Before < 0 {
		return nil, api.InvalidParam("before", "must not be negative")
	}
	if err := b.limits.connection(SessionFrom(ctx), b.now()); err != nil {
		return nil, err
	}
	es, err := b.store.AuditBefore(ctx, p.Before, n+1)
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternalError, Message: "reading the audit log: " + err.Error()}
	}
	es, next := olderPage(es, n, clamped)
	res := &api.AuditTailResult{Entries: es}
	if res.Entries == nil {
		res.Entries = []api.AuditEntry{}
	}
	if next {
		res.Next = es[0].Seq
	}
	return res, nil
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
