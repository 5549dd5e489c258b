package tlog

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"

	"github.com/transparency-dev/merkle/proof"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The RFC 6962 test vectors (the certificate-transparency reference data):
// eight leaves, the roots of the trees of 1 to 8 of them, and inclusion
// and consistency proofs among them.
var (
	vectorLeaves = []string{"", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"}
	vectorRoots  = []string{
		"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
		"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
		"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
		"aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
		"d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
		"4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
		"76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
		"ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
		"5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
	}
	vectorInclusion = []struct {
		leaf, size uint64 // leaf is 1-based, as in the reference data
		proof      []string
	}{
		{1, 1, nil},
		{1, 8, []string{"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7", "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e", "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"}},
		{6, 8, []string{"bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b", "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0", "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
		{3, 3, []string{"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"}},
		{2, 5, []string{"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d", "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e", "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"}},
	}
	vectorConsistency = []struct {
		size1, size2 uint64
		proof        []string
	}{
		{1, 1, nil},
		{1, 8, []string{"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7", "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e", "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"}},
		{6, 8, []string{"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a", "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0", "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
		{2, 5, []string{"5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e", "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"}},
		{6, 7, []string{"0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a", "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f", "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"}},
	}
)

func vectorTree(t *testing.T) *Tree {
	var tr Tree
	for _, l := range vectorLeaves {
		tr.Append(LeafHash(unhex(t, l)))
	}
	return &tr
}

func TestRFC6962Roots(t *testing.T) {
	tr := vectorTree(t)
	for size, want := range vectorRoots {
		got, err := tr.Root(uint64(size))
		if err != nil || hex.EncodeToString(got[:]) != want {
			t.Errorf("root of %d leaves = %x, %v; want %s", size, got, err, want)
		}
	}
}

func TestRFC6962Proofs(t *testing.T) {
	tr := vectorTree(t)
	for _, v := range vectorInclusion {
		got, err := tr.Inclusion(v.leaf-1, v.size)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := hexes(got), v.proof; fmt.Sprint(g) != fmt.Sprint(w) && !(len(g) == 0 && len(w) == 0) {
			t.Errorf("inclusion proof of leaf %d in %d = %v, want %v", v.leaf, v.size, g, w)
		}
	}
	for _, v := range vectorConsistency {
		got, err := tr.Consistency(v.size1, v.size2)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := hexes(got), v.proof; fmt.Sprint(g) != fmt.Sprint(w) && !(len(g) == 0 && len(w) == 0) {
			t.Errorf("consistency proof %d to %d = %v, want %v", v.size1, v.size2, g, w)
		}
	}
}

func hexes(hs [][]byte) []string {
	var out []string
	for _, h := range hs {
		out = append(out, hex.EncodeToString(h))
	}
	return out
}

// mth is RFC 6962's MTH, computed from its definition.
func mth(leaves [][]byte) []byte {
	switch n := len(leaves); n {
	case 0:
		s := sha256.Sum256(nil)
		return s[:]
	case 1:
		h := LeafHash(leaves[0])
		return h[:]
	default:
		k := 1
		for k*2 < n {
			k *= 2
		}
		return Hasher.HashChildren(mth(leaves[:k]), mth(leaves[k:]))
	}
}

// Every root, inclusion proof and consistency proof of trees up to 70
// leaves agrees with the definition and passes transparency-dev/merkle's
// RFC 9162 verifier; altered proofs fail it.
func TestProofsVerify(t *testing.T) {
	const n = 70
	var tr Tree
	var leaves [][]byte
	for i := range n {
		leaves = append(leaves, fmt.Appendf(nil, `{"seq":%d}`, i+1))
		tr.Append(LeafHash(leaves[i]))
	}
	roots := make([][]byte, n+1)
	for size := 0; size <= n; size++ {
		r, err := tr.Root(uint64(size))
		if err != nil {
			t.Fatal(err)
		}
		if want := mth(leaves[:size]); !bytes.Equal(r[:], want) {
			t.Fatalf("root of %d leaves = %x, want %x", size, r, want)
		}
		roots[size] = r[:]
	}
	for size := uint64(1); size <= n; size++ {
		for i := range size {
			p, err := tr.Inclusion(i, size)
			if err != nil {
				t.Fatal(err)
			}
			leaf := LeafHash(leaves[i])
			if err := proof.VerifyInclusion(Hasher, i, size, leaf[:], p, roots[size]); err != nil {
				t.Fatalf("inclusion of %d in %d: %v", i, size, err)
			}
			if len(p) > 0 {
				p[0] = bytes.Repeat([]byte{1}, HashSize)
				if proof.VerifyInclusion(Hasher, i, size, leaf[:], p, roots[size]) == nil {
					t.Fatalf("an altered inclusion proof of %d in %d verified", i, size)
				}
			}
		}
		for size1 := uint64(0); size1 <= size; size1++ {
			p, err := tr.Consistency(size1, size)
			if err != nil {
				t.Fatal(err)
			}
			if err := proof.VerifyConsistency(Hasher, size1, size, p, roots[size1], roots[size]); err != nil {
				t.Fatalf("consistency %d to %d: %v", size1, size, err)
			}
			if size1 > 0 && size1 < size {
				other := bytes.Repeat([]byte{2}, HashSize)
				if proof.VerifyConsistency(Hasher, size1, size, p, other, roots[size]) == nil {
					t.Fatalf("consistency %d to %d verified against another old root", size1, size)
				}
			}
		}
	}
	if _, err := tr.Root(n + 1); err == nil {
		t.Error("root of a size beyond the tree: no error")
	}
	if _, err := tr.Inclusion(n, n); err == nil {
		t.Error("inclusion of a leaf beyond the tree: no error")
	}
}

func TestTreeTruncate(t *testing.T) {
	var a, b Tree
	for i := range 37 {
		h := LeafHash([]byte{byte(i)})
		a.Append(h)
		if i < 20 {
			b.Append(h)
		}
	}
	a.Truncate(20)
	ra, _ := a.Root(20)
	rb, _ := b.Root(20)
	if a.Size() != 20 || ra != rb {
		t.Errorf("truncated tree: size %d root %x, want 20 and %x", a.Size(), ra, rb)
	}
	a.Append(LeafHash([]byte{99}))
	b.Append(LeafHash([]byte{99}))
	ra, _ = a.Root(21)
	rb, _ = b.Root(21)
	if ra != rb {
		t.Errorf("appending after truncating: root %x, want %x", ra, rb)
	}
}
