// Package audit defines the hash chain of PCP's audit log: how a record the
// broker wants to log becomes a sealed entry, and how a sequence of entries
// is checked. It does no I/O; internal/store persists the entries and
// feeds them back through a Verifier.
//
// # The chain
//
// Entries are numbered from 1 with no gaps. Entry n carries two hashes,
// both SHA-256 digests written as 64 lowercase hex digits:
//
//	prev_hash(1) = 32 zero bytes ("000…000", 64 zeros)
//	prev_hash(n) = hash(n-1)
//	hash(n)      = SHA-256( prev_hash(n) as 32 raw bytes || C(n) )
//
// C(n) is the RFC 8785 (JCS) canonical JSON of the entry as api.AuditEntry
// encodes it on the wire, with the "hash" and "prev_hash" members removed.
// The members are therefore seq, time, kind, source, actor, app_id,
// capability_id, params_digest, outcome, duration_us and detail, where the
// optional ones (source, actor, app_id, capability_id, params_digest,
// detail) are omitted when empty, exactly as on the wire. time is RFC 3339
// in UTC with nine fractional digits ("2006-01-02T15:04:05.000000000Z"),
// duration_us is an integer count of microseconds, and detail, when
// present, is a JSON object. Anyone holding a list of entries as
// audit.tail returns them can recompute the chain: drop hash and
// prev_hash from each object, canonicalise it, and hash it behind the
// previous entry's hash.
//
// Editing any field of an entry changes C(n) and so breaks hash(n);
// deleting, duplicating or reordering entries breaks the seq sequence and
// the prev_hash links. Truncating the newest entries leaves a valid
// shorter chain; detecting that needs a head kept elsewhere: the store
// compares against the head it wrote, and a signed checkpoint of the
// log's Merkle tree (internal/tlog, docs/audit.md) proves it to anyone
// who kept one.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/canonjson"
)

// HashSize is the length in bytes of an entry hash.
const HashSize = sha256.Size

// TimeFormat is the layout of an entry's time: RFC 3339, UTC, nanoseconds
// always written, so that the text sorts as the instant does.
const TimeFormat = "2006-01-02T15:04:05.000000000Z"

// genesis is the prev_hash of entry 1.
var genesis = make([]byte, HashSize)

// ErrUnavailable is wrapped by the errors of a log that can no longer be
// appended to: a commit of an entry failed, and the log refuses every
// later entry until it is reopened. The broker then refuses every action
// (it fails closed); an error that does not wrap it failed one record
// alone.
var ErrUnavailable = errors.New("audit log unavailable")

// ErrBadCheckpoint is wrapped by the errors of a checkpoint that cannot
// be read or is not signed by the log's key.
var ErrBadCheckpoint = errors.New("bad checkpoint")

// ErrNoEntry is wrapped by the error of a proof asked for an entry the
// log does not hold.
var ErrNoEntry = errors.New("no such audit entry")

// Record is what the broker asks to append: an entry before the chain has
// given it a seq and hashes.
type Record struct {
	// Time is when the event happened; it is stored in UTC.
	Time time.Time
	// Kind classifies the record: "register", "invoke", "revoke", "allow",
	// "unregister", "adapter", ... Free-form but never empty.
	Kind         string
	Source       string
	Actor        string
	AppID        string
	CapabilityID string
	// ParamsDigest is ParamsDigest(params) for an invocation; the
	// parameters themselves are not logged.
	ParamsDigest string
	Outcome      string
	// Duration is stored in whole microseconds.
	Duration time.Duration
	// Detail is an optional JSON object. It is stored in canonical form.
	Detail json.RawMessage
}

// canonicalEntry is api.AuditEntry without the two hashes. Its tags must
// stay identical to api.AuditEntry's: the chain is defined over the wire
// form. TestCanonicalEntryMatchesWire guards that.
type canonicalEntry struct {
	Seq          int64           `json:"seq"`
	Time         string          `json:"time"`
	Kind         string          `json:"kind"`
	Source       string          `json:"source,omitempty"`
	Actor        string          `json:"actor,omitempty"`
	AppID        string          `json:"app_id,omitempty"`
	CapabilityID string          `json:"capability_id,omitempty"`
	ParamsDigest string          `json:"params_digest,omitempty"`
	Outcome      string          `json:"outcome"`
	DurationUS   int64           `json:"duration_us"`
	Detail       json.RawMessage `json:"detail,omitempty"`
}

// Canonical returns C(e), the bytes hashed behind the previous hash: the
// RFC 8785 form of e without its hash and prev_hash.
func Canonical(e api.AuditEntry) ([]byte, error) {
	if b, ok := appendCanonical(make([]byte, 0, 320+len(e.Detail)), &e, false); ok {
		return b, nil
	}
	b, err := canonjson.Marshal(canonicalEntry{
		Seq:          e.Seq,
		Time:         e.Time,
		Kind:         e.Kind,
		Source:       e.Source,
		Actor:        e.Actor,
		AppID:        e.AppID,
		CapabilityID: e.CapabilityID,
		ParamsDigest: e.ParamsDigest,
		Outcome:      e.Outcome,
		DurationUS:   e.DurationUS,
		Detail:       e.Detail,
	})
	if err != nil {
		return nil, fmt.Errorf("audit: entry %d: canonical form: %w", e.Seq, err)
	}
	return b, nil
}

