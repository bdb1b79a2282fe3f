package prometheus_test

import (
	"bufio"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/prometheus"
)

// Register the Metrics on a registry of your own, hand it to the loops as
// their converge.Metrics, and serve the registry (here it is gathered and
// printed as a scrape would show it).
func ExampleNew() {
	m, err := prometheus.New(prometheus.Options{})
	if err != nil {
		panic(err)
	}
	reg := prom.NewRegistry()
	reg.MustRegister(m)

	// The loops declare their descriptors as package variables; these
	// stand for them.
	items := &converge.Metric{Name: "converge_example_items_total", Help: "Items a walk processed.",
		Kind: converge.MetricCounter, Labels: []string{"outcome"}}
	running := &converge.Metric{Name: "converge_example_walks_running", Help: "Walks running now.",
		Kind: converge.MetricGauge}
	took := &converge.Metric{Name: "converge_example_walk_seconds", Help: "How long a walk took.",
		Kind: converge.MetricHistogram, Buckets: []float64{1, 10}}
	// Declared up front, the gauge is scraped at 0 before its first value.
	if err := m.Register(items, running, took); err != nil {
		panic(err)
	}

	var report converge.Metrics = m // what a loop sees
	report.Add(items, 2, "changed")
	report.Add(items, 1, "unchanged")
	report.Observe(took, 2.5)

	families, err := reg.Gather()
	if err != nil {
		panic(err)
	}
	for _, f := range families {
		if _, err := expfmt.MetricFamilyToText(os.Stdout, f); err != nil {
			panic(err)
		}
	}
	fmt.Println("families:", len(families))
	// Output:
	// # HELP converge_example_items_total Items a walk processed.
	// # TYPE converge_example_items_total counter
	// converge_example_items_total{outcome="changed"} 2
	// converge_example_items_total{outcome="unchanged"} 1
	// # HELP converge_example_walk_seconds How long a walk took.
	// # TYPE converge_example_walk_seconds histogram
	// converge_example_walk_seconds_bucket{le="1"} 0
	// converge_example_walk_seconds_bucket{le="10"} 1
	// converge_example_walk_seconds_bucket{le="+Inf"} 1
	// converge_example_walk_seconds_sum 2.5
	// converge_example_walk_seconds_count 1
	// # HELP converge_example_walks_running Walks running now.
	// # TYPE converge_example_walks_running gauge
	// converge_example_walks_running 0
	// families: 3
}

// A program whose only metrics are converge's serves them with Handler,
// beside the process and Go runtime collectors, at GET /metrics.
func ExampleMetrics_Handler() {
	m := &prometheus.Metrics{} // hand m to the loops as their converge.Metrics
	m.Add(converge.MetricTargetPasses, 1, "device", "success")

	srv := httptest.NewServer(m.Handler()) // mount it at /metrics
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "converge_target_passes_total") {
			fmt.Println(sc.Text())
		}
	}
	// Output:
	// converge_target_passes_total{result="success",target="device"} 1
}
