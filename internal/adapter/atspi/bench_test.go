package atspi

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/pcp-dev/pcp/internal/testkit"
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

// benchColdApp fetches the cold tree of an application the benchmark
// starts (start: its command), beside pyatspi's walks of the same app in
// the same run (accessible name appName), with the same metrics as
// benchTree. Without full, pyatspi's full walk is not run: it stops at Qt
// 5 and GTK 4 widgets that count actions they do not name.
func benchColdApp(b *testing.B, appID, appName, start string, full bool) {
	startApp(b, start)
	a := desktopWith(b, Config{}, appID)
	ctx := context.Background()
	ap, err := a.appByID(ctx, appID)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := a.ElementTree(ctx, appID); err != nil {
		b.Fatal(err)
	}
	n, ms := pyatspiWalk(b, appName, "minimal", 3)
	var fullMS float64
	if full {
		_, f := pyatspiWalk(b, appName, "full", 1)
		fullMS = f[0]
	}
	b.ReportAllocs()
	b.ResetTimer()
	var nodes int
	for i := 0; i < b.N; i++ {
		ap.forget()
		els, err := a.ElementTree(ctx, appID)
		if err != nil {
			b.Fatal(err)
		}
		nodes = len(els)
	}
	perTreeMS := float64(b.Elapsed().Microseconds()) / 1000 / float64(b.N)
	b.ReportMetric(float64(nodes), "nodes")
	b.ReportMetric(float64(n), "pyatspi_nodes")
	b.ReportMetric(ms[0], "pyatspi_ms")
	b.ReportMetric(slices.Min(ms[1:]), "pyatspi_warm_ms")
	b.ReportMetric(ms[0]/perTreeMS, "x_vs_pyatspi")
	if full {
		b.ReportMetric(fullMS, "pyatspi_full_ms")
		b.ReportMetric(fullMS/perTreeMS, "x_vs_pyatspi_full")
	}
}

// BenchmarkTreeColdQtCalculator: the Qt 5 calculator example's cold tree
// (every property read with Get: Qt 5 has no safe GetAll).
func BenchmarkTreeColdQtCalculator(b *testing.B) {
	benchColdApp(b, qtCalc, "calculator", testkit.QtExample(qtApps[qtCalc]), false)
}

// BenchmarkTreeColdGTK4WidgetFactory: gtk4-widget-factory's cold tree.
func BenchmarkTreeColdGTK4WidgetFactory(b *testing.B) {
	benchColdApp(b, gtk4Factory, "gtk4-widget-factory", "gtk4-widget-factory", false)
}