// appendCanonical writes the canonical form directly, members in RFC 8785
// order, for the common case: every string valid UTF-8, integers within
// 2^53, and detail already canonical (as Prepare and the store keep it).
// It reports false when the general path must be taken; a test checks
// that both paths agree.
func appendCanonical(b []byte, e *api.AuditEntry, detailCanonical bool) ([]byte, bool) {
	for _, s := range []string{e.Time, e.Kind, e.Source, e.Actor, e.AppID, e.CapabilityID, e.ParamsDigest, e.Outcome} {
		if !utf8.ValidString(s) {
			return nil, false
		}
	}
	const maxExact = 1<<53 - 1
	if e.Seq > maxExact || e.Seq < -maxExact || e.DurationUS > maxExact || e.DurationUS < -maxExact {
		return nil, false
	}
	if len(e.Detail) > 0 && !detailCanonical {
		if c, err := canonjson.Transform(e.Detail); err != nil || !bytes.Equal(c, e.Detail) {
			return nil, false
		}
	}
	str := func(b []byte, key, v string, omitEmpty bool) []byte {
		if omitEmpty && v == "" {
			return b
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		return canonjson.AppendString(b, v)
	}
	b = append(b, '{')
	b = str(b, "actor", e.Actor, true)
	b = str(b, "app_id", e.AppID, true)
	b = str(b, "capability_id", e.CapabilityID, true)
	if len(e.Detail) > 0 {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, `"detail":`...)
		b = append(b, e.Detail...)
	}
	if len(b) > 1 {
		b = append(b, ',')
	}
	b = append(b, `"duration_us":`...)
	b = strconv.AppendInt(b, e.DurationUS, 10)
	b = str(b, "kind", e.Kind, false)
	b = str(b, "outcome", e.Outcome, false)
	b = str(b, "params_digest", e.ParamsDigest, true)
	b = append(b, `,"seq":`...)
	b = strconv.AppendInt(b, e.Seq, 10)
	b = str(b, "source", e.Source, true)
	b = str(b, "time", e.Time, false)
	return append(b, '}'), true
}

// EntryHash returns SHA-256(prev || C(e)). prev is the previous entry's
// hash; nil stands for the 32 zero bytes that precede entry 1. The hash
// and prev_hash fields of e are ignored.
func EntryHash(prev []byte, e api.AuditEntry) ([]byte, error) {
	if prev == nil {
		prev = genesis
	}
	if len(prev) != HashSize {
		return nil, fmt.Errorf("audit: entry %d: previous hash is %d bytes, want %d", e.Seq, len(prev), HashSize)
	}
	c, err := Canonical(e)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write(prev)
	h.Write(c)
	return h.Sum(nil), nil
}

// Seal turns r into entry seq chained behind prev (nil for seq 1) and
// returns the entry and its raw hash, which is the prev of entry seq+1.
// It fails if r has no kind or time, if r.Detail is not a JSON object, or
// if seq is out of range.
func Seal(prev []byte, seq int64, r Record) (api.AuditEntry, []byte, error) {
	p, err := Prepare(r)
	if err != nil {
		return api.AuditEntry{}, nil, err
	}
	return p.Seal(prev, seq)
}

// MaxSeq is the largest seq an entry may have: canonical JSON numbers are
// IEEE-754 doubles, which hold integers exactly up to 2^53.
const MaxSeq = 1<<53 - 1

// Prepared is a record validated and canonicalised ahead of sealing. All
// the costly work of Seal is done by Prepare, which needs no position in
// the chain; Prepared.Seal only hashes. A log writer can so prepare
// records in its callers and keep the serial part short.
type Prepared struct {
	e api.AuditEntry // every field except Seq, PrevHash and Hash
	// C(e) is before || decimal seq || after.
	before, after []byte
}

