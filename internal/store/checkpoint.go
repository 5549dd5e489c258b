package store

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/tlog"
)

// AuditCheckpoint signs a checkpoint of the audit log as written so far.
func (s *Store) AuditCheckpoint(ctx context.Context) (api.AuditCheckpointResult, error) {
	s.a.mu.Lock()
	size := s.a.log.Size()
	root, err := s.a.log.Tree().Root(size)
	s.a.mu.Unlock()
	if err != nil {
		return api.AuditCheckpointResult{}, err
	}
	return s.signed(size, root)
}

func (s *Store) signed(size uint64, root [tlog.HashSize]byte) (api.AuditCheckpointResult, error) {
	return signCheckpoint(s.key, size, root)
}

func signCheckpoint(key *tlog.Key, size uint64, root [tlog.HashSize]byte) (api.AuditCheckpointResult, error) {
	cp := tlog.Checkpoint{Origin: key.Origin(), Size: size, Root: root}
	text, err := key.Sign(cp)
	if err != nil {
		return api.AuditCheckpointResult{}, err
	}
	return api.AuditCheckpointResult{Checkpoint: text, Origin: cp.Origin, Size: size, Root: hex.EncodeToString(root[:]), Key: key.VerifierKey}, nil
}

// AuditProve returns the inclusion proof of entry seq in the tree of
// every entry written so far, with a checkpoint of that tree.
func (s *Store) AuditProve(ctx context.Context, seq int64) (api.AuditProveResult, error) {
	s.mu.Lock()
	headSeq := s.head.seq
	s.mu.Unlock()
	if seq < 1 || seq > headSeq {
		return api.AuditProveResult{}, fmt.Errorf("%w: the log holds entries 1 to %d, not %d", audit.ErrNoEntry, headSeq, seq)
	}
	es, err := s.AuditBefore(ctx, seq+1, 1)
	if err != nil {
		return api.AuditProveResult{}, err
	}
	if len(es) != 1 || es[0].Seq != seq {
		return api.AuditProveResult{}, fmt.Errorf("store: entry %d is missing from the audit index", seq)
	}
	s.a.mu.Lock()
	size := s.a.log.Tree().Size()
	leaf, _ := s.a.log.Tree().Leaf(uint64(seq - 1))
	proof, perr := s.a.log.Tree().Inclusion(uint64(seq-1), size)
	root, rerr := s.a.log.Tree().Root(size)
	s.a.mu.Unlock()
	if err := errors.Join(perr, rerr); err != nil {
		return api.AuditProveResult{}, err
	}
	if c, err := canonicalLeaf(es[0]); err != nil || c != leaf {
		return api.AuditProveResult{}, fmt.Errorf("store: entry %d in the audit index is not the one in the log (run audit verify)", seq)
	}
	cp, err := s.signed(size, root)
	if err != nil {
		return api.AuditProveResult{}, err
	}
	return api.AuditProveResult{
		Entry: es[0], LeafIndex: uint64(seq - 1), LeafHash: hex.EncodeToString(leaf[:]),
		TreeSize: size, Proof: hexes(proof), Checkpoint: cp,
	}, nil
}

func canonicalLeaf(e api.AuditEntry) ([tlog.HashSize]byte, error) {
	r, err := logRecord(e)
	if err != nil {
		return [tlog.HashSize]byte{}, err
	}
	return tlog.LeafHash(r.Canonical), nil
}

func hexes(hs [][]byte) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = hex.EncodeToString(h)
	}
	return out
}

