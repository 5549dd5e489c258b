package tlog

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// benchCanonical is about the size of an invocation's canonical entry.
var benchCanonical = bytes.Repeat([]byte("x"), 330)

// BenchmarkLogAppend appends one record per op: encoding, checksum, the
// size check, one pwrite(2), the leaf hash and the tree.
func BenchmarkLogAppend(b *testing.B) {
	l, _, err := Open(b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	recs := []Record{{Canonical: benchCanonical}}
	b.SetBytes(int64(recs[0].Size()))
	b.ReportAllocs()
	cpu := cpuTime(b)
	defer reportCPU(b, cpu)
	for b.Loop() {
		recs[0].Index, recs[0].Prev = l.Size(), l.Head()
		recs[0].Hash[0]++
		if err := l.Append(recs); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRawWrite is BenchmarkLogAppend's baseline: one write(2) of the
// same bytes per op.
func BenchmarkRawWrite(b *testing.B) {
	f, err := os.OpenFile(filepath.Join(b.TempDir(), "raw"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	r := Record{Canonical: benchCanonical}
	buf := AppendRecord(nil, &r)
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
