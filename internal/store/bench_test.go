package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/pcp-dev/pcp/internal/audit"
)

// benchCallers is how many goroutines BenchmarkAppendAuditParallel runs,
// whatever GOMAXPROCS is: group commit pays off with concurrent callers,
// not with cores.
const benchCallers = 64

// BenchmarkAppendAudit is one caller appending and waiting for each
// commit.
func BenchmarkAppendAudit(b *testing.B) {
	s, _ := openFile(b)
	ctx := context.Background()
	r := record(1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.AppendAudit(ctx, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendAuditParallel is benchCallers callers appending at once;
// ns/op is wall time per entry.
func BenchmarkAppendAuditParallel(b *testing.B) {
	s, _ := openFile(b)
	ctx := context.Background()
	r := record(1)
	b.SetParallelism((benchCallers + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.AppendAudit(ctx, r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRawInsert is the baseline: one committed single-row INSERT of
// a comparable row per op, through database/sql, on the same kind of file
// (WAL, synchronous=NORMAL), with no chain and no writer goroutine.
func BenchmarkRawInsert(b *testing.B) {
	path := filepath.Join(b.TempDir(), "raw.db")
	db, err := sql.Open("sqlite", fileDSN(path, url.Values{
		"_pragma": {"busy_timeout(5000)", "journal_mode(WAL)", "synchronous(NORMAL)", "foreign_keys(1)"},
		"_txlock": {"immediate"},
	}))
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	ctx := context.Background()
	if err := migrate(ctx, db); err != nil {
		b.Fatal(err)
	}
	ins, err := db.PrepareContext(ctx, insertAuditSQL)
	if err != nil {
		b.Fatal(err)
	}
	defer ins.Close()
	e, _, err := audit.Seal(nil, 1, record(1))
	if err != nil {
		b.Fatal(err)
	}
	detail := string(e.Detail)
	b.ReportAllocs()
	seq := int64(0)
	for b.Loop() {
		seq++
		_, err := ins.ExecContext(ctx, seq, e.Time, e.Kind, e.Source, e.Actor, e.AppID, e.CapabilityID,
			e.ParamsDigest, e.Outcome, e.DurationUS, detail, e.PrevHash, e.Hash)
		if err != nil {
			b.Fatal(fmt.Errorf("insert %d: %w", seq, err))
		}
	}
}