// Prepare validates r and computes its canonical form for any seq.
func Prepare(r Record) (*Prepared, error) {
	if r.Kind == "" {
		return nil, errors.New("audit: record has no kind")
	}
	if r.Time.IsZero() {
		return nil, fmt.Errorf("audit: %s record has no time", r.Kind)
	}
	detail, err := CanonicalDetail(r.Detail)
	if err != nil {
		return nil, fmt.Errorf("audit: %s record: %w", r.Kind, err)
	}
	e := api.AuditEntry{
		Time:         r.Time.UTC().Format(TimeFormat),
		Kind:         r.Kind,
		Source:       r.Source,
		Actor:        r.Actor,
		AppID:        r.AppID,
		CapabilityID: r.CapabilityID,
		ParamsDigest: r.ParamsDigest,
		Outcome:      r.Outcome,
		DurationUS:   r.Duration.Microseconds(),
		Detail:       detail,
	}
	c, ok := appendCanonical(make([]byte, 0, 320+len(e.Detail)), &e, true)
	if !ok {
		if c, err = Canonical(e); err != nil {
			return nil, err
		}
	}
	// Members are sorted and only "source" and "time", both strings,
	// follow "seq"; a string cannot hold an unescaped quote, so the last
	// `"seq":` is the top-level member even if detail has a "seq" key.
	const member = `"seq":0`
	i := bytes.LastIndex(c, []byte(member))
	if i < 0 {
		return nil, fmt.Errorf("audit: %s record: no seq member in canonical form %s", r.Kind, c)
	}
	return &Prepared{e: e, before: c[:i+len(member)-1], after: c[i+len(member):]}, nil
}

// Seal places the prepared record at seq behind prev (nil for seq 1) and
// returns the entry and its raw hash.
func (p *Prepared) Seal(prev []byte, seq int64) (api.AuditEntry, []byte, error) {
	if seq < 1 || seq > MaxSeq {
		return api.AuditEntry{}, nil, fmt.Errorf("audit: seq %d: out of range [1, 2^53)", seq)
	}
	if prev == nil {
		prev = genesis
	}
	if len(prev) != HashSize {
		return api.AuditEntry{}, nil, fmt.Errorf("audit: entry %d: previous hash is %d bytes, want %d", seq, len(prev), HashSize)
	}
	var num [20]byte
	h := sha256.New()
	h.Write(prev)
	h.Write(p.before)
	h.Write(strconv.AppendInt(num[:0], seq, 10))
	h.Write(p.after)
	sum := h.Sum(nil)
	e := p.e
	e.Seq = seq
	e.PrevHash = hex.EncodeToString(prev)
	e.Hash = hex.EncodeToString(sum)
	return e, sum, nil
}

// CanonicalDetail validates a record's detail and returns its canonical
// form: nil for an absent or null detail, the RFC 8785 text of the object
// otherwise. Anything but an object is an error.
func CanonicalDetail(detail json.RawMessage) (json.RawMessage, error) {
	d := bytes.TrimSpace(detail)
	if len(d) == 0 || string(d) == "null" {
		return nil, nil
	}
	if d[0] != '{' {
		return nil, errors.New("detail is not a JSON object")
	}
	c, err := canonjson.Transform(d)
	if err != nil {
		return nil, fmt.Errorf("detail: %w", err)
	}
	return c, nil
}

// ParamsDigest returns "sha256:" and the hex SHA-256 of the canonical JSON
// of params, so that the log can tie an invocation to its parameters
// without recording them. Absent or null params digest as "null". Text
// that is not valid JSON has no canonical form; its raw bytes are hashed
// instead.
func ParamsDigest(params json.RawMessage) string {
	p := bytes.TrimSpace(params)
	if len(p) == 0 {
		p = []byte("null")
	}
	if c, err := canonjson.Transform(p); err == nil {
		p = c
	}
	sum := sha256.Sum256(p)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// AppendCanonical appends C(e) of the prepared record placed at seq to b.
// It is the text Seal hashes behind the previous hash, and the leaf of the
// log's Merkle tree.
func (p *Prepared) AppendCanonical(b []byte, seq int64) []byte {
	b = append(b, p.before...)
	b = strconv.AppendInt(b, seq, 10)
	return append(b, p.after...)
}

// ParseCanonical rebuilds an entry from its canonical form c and its two
// raw hashes, as a log record holds them. It fails when c is not the
// canonical JSON of an entry: not JSON, members missing, unknown or out of
// canonical form.
func ParseCanonical(c, prev, hash []byte) (api.AuditEntry, error) {
	// Unknown members, duplicates and anything out of canonical form make
	// the re-encoding below differ from c.
	var ce canonicalEntry
	if err := json.Unmarshal(c, &ce); err != nil {
		return api.AuditEntry{}, fmt.Errorf("audit: canonical entry: %w", err)
	}
	e := api.AuditEntry{
		Seq:          ce.Seq,
		Time:         ce.Time,
		Kind:         ce.Kind,
		Source:       ce.Source,
		Actor:        ce.Actor,
		AppID:        ce.AppID,
		CapabilityID: ce.CapabilityID,
		ParamsDigest: ce.ParamsDigest,
		Outcome:      ce.Outcome,
		DurationUS:   ce.DurationUS,
		Detail:       ce.Detail,
		PrevHash:     hex.EncodeToString(prev),
		Hash:         hex.EncodeToString(hash),
	}
	again, err := Canonical(e)
	if err != nil {
		return api.AuditEntry{}, err
	}
	if !bytes.Equal(again, c) {
		return api.AuditEntry{}, fmt.Errorf("audit: entry %d is not in canonical form", e.Seq)
	}
	return e, nil
}
