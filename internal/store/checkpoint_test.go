package store

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"

	"github.com/transparency-dev/merkle/proof"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/tlog"
)

func unhexAll(t testing.TB, hs []string) [][]byte {
	t.Helper()
	out := make([][]byte, len(hs))
	for i, h := range hs {
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

func checkpoint(t testing.TB, s *Store) api.AuditCheckpointResult {
	t.Helper()
	cp, err := s.AuditCheckpoint(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return cp
}

// checkProof checks a consistency answer with transparency-dev/merkle's
// verifier, as pcpctl does.
func checkProof(t testing.TB, old api.AuditCheckpointResult, res api.AuditConsistencyResult) {
	t.Helper()
	o, err := tlog.OpenCheckpoint(old.Checkpoint, old.Key)
	if err != nil {
		t.Fatal(err)
	}
	n, err := tlog.OpenCheckpoint(res.Checkpoint.Checkpoint, old.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := proof.VerifyConsistency(tlog.Hasher, o.Size, n.Size, unhexAll(t, res.Proof), o.Root[:], n.Root[:]); err != nil {
		t.Errorf("consistency proof %d to %d: %v", o.Size, n.Size, err)
	}
}

// An honest log that grew after a checkpoint verifies against it, online
// and offline, and the proof passes an RFC 9162 verifier.
func TestConsistencyHonest(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	empty := checkpoint(t, s)
	appendN(t, s, 10)
	cp := checkpoint(t, s)
	if cp.Size != 10 || !strings.HasPrefix(cp.Checkpoint, cp.Origin+"\n10\n") {
		t.Fatalf("checkpoint = %+v", cp)
	}
	for i := 10; i < 23; i++ {
		if _, err := s.AppendAudit(ctx, record(i)); err != nil {
			t.Fatal(err)
		}
	}
	for _, old := range []api.AuditCheckpointResult{empty, cp, checkpoint(t, s)} {
		res, err := s.AuditConsistency(ctx, old.Checkpoint)
		if err != nil || !res.OK || res.OldSize != old.Size || res.Size != 23 {
			t.Fatalf("AuditConsistency(%d) = %+v, %v", old.Size, res, err)
		}
		checkProof(t, old, res)
		off, err := VerifyCheckpointFile(ctx, path, old.Checkpoint)
		if err != nil || !off.OK || off.Size != 23 {
			t.Errorf("VerifyCheckpointFile(%d) = %+v, %v", old.Size, off, err)
		}
	}
	// The key survives a restart, and so does the tree.
	s = reopen(t, s, path)
	res, err := s.AuditConsistency(ctx, cp.Checkpoint)
	if err != nil || !res.OK {
		t.Fatalf("after a restart: %+v, %v", res, err)
	}
	checkProof(t, cp, res)
}

// Removing the newest records and their index rows leaves a chain that
// verifies; the checkpoint taken before catches it and names the range.
func TestConsistencyTruncated(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	appendN(t, s, 15)
	cp := checkpoint(t, s)
	s.Close()
	recs := readRecords(t, path)
	writeRecords(t, path, recs[:12])
	if _, err := rawDB(t, path).Exec(`DELETE FROM audit WHERE seq > 12`); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, path)
	if res, err := s.VerifyAudit(ctx); err != nil || !res.OK || res.Entries != 12 {
		t.Fatalf("VerifyAudit after truncating = %+v, %v; the chain alone cannot tell", res, err)
	}
	for name, check := range map[string]func() (api.AuditConsistencyResult, error){
		"AuditConsistency":     func() (api.AuditConsistencyResult, error) { return s.AuditConsistency(ctx, cp.Checkpoint) },
		"VerifyCheckpointFile": func() (api.AuditConsistencyResult, error) { return VerifyCheckpointFile(ctx, path, cp.Checkpoint) },
	} {
		res, err := check()
		if err != nil || res.OK || res.BrokenSeq != 13 || !strings.Contains(res.Problem, "entries 13 to 15 were removed") {
			t.Errorf("%s = %+v, %v; want entries 13 to 15 named as removed", name, res, err)
		}
	}
	// Appending again does not hide it.
	appendN(t, s, 5)
	res, err := s.AuditConsistency(ctx, cp.Checkpoint)
	if err != nil || res.OK || !strings.Contains(res.Problem, "rewritten") {
		t.Errorf("after appending over the truncation: %+v, %v; want the old tree named rewritten", res, err)
	}
}

// A log rewritten before the checkpoint, chain and all, is caught.
func TestConsistencyRewritten(t *testing.T) {
	ctx := context.Background()
	s, path := openFile(t)
	appendN(t, s, 6)
	cp := checkpoint(t, s)
	s.Close()
	var prev []byte
	var es []api.AuditEntry
	for i := range 6 {
		r := record(i)
		if i == 2 {
			r.Outcome = "denied"
		}
		e, h, err := audit.Seal(prev, int64(i+1), r)
		if err != nil {
			t.Fatal(err)
		}
		prev, es = h, append(es, e)
	}
	editEntries(t, path, func([]api.AuditEntry) []api.AuditEntry { return es })
	res, err := VerifyCheckpointFile(ctx, path, cp.Checkpoint)
	if err != nil || res.OK || !strings.Contains(res.Problem, "entries before the checkpoint were rewritten") {
		t.Errorf("VerifyCheckpointFile = %+v, %v", res, err)
	}
	// An altered checkpoint is refused as such.
	s = reopen(t, s, path)
	if _, err := s.AuditConsistency(ctx, strings.Replace(cp.Checkpoint, "\n6\n", "\n5\n", 1)); !errors.Is(err, audit.ErrBadCheckpoint) {
		t.Errorf("altered checkpoint: %v, want ErrBadCheckpoint", err)
	}
}

// Every entry's inclusion proof checks against its checkpoint's root with
// an RFC 9162 verifier, from the entry as audit.tail shows it.
func TestProve(t *testing.T) {
	ctx := context.Background()
	s, _ := openFile(t)
	es := appendN(t, s, 13)
	for _, e := range es {
		p, err := s.AuditProve(ctx, e.Seq)
		if err != nil {
			t.Fatal(err)
		}
		cp, err := tlog.OpenCheckpoint(p.Checkpoint.Checkpoint, p.Checkpoint.Key)
		if err != nil {
			t.Fatal(err)
		}
		c, err := audit.Canonical(e)
		if err != nil {
			t.Fatal(err)
		}
		leaf := tlog.LeafHash(c)
		if p.LeafIndex != uint64(e.Seq-1) || p.LeafHash != hex.EncodeToString(leaf[:]) || p.TreeSize != 13 || p.Entry.Hash != e.Hash {
			t.Errorf("proof of %d = %+v", e.Seq, p)
		}
		if err := proof.VerifyInclusion(tlog.Hasher, p.LeafIndex, cp.Size, leaf[:], unhexAll(t, p.Proof), cp.Root[:]); err != nil {
			t.Errorf("inclusion of %d: %v", e.Seq, err)
		}
	}
	for _, seq := range []int64{0, 14} {
		if _, err := s.AuditProve(ctx, seq); !errors.Is(err, audit.ErrNoEntry) {
			t.Errorf("AuditProve(%d): %v, want ErrNoEntry", seq, err)
		}
	}
}
