// Command benchtable prints the table of the bench module's figures against
// their floors and baselines from raw `go test -bench` output: for every
// row, the median of each benchmark's runs, the baseline's median, their
// ratio and the goal.
//
// Usage:
//
//	go run ./cmd/benchtable results/2026-11-23-suite.txt
//
// Rows whose benchmark is missing from the input are printed with "—".
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// row is one line of the table: a figure, what it is compared with, and the
// goal for the ratio (or for the figure itself when there is no baseline).
type row struct {
	bench, unit string
	// base and baseUnit name the baseline; base "" compares the figure
	// with goal directly.
	base, baseUnit string
	// atMost: the goal is an upper bound (true) or a lower bound (false).
	atMost bool
	// goal 0: the row is reported, with its ratio, and has no goal.
	goal float64
}

// rows is the benchmark table, with its goals, in its order.
var rows = []row{
	// The walk against the floor of a walk that keeps a timed result per
	// item (BenchmarkWalkFloorRecorded10k), at the default parallelism and
	// with one worker.
	{"WalkNoop10k", "ns/item", "WalkFloorRecorded10k", "ns/item", true, 2.0},
	{"WalkNoop10kPar1", "ns/item", "WalkFloorRecorded10k", "ns/item", true, 2.0},
	{"WalkNoop10k", "allocs/item", "", "", true, 1},
	// The same in CPU time, which other processes on a shared machine
	// disturb far less than the elapsed time.
	{"WalkNoop10k", "cpu-ns/item", "WalkFloorRecorded10k", "cpu-ns/item", true, 0},
	{"WalkNoop10kPar1", "cpu-ns/item", "WalkFloorRecorded10k", "cpu-ns/item", true, 0},
	// One reading of the monotonic clock per item, which a walk needs to
	// time its items, against the bare loop (BenchmarkWalkFloor10k): why
	// the walk is measured against BenchmarkWalkFloorRecorded10k.
	{"WalkFloorClock10k", "ns/item", "WalkFloor10k", "ns/item", true, 0},
	// The critical path against the walk's own schedule at zero dispatch
	// cost. "efficiency", against the larger of the critical path and the
	// work over the parallelism, is reported without a goal: no schedule
	// passes 0.95 on this graph (TestCriticalPathBound).
	{"WalkCriticalPath", "schedule-efficiency", "", "", false, 0.97},
	{"WalkCriticalPath", "efficiency", "", "", false, 0},
	// The controller against client-go's workqueue on the whole batch
	// (the enqueue of 100,000 keys and their drain), as it was first measured
	// it; the drain alone, which reconciles/s times since 2026-11-28, is
	// reported beside it without a goal.
	{"ControllerThroughput", "batch-reconciles/s", "WorkqueueBaseline", "batch-reconciles/s", false, 1.1},
	{"ControllerThroughput", "reconciles/s", "WorkqueueBaseline", "reconciles/s", false, 0},
	{"ControllerThroughputDurable", "reconciles/s", "ControllerThroughput", "reconciles/s", false, 0.5},
	// The same load with the workers racing the enqueue for the queue.
	{"ControllerThroughputRacing", "reconciles/s", "WorkqueueBaselineRacing", "reconciles/s", false, 1.1},
	{"PlanStep1000", "ns/step", "PlanStep1", "ns/step", true, 3},
	{"DeriveStatus10k", "ns/item", "", "", true, 1000},
	{"HostcfgNoop1k", "sec/op", "HostcfgFloor1k", "sec/op", true, 1.5},
	{"ConfigTxtNoop200", "sec/op", "ConfigTxtFloor200", "sec/op", true, 2.0},
	// Against the floor that also watches each container for one
	// PollInterval after its start, as converge does to fail on an early
	// exit: what converge spends beyond the work its guarantee needs.
	{"DockerUp20", "ours/floor-watched", "", "", true, 1.05},
	{"DockerUp20", "ours/floor", "", "", true, 1.05},
	// Against compose, reported without a goal: the engine floor itself
	// needs about 0.94 of compose's time (floor/compose), which rules out
	// a goal of 0.9 of compose.
	{"DockerUp20", "ours/compose", "", "", true, 0},
	{"DockerUp20", "floor/compose", "", "", true, 0},
	{"DockerNoop20", "engine-calls/op", "", "", true, 2},
	{"DockerNoop20Process", "ours/compose", "", "", true, 1.0},
	// What seeing it costs: metrics through the prometheus module and a
	// slog logger at Info, against the plain twin.
	{"WalkNoop10kObserved", "ns/item", "WalkNoop10k", "ns/item", true, 1.1},
	{"ControllerThroughputObserved", "reconciles/s", "ControllerThroughput", "reconciles/s", false, 0.9},
	// Three controller replicas on one PostgreSQL against River on the
	// same server: its no-op job, and a job doing converge's work (an
	// object row and a history row in its completion transaction).
	{"PGControllerReplicas", "objects/s", "RiverNoop", "objects/s", false, 1.0},
	{"PGControllerReplicas", "objects/s", "RiverTransitionTx", "objects/s", false, 3.0},
	// Per object, counted the same way for both.
	{"PGControllerReplicas", "roundtrips/object", "RiverNoop", "roundtrips/object", true, 0},
	{"PGControllerReplicas", "roundtrips/object", "", "", true, 0.4},
	{"PGControllerReplicas", "writetx/object", "RiverNoop", "writetx/object", true, 0},
	{"PGControllerReplicas", "cpu-µs/object", "RiverNoop", "cpu-µs/object", true, 0},
	// The floor of converge's database work (its statements' rows and
	// guarantees in ideal batches of 16, no controller): whether a goal
	// against River is within reach, and how far the replicas are from it.
	{"PGFloor/batch=16", "objects/s", "RiverNoop", "objects/s", false, 0},
	{"PGFloor/batch=16", "cpu-µs/object", "RiverNoop", "cpu-µs/object", true, 0},
	{"PGControllerReplicas", "cpu-µs/object", "PGFloor/batch=16", "cpu-µs/object", true, 0},
	// The replica curve, against one replica.
	{"PGControllerScaling/replicas=2", "objects/s", "PGControllerScaling/replicas=1", "objects/s", false, 0},
	{"PGControllerScaling/replicas=3", "objects/s", "PGControllerScaling/replicas=1", "objects/s", false, 0},
	{"PGControllerScaling/replicas=6", "objects/s", "PGControllerScaling/replicas=1", "objects/s", false, 0},
	// A replica starting on 100,000 stored objects: time to its first
	// handled object, and the heap its view of them takes.
	{"PGControllerResume", "ms-to-first", "", "", true, 0},
	{"PGControllerResume", "B/object", "", "", true, 0},
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: benchtable RESULTS...")
		os.Exit(2)
	}
	med, err := medians(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, med)
}

