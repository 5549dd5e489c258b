package atspi

import (
	"context"
	"slices"
	"sync"
	"testing"
)

// Benchmarks of gtk3-widget-factory's element tree (ElementTree: role,
// name, states, actions and the text of text fields for every node),
// beside a pyatspi walk of the same application in the same run:
//
//	scripts/desktop run --apps -- go test -run XXX -bench Tree ./internal/adapter/atspi/
//
// Each reports the adapter's node count and pyatspi's, so both are seen
// to read the same tree, and how many times faster the adapter is:
//
//	pyatspi_ms       pyatspi's first walk in a fresh process (role, name, children)
//	pyatspi_full_ms  the same, also reading states, actions and texts
//	pyatspi_warm_ms  pyatspi's best later walk in that process
//	x_vs_pyatspi     pyatspi_ms / the adapter's time per tree
//	x_vs_pyatspi_full pyatspi_full_ms / the adapter's time per tree

type pyBaseline struct {
	nodes              int
	ms, warmMS, fullMS float64
}

var (
	baselineOnce sync.Once
	baseline     pyBaseline
)

func pyatspiBaseline(b *testing.B) pyBaseline {
	baselineOnce.Do(func() {
		n, ms := pyatspiWalk(b, "gtk3-widget-factory", "minimal", 3)
		_, full := pyatspiWalk(b, "gtk3-widget-factory", "full", 1)
		baseline = pyBaseline{nodes: n, ms: ms[0], warmMS: slices.Min(ms[1:]), fullMS: full[0]}
	})
	return baseline
}

func benchTree(b *testing.B, cfg Config, cold bool) {
	a := desktop(b, cfg)
	ctx := context.Background()
	ap, err := a.appByID(ctx, widgetFactory)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := a.ElementTree(ctx, widgetFactory); err != nil { // connect, find the app, open the direct connection
		b.Fatal(err)
	}
	py := pyatspiBaseline(b)
	b.ReportAllocs()
	b.ResetTimer()
	var nodes int
	for i := 0; i < b.N; i++ {
		if cold {
			ap.forget()
		}
		els, err := a.ElementTree(ctx, widgetFactory)
		if err != nil {
			b.Fatal(err)
		}
		nodes = len(els)
	}
	perTreeMS := float64(b.Elapsed().Microseconds()) / 1000 / float64(b.N)
	b.ReportMetric(float64(nodes), "nodes")
	b.ReportMetric(float64(py.nodes), "pyatspi_nodes")
	b.ReportMetric(py.ms, "pyatspi_ms")
	b.ReportMetric(py.warmMS, "pyatspi_warm_ms")
	b.ReportMetric(py.fullMS, "pyatspi_full_ms")
	b.ReportMetric(py.ms/perTreeMS, "x_vs_pyatspi")
	b.ReportMetric(py.fullMS/perTreeMS, "x_vs_pyatspi_full")
}

// BenchmarkTreeCold fetches the tree with nothing cached (the bus and the
// direct connection stay open, as they do in the daemon).
func BenchmarkTreeCold(b *testing.B) { benchTree(b, Config{}, true) }

// BenchmarkTreeWarm reads the tree the events keep current.
func BenchmarkTreeWarm(b *testing.B) { benchTree(b, Config{}, false) }

// BenchmarkTreeColdVariants shows what each speed-up is worth: every
// call through the bus daemon, and no Cache.GetItems (a walk of every
// node).
func BenchmarkTreeColdVariants(b *testing.B) {
	b.Run("bus", func(b *testing.B) { benchTree(b, Config{NoDirect: true}, true) })
	b.Run("walk", func(b *testing.B) { benchTree(b, Config{NoCacheInterface: true}, true) })
}
