package tlog

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
)

// chain makes n records continuing a log of from records whose last hash
// is prev; the hashes are stand-ins (tlog does not check them).
func chain(from uint64, prev [HashSize]byte, n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		idx := from + uint64(i)
		recs[i] = Record{Index: idx, Prev: prev, Canonical: fmt.Appendf(nil, `{"kind":"t","seq":%d}`, idx+1)}
		recs[i].Hash = sha256.Sum256(append(prev[:], recs[i].Canonical...))
		prev = recs[i].Hash
	}
	return recs
}

func openLog(t testing.TB, dir string, opts Options) (*Log, Recovery) {
	t.Helper()
	l, rec, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, rec
}

func TestRecordRoundTrip(t *testing.T) {
	r := Record{Index: 41, Canonical: []byte(`{"seq":42}`)}
	r.Prev[0], r.Hash[31] = 1, 2
	b := AppendRecord([]byte("xx"), &r)[2:]
	if len(b) != r.Size() {
		t.Fatalf("encoded %d bytes, Size says %d", len(b), r.Size())
	}
	got, n, err := DecodeRecord(append(b, 7, 7))
	if err != nil || n != len(b) || got.Index != r.Index || got.Prev != r.Prev || got.Hash != r.Hash || !bytes.Equal(got.Canonical, r.Canonical) {
		t.Fatalf("DecodeRecord = %+v, %d, %v", got, n, err)
	}
	for i := range b {
		c := bytes.Clone(b)
		c[i] ^= 0x01
		if _, _, err := DecodeRecord(c); err == nil {
			t.Errorf("a record with byte %d flipped decoded", i)
		}
	}
	for i := range len(b) {
		if _, _, err := DecodeRecord(b[:i]); !errors.Is(err, ErrShort) {
			t.Errorf("a record cut to %d bytes: %v, want ErrShort", i, err)
		}
	}
}

// FuzzDecodeRecord: no input makes the decoder panic or claim more bytes
// than it was given, and whatever decodes encodes back to the same bytes.
func FuzzDecodeRecord(f *testing.F) {
	r := chain(0, [HashSize]byte{}, 1)[0]
	f.Add(AppendRecord(nil, &r))
	f.Add([]byte{0, 0, 0, 72, 0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := DecodeRecord(b)
		if err != nil {
			return
		}
		if n > len(b) {
			t.Fatalf("decoded %d bytes of %d", n, len(b))
		}
		if again := AppendRecord(nil, &r); !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding gives %x, want %x", again, b[:n])
		}
	})
}