// procs matches the GOMAXPROCS suffix of a benchmark's name ("-2").
var procs = regexp.MustCompile(`-[0-9]+$`)

// key names one measurement: a benchmark's base name (without the
// GOMAXPROCS suffix) and a unit.
type key struct{ bench, unit string }

// medians reads raw benchmark output from the files and returns the
// median of every benchmark's values per unit. benchfmt normalises units;
// ns/op is kept as sec/op and MB/s as B/s, every other unit as written.
func medians(files []string) (map[key]float64, error) {
	all := map[key][]float64{}
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		r := benchfmt.NewReader(f, name)
		for r.Scan() {
			res, ok := r.Result().(*benchfmt.Result)
			if !ok {
				continue // a syntax error or a unit line: not a measurement
			}
			// The full name without the GOMAXPROCS suffix, so that
			// sub-benchmarks (PGControllerScaling/replicas=2) stay apart.
			base := strings.TrimPrefix(procs.ReplaceAllString(string(res.Name.Full()), ""), "Benchmark")
			for _, v := range res.Values {
				unit, val := v.Unit, v.Value
				if v.OrigUnit != "" && v.OrigUnit != "ns/op" && v.OrigUnit != "MB/s" {
					unit, val = v.OrigUnit, v.OrigValue // ns/item stays ns/item
				}
				k := key{base, unit}
				all[k] = append(all[k], val)
			}
		}
		err = r.Err()
		f.Close()
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	med := make(map[key]float64, len(all))
	for k, vs := range all {
		slices.Sort(vs)
		n := len(vs)
		if n%2 == 1 {
			med[k] = vs[n/2]
		} else {
			med[k] = (vs[n/2-1] + vs[n/2]) / 2
		}
	}
	return med, nil
}

// printTable writes the table in Markdown.
func printTable(w io.Writer, med map[key]float64) {
	fmt.Fprintln(w, "| benchmark | metric | median | compared with | its median | ratio | goal | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		v, ok := med[key{r.bench, r.unit}]
		if !ok {
			fmt.Fprintf(w, "| %s | %s | — | %s | — | — | %s | — |\n", r.bench, r.unit, orDash(r.base), goal(r))
			continue
		}
		ratio, baseVal := v, "—"
		if r.base != "" {
			b, ok := med[key{r.base, r.baseUnit}]
			if !ok || b == 0 {
				fmt.Fprintf(w, "| %s | %s | %s | %s | — | — | %s | — |\n", r.bench, r.unit, format(v, r.unit), r.base, goal(r))
				continue
			}
			ratio, baseVal = v/b, format(b, r.baseUnit)
		}
		met := ratio >= r.goal
		if r.atMost {
			met = ratio <= r.goal
		}
		metText := yesNo(met)
		if r.goal == 0 {
			metText = "—"
		}
		ratioText := "—"
		if r.base != "" {
			ratioText = fmt.Sprintf("%.2f×", ratio)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
			r.bench, r.unit, format(v, r.unit), orDash(r.base), baseVal, ratioText, goal(r), metText)
	}
}

func goal(r row) string {
	if r.goal == 0 {
		return "—"
	}
	op := "≥"
	if r.atMost {
		op = "≤"
	}
	if r.base != "" {
		return fmt.Sprintf("%s %.2g×", op, r.goal)
	}
	return op + " " + format(r.goal, r.unit)
}

// format prints a value in its unit the way people read it.
func format(v float64, unit string) string {
	switch unit {
	case "sec/op":
		switch {
		case v >= 1:
			return fmt.Sprintf("%.2f s", v)
		case v >= 1e-3:
			return fmt.Sprintf("%.2f ms", v*1e3)
		default:
			return fmt.Sprintf("%.1f µs", v*1e6)
		}
	case "B/s":
		return fmt.Sprintf("%.1f MB/s", v/1e6)
	default:
		if v >= 1e4 {
			return fmt.Sprintf("%.0f %s", v, unit)
		}
		return fmt.Sprintf("%.4g %s", v, unit)
	}
}

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
