package store

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/pcp-dev/pcp/internal/audit"
	"github.com/pcp-dev/pcp/internal/tlog"
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
	cpu := cpuTime(b)
	defer reportCPU(b, cpu)
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
	cpu := cpuTime(b)
	defer reportCPU(b, cpu)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.AppendAudit(ctx, r); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRawWrite is the baseline of BenchmarkAppendAudit: one
// write(2) per op of the bytes one AppendAudit writes (the encoded record
// of the same entry) to a file in the same directory kind, with nothing
// else: no chain, no tree, no waking of anyone.
func BenchmarkRawWrite(b *testing.B) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	p, err := audit.Prepare(record(1))
	if err != nil {
		b.Fatal(err)
	}
	_, h, err := p.Seal(nil, 1)
	if err != nil {
		b.Fatal(err)
	}
	r := tlog.Record{Index: 0, Canonical: p.AppendCanonical(nil, 1)}
	copy(r.Hash[:], h)
	buf := tlog.AppendRecord(nil, &r)
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	cpu := cpuTime(b)
	defer reportCPU(b, cpu)
	for b.Loop() {
		if _, err := f.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawInsert is a second baseline: one committed single-row INSERT of
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

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per op since start, every
// goroutine's (the writer's included): on a shared machine it moves less
// than the wall time does.
func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime(b)-start)/float64(b.N), "cpu-ns/op")
}