// AuditConsistency rereads the audit log from its files, up to the
// entries this Store has written, and proves that it extends the tree of
// the signed checkpoint text (which must be signed by this log's key).
// If it does not, the result says whether entries were removed or
// rewritten, and names the first broken entry when the chain shows one.
func (s *Store) AuditConsistency(ctx context.Context, text string) (api.AuditConsistencyResult, error) {
	cp, err := s.key.Open(text)
	if err != nil {
		return api.AuditConsistencyResult{}, fmt.Errorf("%w: %w", audit.ErrBadCheckpoint, err)
	}
	s.mu.Lock()
	head := s.head
	s.mu.Unlock()
	s.a.mu.Lock()
	memRoot, err := s.a.log.Tree().Root(uint64(head.seq))
	s.a.mu.Unlock()
	if err != nil {
		return api.AuditConsistencyResult{}, err
	}
	res, err := consistency(s.logDir, s.key, head, cp)
	if err != nil {
		return res, err
	}
	if res.OK && res.Checkpoint.Root != hex.EncodeToString(memRoot[:]) {
		res.OK = false
		res.Problem = fmt.Sprintf("the log's files hash to root %s at %d entries, but this process wrote a tree with root %x: the log was rewritten", res.Checkpoint.Root, res.Size, memRoot)
		res.Proof, res.Checkpoint = nil, nil
	}
	return res, nil
}

// VerifyCheckpointFile checks offline, as VerifyFile does, that the audit
// log of the state database at path extends the signed checkpoint text;
// the signature is checked with the log's own key (KeyFile).
func VerifyCheckpointFile(ctx context.Context, path, text string) (api.AuditConsistencyResult, error) {
	abs, db, err := openReadOnly(ctx, path)
	if err != nil {
		return api.AuditConsistencyResult{}, err
	}
	db.Close()
	dir := AuditDir(abs)
	if ok, err := tlog.Exists(dir); err != nil {
		return api.AuditConsistencyResult{}, err
	} else if !ok {
		return api.AuditConsistencyResult{}, fmt.Errorf("store: %s holds no audit log", dir)
	}
	key, err := tlog.ReadKey(KeyFile(abs))
	if err != nil {
		return api.AuditConsistencyResult{}, err
	}
	cp, err := key.Open(text)
	if err != nil {
		return api.AuditConsistencyResult{}, fmt.Errorf("%w: %w", audit.ErrBadCheckpoint, err)
	}
	return consistency(dir, key, chainHead{}, cp)
}

// consistency reads the log in dir (up to head, when not zero) into a
// tree and compares it with cp.
func consistency(dir string, key *tlog.Key, head chainHead, cp tlog.Checkpoint) (api.AuditConsistencyResult, error) {
	var tree tlog.Tree
	vr, _, err := verifyLog(dir, head, verifyPoint{}, &tree)
	if err != nil {
		return api.AuditConsistencyResult{}, err
	}
	size := tree.Size()
	res := api.AuditConsistencyResult{OldSize: cp.Size, Size: size}
	chain := ""
	if !vr.OK {
		res.BrokenSeq = vr.BrokenSeq
		chain = fmt.Sprintf("; the log is broken at entry %d: %s", vr.BrokenSeq, vr.Problem)
	}
	if size < cp.Size {
		if res.BrokenSeq == 0 {
			res.BrokenSeq = int64(size) + 1
		}
		res.Problem = fmt.Sprintf("the log holds %d entries but the checkpoint was signed over %d: %s%s",
			size, cp.Size, entryRange(size+1, cp.Size), chain)
		return res, nil
	}
	root, err := tree.Root(cp.Size)
	if err != nil {
		return res, err
	}
	if root != cp.Root {
		res.Problem = fmt.Sprintf("the log's first %d entries hash to root %x, not the checkpoint's %x: entries before the checkpoint were rewritten%s",
			cp.Size, root, cp.Root, chain)
		return res, nil
	}
	proof, err := tree.Consistency(cp.Size, size)
	if err != nil {
		return res, err
	}
	now, err := tree.Root(size)
	if err != nil {
		return res, err
	}
	signed, err := signCheckpoint(key, size, now)
	if err != nil {
		return res, err
	}
	res.Proof, res.Checkpoint = hexes(proof), &signed
	res.OK = true
	if !vr.OK {
		// The old tree is intact, but the chain after it is not.
		res.OK = false
		res.Problem = fmt.Sprintf("the log extends the checkpoint, but it is broken at entry %d: %s", vr.BrokenSeq, vr.Problem)
	}
	return res, nil
}

// entryRange says which entries were removed.
func entryRange(from, to uint64) string {
	if from == to {
		return fmt.Sprintf("entry %d was removed", from)
	}
	return fmt.Sprintf("entries %d to %d were removed", from, to)
}