func TestAppendReopen(t *testing.T) {
	dir := t.TempDir()
	l, rec := openLog(t, dir, Options{SegmentSize: 300})
	if rec.Entries != 0 || rec.Segments != 0 {
		t.Fatalf("new log: %+v", rec)
	}
	var all []Record
	for range 10 {
		recs := chain(l.Size(), l.Head(), 3)
		if err := l.Append(recs); err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	root, _ := l.Tree().Root(l.Size())
	l.Close()
	names, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	if len(names) < 3 {
		t.Errorf("%d segments for 30 records of segment size 300, want several", len(names))
	}
	l2, rec := openLog(t, dir, Options{SegmentSize: 300})
	if rec.Entries != 30 || rec.Torn != nil || rec.Corrupt != nil || l2.Head() != all[29].Hash {
		t.Fatalf("reopened: %+v, head %x", rec, l2.Head())
	}
	if r2, _ := l2.Tree().Root(30); r2 != root {
		t.Errorf("root after reopening %x, want %x", r2, root)
	}
	var n int
	if _, err := Scan(dir, Position{}, math.MaxUint64, true, func(_ Position, r *Record) error {
		if r.Hash != all[n].Hash || !bytes.Equal(r.Canonical, all[n].Canonical) {
			t.Errorf("record %d differs", n)
		}
		n++
		return nil
	}); err != nil || n != 30 {
		t.Errorf("Scan read %d records, %v", n, err)
	}
	if err := l2.Append(chain(5, l2.Head(), 1)); err == nil {
		t.Error("appending a record that does not continue the log succeeded")
	}
}

// FuzzRecovery writes a log, replaces the bytes of its last segment from
// some offset on with the fuzzer's, and opens it: Open never panics, every
// record before the offset survives, and a second Open finds nothing more
// to repair and the same entries.
func FuzzRecovery(f *testing.F) {
	f.Add(uint16(0), []byte{})
	f.Add(uint16(30), []byte{1, 2, 3})
	f.Add(uint16(200), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint16(500), bytes.Repeat([]byte{0xff}, 40))
	f.Fuzz(func(t *testing.T, at uint16, tail []byte) {
		dir := t.TempDir()
		l, _ := openLog(t, dir, Options{})
		recs := chain(0, [HashSize]byte{}, 8)
		if err := l.Append(recs); err != nil {
			t.Fatal(err)
		}
		l.Close()
		name := filepath.Join(dir, segName(0))
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		cut := min(int(at), len(b))
		intact := 0 // records wholly before cut
		for off := headerSize; intact < len(recs); intact++ {
			off += recs[intact].Size()
			if off > cut {
				break
			}
		}
		if err := os.WriteFile(name, append(b[:cut:cut], tail...), 0o600); err != nil {
			t.Fatal(err)
		}
		l1, rec, err := Open(dir, Options{})
		if err != nil {
			return // a header made unreadable: reported, not repaired
		}
		defer l1.Close()
		if rec.Entries < uint64(intact) && rec.Corrupt == nil {
			t.Fatalf("%d entries after recovery, %d were intact; %+v", rec.Entries, intact, rec)
		}
		if rec.Corrupt != nil {
			return
		}
		size := l1.Size()
		l1.Close()
		l2, rec2, err := Open(dir, Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Close()
		if rec2.Torn != nil || rec2.Corrupt != nil || l2.Size() != size {
			t.Fatalf("second open: %+v, %d entries; first had %d", rec2, l2.Size(), size)
		}
		if err := l2.Append(chain(size, l2.Head(), 1)); err != nil {
			t.Fatalf("append after recovery: %v", err)
		}
	})
}

func TestTornAndCorrupt(t *testing.T) {
	dir := t.TempDir()
	l, _ := openLog(t, dir, Options{})
	recs := chain(0, [HashSize]byte{}, 4)
	if err := l.Append(recs); err != nil {
		t.Fatal(err)
	}
	l.Close()
	name := filepath.Join(dir, segName(0))
	b, _ := os.ReadFile(name)
	last := len(b) - recs[3].Size()

	// Zeros where the last record's data should be (a power loss on a
	// file system that grew the file first) are a torn write too.
	z := append(bytes.Clone(b[:last]), make([]byte, 100)...)
	os.WriteFile(name, z, 0o600)
	l2, rec := openLog(t, dir, Options{})
	if rec.Torn == nil || rec.Torn.Index != 3 || rec.Entries != 3 {
		t.Errorf("zeroed tail: %+v", rec)
	}
	l2.Close()

	// A complete last record with a wrong checksum is damage, not a torn
	// write, and is kept.
	bad := bytes.Clone(b)
	bad[len(bad)-1] ^= 1
	os.WriteFile(name, bad, 0o600)
	l3, rec := openLog(t, dir, Options{})
	if rec.Corrupt == nil || rec.Corrupt.Index != 3 || l3.Err() == nil {
		t.Errorf("bad checksum of the last record: %+v", rec)
	}
	if after, _ := os.ReadFile(name); len(after) != len(bad) {
		t.Errorf("a damaged record was cut off")
	}
	if _, _, err := Open(dir, Options{}); err == nil {
		t.Error("a second Open of a log in use succeeded")
	}
}
