package store

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/pcp-dev/pcp/api"
	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/tlog"
)

// readRecords reads every record of the log of the database at path.
func readRecords(t testing.TB, path string) []tlog.Record {
	t.Helper()
	var recs []tlog.Record
	if _, err := tlog.Scan(AuditDir(path), tlog.Position{}, math.MaxUint64, false, func(_ tlog.Position, r *tlog.Record) error {
		c := *r
		c.Canonical = bytes.Clone(r.Canonical)
		recs = append(recs, c)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return recs
}

// writeRecords replaces the log of the database at path with recs, in one
// segment written in place (as another process with write access to the
// files would), every record with a valid checksum.
func writeRecords(t testing.TB, path string, recs []tlog.Record) {
	t.Helper()
	dir := AuditDir(path)
	names, err := filepath.Glob(filepath.Join(dir, "*.log"))
	if err != nil {
		t.Fatal(err)
	}
	b := append([]byte("PCPALOG\x01"), make([]byte, 8)...)
	for i := range recs {
		b = tlog.AppendRecord(b, &recs[i])
	}
	first := filepath.Join(dir, "00000000000000000000.log")
	for _, n := range names {
		if n != first {
			os.Remove(n)
		}
	}
	if err := os.WriteFile(first, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// editEntries rewrites the log with fn applied to its entries; the
// records keep the hashes the edited entries carry.
func editEntries(t testing.TB, path string, fn func([]api.AuditEntry) []api.AuditEntry) {
	t.Helper()
	var es []api.AuditEntry
	for _, r := range readRecords(t, path) {
		e, err := audit.ParseCanonical(r.Canonical, r.Prev[:], r.Hash[:])
		if err != nil {
			t.Fatal(err)
		}
		es = append(es, e)
	}
	es = fn(es)
	recs := make([]tlog.Record, len(es))
	for i, e := range es {
		r, err := logRecord(e)
		if err != nil {
			t.Fatal(err)
		}
		recs[i] = r
	}
	writeRecords(t, path, recs)
}

// segmentBytes returns the first segment of the log and its file name.
func segmentBytes(t testing.TB, path string) ([]byte, string) {
	t.Helper()
	name := filepath.Join(AuditDir(path), "00000000000000000000.log")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b, name
}

// recordOffset returns the byte offset of the record of entry seq in the
// first segment.
func recordOffset(t testing.TB, b []byte, seq int64) int {
	t.Helper()
	off := 16
	for i := int64(1); i < seq; i++ {
		if off+8 > len(b) {
			t.Fatalf("segment ends before entry %d", seq)
		}
		off += 8 + int(binary.BigEndian.Uint32(b[off:]))
	}
	return off
}
