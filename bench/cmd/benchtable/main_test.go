package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const raw = `goos: linux
goarch: amd64
pkg: github.com/convergekit/converge/bench
BenchmarkWalkNoop10k-2   	       3	   7000000 ns/op	         0.5 allocs/item	       700 ns/item
BenchmarkWalkNoop10k-2   	       3	   9000000 ns/op	         0.5 allocs/item	       900 ns/item
BenchmarkWalkNoop10k-2   	       3	   8000000 ns/op	         0.5 allocs/item	       800 ns/item
BenchmarkWalkFloor10k-2  	       3	     50000 ns/op	         0 allocs/item	       400 ns/item
BenchmarkStatusEdgeReportDecode-2      	      10	 119505394 ns/op	  10.00 MB/s
BenchmarkStatusEdgeReportDecodeStdJSON-2   	      10	  31777396 ns/op	  40.00 MB/s
`

func TestMediansKeepUnitsAndTakeTheMiddleRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.txt")
	require.NoError(t, os.WriteFile(path, []byte(raw), 0o644))
	med, err := medians([]string{path})
	require.NoError(t, err)
	assert.Equal(t, 800.0, med[key{"WalkNoop10k", "ns/item"}])
	assert.Equal(t, 0.008, med[key{"WalkNoop10k", "sec/op"}])
	assert.Equal(t, 10e6, med[key{"StatusEdgeReportDecode", "B/s"}])
}

func TestTableRatiosAgainstBaselines(t *testing.T) {
	var buf bytes.Buffer
	printTable(&buf, map[key]float64{
		{"WalkNoop10k", "ns/item"}:                      800,
		{"WalkFloor10k", "ns/item"}:                     400,
		{"ControllerThroughputDurable", "reconciles/s"}: 1e5,
		{"DockerNoop20", "engine-calls/op"}:             2,
		{"ControllerThroughput", "reconciles/s"}:        1e6,
		{"ControllerThroughput", "batch-reconciles/s"}:  8e5,
		{"WorkqueueBaseline", "reconciles/s"}:           2e6,
		{"DockerUp20", "floor/compose"}:                 0.97,
		{"DockerNoop20Process", "ours/compose"}:         0.37,
		{"WalkNoop10kPar1", "ns/item"}:                  500,
		{"WalkFloorRecorded10k", "ns/item"}:             200,
		{"WalkCriticalPath", "schedule-efficiency"}:     0.99,
		{"WalkCriticalPath", "efficiency"}:              0.94,
		{"DockerUp20", "ours/floor-watched"}:            0.93,
		{"DockerUp20", "ours/compose"}:                  0.94,
	})
	out := buf.String()
	assert.Contains(t, out, "| WalkNoop10k | ns/item | 800 ns/item | WalkFloorRecorded10k | 200 ns/item | 4.00× | ≤ 2× | no |")
	assert.Contains(t, out, "| WalkNoop10kPar1 | ns/item | 500 ns/item | WalkFloorRecorded10k | 200 ns/item | 2.50× | ≤ 2× | no |")
	assert.Contains(t, out, "| WalkCriticalPath | schedule-efficiency | 0.99 schedule-efficiency | — | — | — | ≥ 0.97 schedule-efficiency | yes |")
	assert.Contains(t, out, "| WalkCriticalPath | efficiency | 0.94 efficiency | — | — | — | — | — |", "efficiency is reported without a goal")
	assert.Contains(t, out, "| DockerUp20 | ours/floor-watched | 0.93 ours/floor-watched | — | — | — | ≤ 1.05 ours/floor-watched | yes |")
	assert.Contains(t, out, "| DockerUp20 | ours/compose | 0.94 ours/compose | — | — | — | — | — |", "compose is reported without a goal")
	assert.Contains(t, out, "| ControllerThroughputDurable | reconciles/s | 100000 reconciles/s | ControllerThroughput | 1000000 reconciles/s | 0.10× | ≥ 0.5× | no |")
	assert.Contains(t, out, "| DockerNoop20 | engine-calls/op | 2 engine-calls/op | — | — | — | ≤ 2 engine-calls/op | yes |")
	assert.Contains(t, out, "| DockerUp20 | floor/compose | 0.97 floor/compose | — | — | — | — | — |")
	assert.Contains(t, out, "| DockerNoop20Process | ours/compose | 0.37 ours/compose | — | — | — | ≤ 1 ours/compose | yes |")
	assert.Contains(t, out, "| ControllerThroughput | batch-reconciles/s | 800000 batch-reconciles/s | WorkqueueBaseline | — | — | ≥ 1.1× | — |", "a missing baseline has no ratio")
	assert.Contains(t, out, "| ControllerThroughput | reconciles/s | 1000000 reconciles/s | WorkqueueBaseline | 2000000 reconciles/s | 0.50× | — | — |", "the drain against the baseline has no goal")
	assert.Contains(t, out, "| DeriveStatus10k | ns/item | — | — | — | — | ≤ 1000 ns/item | — |", "a missing figure is a dash")
}

