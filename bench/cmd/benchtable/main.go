// Command benchtable prints the table of the bench module's figures against
// their floors and baselines from raw `go test -bench` output: for every
// row, the median of each benchmark's runs, the baseline's median, their
// ratio and the goal.
//
// Usage:
//
//	go run ./cmd/benchtable results/2026-11-23-suite.txt
//	go run ./cmd/benchtable -page ../docs/benchmarks.md results/2026-11-23-suite.txt
//
// With -page it writes the page docs/benchmarks.md instead: the run's
// date, machine and commands, as the raw output's header records them,
// then the table. bench/run does so after a run of the whole suite.
//
// Rows whose benchmark is missing from the input are printed with "—".
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
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
	// (the enqueue of 100,000 keys and their drain); the drain alone,
	// which reconciles/s times, is reported beside it without a goal.
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
	// The same with a handler that does 10 µs of work per run.
	{"ControllerThroughputObservedWork10us", "reconciles/s", "ControllerThroughputWork10us", "reconciles/s", false, 0.97},
	{"ControllerThroughputObservedWork10us", "cpu-ns/reconcile", "ControllerThroughputWork10us", "cpu-ns/reconcile", true, 0},
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

// differences are rows whose figure is compared with its baseline by
// difference (the figure less the baseline's, in the figure's unit) rather
// than by ratio: a cost added to a path, stated in that path's unit. The
// goal bounds the difference.
var differences = []row{
	// What watching costs a handler run: metrics through the prometheus
	// module and a slog logger at Info, in CPU per run, above the plain
	// twin.
	{"ControllerThroughputObserved", "cpu-ns/reconcile", "ControllerThroughput", "cpu-ns/reconcile", true, 150},
}

func main() {
	page := flag.String("page", "", "write the benchmarks page (docs/benchmarks.md) to this file instead of printing the table")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: benchtable [-page FILE] RESULTS...")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() < 1 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*page, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(page string, files []string) error {
	if page == "" {
		med, err := medians(files)
		if err != nil {
			return err
		}
		printTable(os.Stdout, med)
		return nil
	}
	var buf bytes.Buffer
	if err := printPage(&buf, files); err != nil {
		return err
	}
	return os.WriteFile(page, buf.Bytes(), 0o644)
}

// pageHeader is what the page says of the runs: each one's file (as
// bench/ names it) and the date, machine and commands of its header.
const pageHeader = `# Benchmarks

<!-- Written by bench/run (go run ./cmd/benchtable -page): edit bench/cmd/benchtable, not this page. -->

Each figure is the median of its rounds, beside its floor or baseline (the same work in a plain
loop, fsync, the raw Docker client, or a peer library) measured in the same run, with their ratio
and the goal for it; a goal of "—" is a figure reported without one. Compare ratios within one
run, not figures across runs or machines.

To run the suite (raw output to bench/results/, then benchstat, the table and this page):

` + "```sh" + `
bench/run                    # the whole suite in 5 rounds (COUNT=n for another count)
BENCH='Walk|Plan' bench/run  # a subset, printed only
` + "```" + `
`

// printPage writes the benchmarks page from the raw output in files.
func printPage(w io.Writer, files []string) error {
	med, err := medians(files)
	if err != nil {
		return err
	}
	fmt.Fprint(w, pageHeader)
	for _, name := range files {
		h, err := runHeader(name)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\nThe run: `bench/%s`\n\n", filepath.ToSlash(filepath.Clean(name)))
		for _, f := range []string{"date", "machine", "commands (in bench/), each round"} {
			fmt.Fprintf(w, "- %s: %s\n", f, orDash(h[f]))
		}
	}
	fmt.Fprintln(w)
	printTable(w, med)
	return nil
}

// runHeader reads the "# field: value" lines bench/run writes at the top
// of its raw output.
func runHeader(name string) (map[string]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "# ")
		if !ok {
			break
		}
		if k, v, ok := strings.Cut(line, ": "); ok {
			h[k] = v
		}
	}
	return h, sc.Err()
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

// printTable writes the table in Markdown: the rows, each difference
// after the last row of its benchmark (at the end when there is none).
func printTable(w io.Writer, med map[key]float64) {
	fmt.Fprintln(w, "| benchmark | metric | median | compared with | its median | ratio or difference | goal | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	after := map[string]int{} // a benchmark's last row
	for i, r := range rows {
		after[r.bench] = i
	}
	var last []row
	for _, d := range differences {
		if _, ok := after[d.bench]; !ok {
			last = append(last, d)
		}
	}
	for i, r := range rows {
		printRow(w, med, r, false)
		if after[r.bench] == i {
			for _, d := range differences {
				if d.bench == r.bench {
					printRow(w, med, d, true)
				}
			}
		}
	}
	for _, d := range last {
		printRow(w, med, d, true)
	}
}

// printRow writes one row: r's figure against its baseline by ratio, or by
// difference when diff is set.
func printRow(w io.Writer, med map[key]float64, r row, diff bool) {
	v, ok := med[key{r.bench, r.unit}]
	if !ok {
		fmt.Fprintf(w, "| %s | %s | — | %s | — | — | %s | — |\n", r.bench, r.unit, orDash(r.base), goalText(r, diff))
		return
	}
	cmp, baseVal := v, "—"
	if r.base != "" {
		b, ok := med[key{r.base, r.baseUnit}]
		if !ok || (b == 0 && !diff) {
			fmt.Fprintf(w, "| %s | %s | %s | %s | — | — | %s | — |\n", r.bench, r.unit, format(v, r.unit), r.base, goalText(r, diff))
			return
		}
		baseVal = format(b, r.baseUnit)
		if diff {
			cmp = v - b
		} else {
			cmp = v / b
		}
	}
	met := cmp >= r.goal
	if r.atMost {
		met = cmp <= r.goal
	}
	metText := yesNo(met)
	if r.goal == 0 {
		metText = "—"
	}
	cmpText := "—"
	switch {
	case r.base == "":
	case diff:
		cmpText = signed(cmp, r.unit)
	default:
		cmpText = fmt.Sprintf("%.2f×", cmp)
	}
	fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n",
		r.bench, r.unit, format(v, r.unit), orDash(r.base), baseVal, cmpText, goalText(r, diff), metText)
}

// signed prints a difference with its sign, in its unit.
func signed(v float64, unit string) string {
	if v < 0 {
		return "−" + format(-v, unit)
	}
	return "+" + format(v, unit)
}

// goalText is a row's goal; a difference's reads as a signed amount.
func goalText(r row, diff bool) string {
	if diff && r.goal != 0 {
		op := "≥"
		if r.atMost {
			op = "≤"
		}
		return op + " " + signed(r.goal, r.unit)
	}
	return goal(r)
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
