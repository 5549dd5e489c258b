package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/pcp-dev/pcp/api"
)

// BreakError reports the first entry at which a chain stops following.
type BreakError struct {
	// Seq is the seq of the offending entry as read.
	Seq int64
	// Problem says what is wrong with it.
	Problem string
}

func (e *BreakError) Error() string {
	return fmt.Sprintf("audit: chain broken at seq %d: %s", e.Seq, e.Problem)
}

// Verifier checks entries handed to it in log order, starting from seq 1.
// The zero value is ready to use. Once an entry breaks the chain the
// Verifier keeps that first break and ignores later entries. A Verifier
// is not safe for concurrent use.
type Verifier struct {
	n      int64  // entries that verified
	last   int64  // seq of the last verified entry
	prev   []byte // hash of the last verified entry; nil before entry 1
	before []byte // hash of the entry before that one; nil before entry 2
	broken *BreakError
}

// Add checks e against the entries before it and returns a *BreakError
// if e is where the chain breaks (or the break found earlier, if any).
// Checks run in this order: seq must be one more than the previous seq
// (catches gaps, duplicates and reordering), prev_hash must equal the
// previous entry's hash, and hash must equal the recomputed hash (catches
// an edited field).
func (v *Verifier) Add(e api.AuditEntry) error { return v.add(e, nil) }

// AddCanonical is Add for an entry whose canonical form c the caller
// already has (ParseCanonical checked it): the hash is computed over c
// instead of encoding e again.
func (v *Verifier) AddCanonical(e api.AuditEntry, c []byte) error { return v.add(e, c) }

func (v *Verifier) add(e api.AuditEntry, c []byte) error {
	if v.broken != nil {
		return v.broken
	}
	want := v.last + 1
	if e.Seq != want {
		var p string
		switch {
		case e.Seq == want+1:
			p = fmt.Sprintf("seq %d follows seq %d: entry %d is missing", e.Seq, v.last, want)
		case e.Seq > want:
			p = fmt.Sprintf("seq %d follows seq %d: entries %d to %d are missing", e.Seq, v.last, want, e.Seq-1)
		default:
			p = fmt.Sprintf("seq %d follows seq %d: duplicate or out of order, want seq %d", e.Seq, v.last, want)
		}
		return v.breakAt(e.Seq, want, p)
	}
	prev := v.prev
	if prev == nil {
		prev = genesis
	}
	if wantPrev := hex.EncodeToString(prev); e.PrevHash != wantPrev {
		if v.last == 0 {
			return v.breakAt(e.Seq, want, fmt.Sprintf("prev_hash is %q, want %s (all zeros) for the first entry", e.PrevHash, wantPrev))
		}
		return v.breakAt(e.Seq, want, fmt.Sprintf("prev_hash is %q, want %s, the hash of seq %d", e.PrevHash, wantPrev, v.last))
	}
	var h []byte
	var err error
	if c != nil {
		sum := sha256.New()
		sum.Write(prev)
		sum.Write(c)
		h = sum.Sum(nil)
	} else {
		h, err = EntryHash(prev, e)
	}
	if err != nil {
		return v.breakAt(e.Seq, want, fmt.Sprintf("entry cannot be hashed (an edited field?): %v", err))
	}
	stored, err := hex.DecodeString(e.Hash)
	if err != nil || !bytes.Equal(stored, h) {
		return v.breakAt(e.Seq, want, fmt.Sprintf("hash is %q but the entry hashes to %x: a field was altered", e.Hash, h))
	}
	// Hex decoding accepts upper case; the chain's text form is lower case.
	if e.Hash != hex.EncodeToString(h) {
		return v.breakAt(e.Seq, want, fmt.Sprintf("hash %q is not lower-case hex", e.Hash))
	}
	v.n++
	v.last = e.Seq
	v.before, v.prev = v.prev, h
	return nil
}

// Checkpoint is a point of a chain that verified: the seq and hash of an
// entry, the hash of the entry before it (nil for seq 1) and the number
// of entries up to it. A verification resumed from it (Resume) checks
// that entry again and then only the entries after it.
type Checkpoint struct {
	Seq     int64
	Hash    []byte
	Prev    []byte
	Entries int64
}

// Checkpoint returns the last verified entry as a Checkpoint; the zero
// Checkpoint before any entry verified.
func (v *Verifier) Checkpoint() Checkpoint {
	return Checkpoint{Seq: v.last, Hash: v.prev, Prev: v.before, Entries: v.n}
}

// Resume returns a Verifier that continues at cp: the next entry it
// accepts is cp's own (seq cp.Seq, chained behind cp.Prev), and its
// result counts the cp.Entries-1 entries before it. Whether that entry
// still has the hash it had is the caller's to check. The zero
// Checkpoint starts at seq 1.
func Resume(cp Checkpoint) *Verifier {
	if cp.Seq == 0 {
		return &Verifier{}
	}
	return &Verifier{n: cp.Entries - 1, last: cp.Seq - 1, prev: cp.Prev}
}

// breakAt records the first break. A non-positive seq (which the result
// could not carry) is reported as the seq that was expected.
func (v *Verifier) breakAt(seq, want int64, problem string) error {
	if seq < 1 {
		seq = want
	}
	v.broken = &BreakError{Seq: seq, Problem: problem}
	return v.broken
}

// Head returns the seq and hash of the last entry that verified; seq 0
// and nil before any did.
func (v *Verifier) Head() (seq int64, hash []byte) { return v.last, v.prev }

// Result summarises the walk so far. Entries counts the entries that
// verified, which before a break is the intact prefix; Head is the hex
// hash of the last of them.
func (v *Verifier) Result() api.AuditVerifyResult {
	r := api.AuditVerifyResult{OK: v.broken == nil, Entries: v.n}
	if v.prev != nil {
		r.Head = hex.EncodeToString(v.prev)
	}
	if v.broken != nil {
		r.BrokenSeq = v.broken.Seq
		r.Problem = v.broken.Problem
	}
	return r
}