func TestTableDifferencesFollowTheirBenchmark(t *testing.T) {
	tests := []struct {
		name     string
		observed float64
		want     string
	}{
		{"within the goal", 600, "| ControllerThroughputObserved | cpu-ns/reconcile | 600 cpu-ns/reconcile | ControllerThroughput | 480 cpu-ns/reconcile | +120 cpu-ns/reconcile | ≤ +150 cpu-ns/reconcile | yes |"},
		{"above the goal", 700, "| ControllerThroughputObserved | cpu-ns/reconcile | 700 cpu-ns/reconcile | ControllerThroughput | 480 cpu-ns/reconcile | +220 cpu-ns/reconcile | ≤ +150 cpu-ns/reconcile | no |"},
		{"cheaper than the twin", 470, "| ControllerThroughputObserved | cpu-ns/reconcile | 470 cpu-ns/reconcile | ControllerThroughput | 480 cpu-ns/reconcile | −10 cpu-ns/reconcile | ≤ +150 cpu-ns/reconcile | yes |"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			printTable(&buf, map[key]float64{
				{"ControllerThroughput", "cpu-ns/reconcile"}:         480,
				{"ControllerThroughputObserved", "cpu-ns/reconcile"}: tt.observed,
				{"ControllerThroughputObserved", "reconciles/s"}:     9e5,
				{"ControllerThroughput", "reconciles/s"}:             1e6,
			})
			lines := strings.Split(buf.String(), "\n")
			i := slices.Index(lines, tt.want)
			require.GreaterOrEqual(t, i, 1, "the difference row is in the table:\n%s", buf.String())
			assert.True(t, strings.HasPrefix(lines[i-1], "| ControllerThroughputObserved | "), "it follows its benchmark's last row, not %q", lines[i-1])
		})
	}
	var buf bytes.Buffer
	printTable(&buf, map[key]float64{{"ControllerThroughputObserved", "cpu-ns/reconcile"}: 600})
	assert.Contains(t, buf.String(), "| ControllerThroughputObserved | cpu-ns/reconcile | 600 cpu-ns/reconcile | ControllerThroughput | — | — | ≤ +150 cpu-ns/reconcile | — |", "a missing twin has no difference")
}

// TestBenchmarksPageIsWrittenFromItsRun: docs/benchmarks.md is what
// printPage writes from the committed run it names, so its figures, date,
// machine and commands are the run's, and nobody edits them by hand.
func TestBenchmarksPageIsWrittenFromItsRun(t *testing.T) {
	t.Chdir("../..") // bench/, where bench/run writes the page from
	page, err := os.ReadFile("../docs/benchmarks.md")
	require.NoError(t, err)
	runs := regexp.MustCompile("(?m)^The run: `bench/(results/[^`]+)`$").FindAllStringSubmatch(string(page), -1)
	require.NotEmpty(t, runs, "the page names its run")
	var files []string
	for _, r := range runs {
		files = append(files, r[1])
	}
	var buf bytes.Buffer
	require.NoError(t, printPage(&buf, files))
	assert.Equal(t, buf.String(), string(page), "docs/benchmarks.md differs from what bench/run writes from %v", files)
	for _, want := range []string{"- date: 20", "- machine: ", "- commands (in bench/), each round: go test "} {
		assert.Contains(t, string(page), want)
	}
}

func TestRunHeaderReadsDateMachineAndCommands(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r.txt")
	require.NoError(t, os.WriteFile(path, []byte("# date: 2026-12-04T18:00:00Z\n# machine: 2 cores, go1.26.8 linux/amd64, X\n# commands (in bench/), each round: go test -bench .; 5 rounds\n# round 1 of 5\n"+raw), 0o644))
	h, err := runHeader(path)
	require.NoError(t, err)
	assert.Equal(t, "2026-12-04T18:00:00Z", h["date"])
	assert.Equal(t, "2 cores, go1.26.8 linux/amd64, X", h["machine"])
	assert.Equal(t, "go test -bench .; 5 rounds", h["commands (in bench/), each round"])
}
