package tlog

import (
	"crypto/sha256"
	"fmt"

	"github.com/transparency-dev/merkle/compact"
	"github.com/transparency-dev/merkle/proof"
	"github.com/transparency-dev/merkle/rfc6962"
)

// Hasher is RFC 6962's: SHA-256 with 0x00 before a leaf and 0x01 before
// two children.
var Hasher = rfc6962.DefaultHasher

// LeafHash is the RFC 6962 hash of the leaf c, an entry's canonical form.
func LeafHash(c []byte) [HashSize]byte {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(c)
	var out [HashSize]byte
	h.Sum(out[:0])
	return out
}

// Tree is an RFC 6962 Merkle tree that grows by appending leaf hashes. It
// keeps every node of every perfect subtree (two hashes per leaf), so the
// root of any earlier size and any inclusion or consistency proof come
// from memory. A Tree is not safe for concurrent use.
type Tree struct {
	// levels[0] holds the leaf hashes; levels[k][i] the root of the
	// perfect subtree over leaves [i<<k, (i+1)<<k).
	levels [][][HashSize]byte
}

// Size is the number of leaves.
func (t *Tree) Size() uint64 {
	if len(t.levels) == 0 {
		return 0
	}
	return uint64(len(t.levels[0]))
}

// Leaf returns the hash of leaf index i.
func (t *Tree) Leaf(i uint64) ([HashSize]byte, bool) {
	if i >= t.Size() {
		return [HashSize]byte{}, false
	}
	return t.levels[0][i], true
}

// Append adds a leaf hash.
func (t *Tree) Append(leaf [HashSize]byte) {
	h := leaf
	for k := 0; ; k++ {
		if k == len(t.levels) {
			t.levels = append(t.levels, nil)
		}
		t.levels[k] = append(t.levels[k], h)
		n := len(t.levels[k])
		if n%2 == 1 {
			return
		}
		var in [1 + 2*HashSize]byte
		in[0] = 1
		copy(in[1:], t.levels[k][n-2][:])
		copy(in[1+HashSize:], h[:])
		h = sha256.Sum256(in[:])
	}
}

// Truncate drops the leaves from size on.
func (t *Tree) Truncate(size uint64) {
	for k := range t.levels {
		t.levels[k] = t.levels[k][:min(uint64(len(t.levels[k])), size>>k)]
	}
}

func (t *Tree) node(id compact.NodeID) ([]byte, error) {
	if int(id.Level) >= len(t.levels) || id.Index >= uint64(len(t.levels[id.Level])) {
		return nil, fmt.Errorf("tlog: tree of %d leaves has no node %d at level %d", t.Size(), id.Index, id.Level)
	}
	h := t.levels[id.Level][id.Index]
	return h[:], nil
}

// Root returns the root hash of the tree's first size leaves.
func (t *Tree) Root(size uint64) ([HashSize]byte, error) {
	var out [HashSize]byte
	if size > t.Size() {
		return out, fmt.Errorf("tlog: no tree of size %d in a log of %d entries", size, t.Size())
	}
	if size == 0 {
		copy(out[:], Hasher.EmptyRoot())
		return out, nil
	}
	ids := compact.RangeNodes(0, size, nil)
	acc, err := t.node(ids[len(ids)-1])
	if err != nil {
		return out, err
	}
	for i := len(ids) - 2; i >= 0; i-- {
		left, err := t.node(ids[i])
		if err != nil {
			return out, err
		}
		acc = Hasher.HashChildren(left, acc)
	}
	copy(out[:], acc)
	return out, nil
}

// Inclusion returns the RFC 9162 inclusion proof of leaf index in the
// tree of size leaves.
func (t *Tree) Inclusion(index, size uint64) ([][]byte, error) {
	if size > t.Size() {
		return nil, fmt.Errorf("tlog: no tree of size %d in a log of %d entries", size, t.Size())
	}
	nodes, err := proof.Inclusion(index, size)
	if err != nil {
		return nil, fmt.Errorf("tlog: %w", err)
	}
	return t.fetch(nodes)
}

// Consistency returns the RFC 9162 consistency proof from the tree of
// size1 leaves to the tree of size2.
func (t *Tree) Consistency(size1, size2 uint64) ([][]byte, error) {
	if size2 > t.Size() {
		return nil, fmt.Errorf("tlog: no tree of size %d in a log of %d entries", size2, t.Size())
	}
	nodes, err := proof.Consistency(size1, size2)
	if err != nil {
		return nil, fmt.Errorf("tlog: %w", err)
	}
	return t.fetch(nodes)
}

func (t *Tree) fetch(nodes proof.Nodes) ([][]byte, error) {
	hashes := make([][]byte, len(nodes.IDs))
	for i, id := range nodes.IDs {
		h, err := t.node(id)
		if err != nil {
			return nil, err
		}
		hashes[i] = h
	}
	p, err := nodes.Rehash(hashes, Hasher.HashChildren)
	if err != nil {
		return nil, fmt.Errorf("tlog: %w", err)
	}
	return p, nil
}
