package converge_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// A graph of three items, where "app" reads the state "config" reached.
func Example() {
	config := &convergetest.Item{Key: "config", Goal: "port=8080"}
	app := &convergetest.Item{Key: "app", GoalFunc: func(d converge.DepStates) (string, error) {
		cfg, err := converge.DepState[string](d, "config")
		return "running with " + cfg, err
	}}
	legacy := &convergetest.Item{Key: "legacy", Value: "running"}

	g := converge.NewGraph()
	g.Add(config.Node(), converge.Present)
	g.Add(app.Node(), converge.Present, "config")
	g.Add(legacy.Node(), converge.Absent)

	rep, err := converge.Apply(context.Background(), g)
	if err != nil {
		fmt.Println("error:", err)
	}
	fmt.Print(rep.Summary())
	fmt.Println(app.Current())

	rep, _ = converge.Apply(context.Background(), g)
	fmt.Print(rep.Summary())
	// Output:
	// apply: 3 items: 3 changed
	//   changed      config (present)
	//   changed      app (present)
	//   changed      legacy (absent)
	// running with port=8080
	// apply: 3 items: 3 unchanged
}

// A dry run reports what would change and writes nothing.
func ExampleApplyDry() {
	file := &convergetest.Item{Key: "file:/etc/motd", Value: "old", Goal: "new"}
	g := converge.NewGraph()
	g.Add(file.Node(), converge.Present)
	rep, _ := converge.ApplyDry(context.Background(), g)
	it, _ := rep.Item("file:/etc/motd")
	fmt.Printf("%s: %v -> %v (%s)\n", it.ID, it.Before, it.After, it.Outcome)
	fmt.Println("real value:", file.Current())
	// Output:
	// file:/etc/motd: old -> new (would-change)
	// real value: old
}

// Clean removes every item, dependents first.
func ExampleClean() {
	rec := &convergetest.Recorder{}
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "network", Value: "up", Recorder: rec}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "container", Value: "up", Recorder: rec}).Node(), converge.Present, "network")
	_, _ = converge.Clean(context.Background(), g)
	for _, r := range rec.Records() {
		fmt.Println(r)
	}
	// Output:
	// container apply-start
	// container apply-end
	// network apply-start
	// network apply-end
}

// A failed item makes its dependents wait; errors carry the item and phase.
func ExampleItemError() {
	db := (&convergetest.Item{Key: "db", Goal: "up"}).FailAt(converge.PhaseApply, -1, nil)
	g := converge.NewGraph()
	g.Add(db.Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "web", Goal: "up"}).Node(), converge.Present, "db")
	rep, err := converge.Apply(context.Background(), g)
	var ie *converge.ItemError
	if errors.As(err, &ie) {
		fmt.Println("failed:", ie.ID, "in phase", ie.Phase)
		// ie.Walk is the walk's ID, as in the report and its events: a
		// field to log, to tell concurrent walks apart.
		fmt.Println("in this walk:", ie.Walk == rep.Walk)
	}
	web, _ := rep.Item("web")
	fmt.Println("web:", web.Outcome, "for", web.WaitingFor)
	// Output:
	// failed: db in phase apply
	// in this walk: true
	// web: waiting for [db]
}

// Progress events arrive in order, without slowing the walk. An observer
// that falls behind by more than WalkerConfig.EventBuffer events loses the
// oldest, and the next event it gets says how many (Event.Dropped).
func ExampleObserver() {
	w, _ := converge.NewWalker(converge.WalkerConfig{
		Parallelism: 1,
		Observer: converge.ObserverFunc(func(e converge.Event) {
			if e.Dropped > 0 {
				fmt.Printf("(%d events lost)\n", e.Dropped)
			}
			if e.Kind == converge.EventApplying {
				fmt.Printf("%s %s %d/%d\n", e.ID, e.Kind, e.Done, e.Total)
				return
			}
			fmt.Println(e.ID, e.Kind)
		}),
	})
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "image", Goal: "v2", Units: 2}).Node(), converge.Present)
	_, _ = w.Apply(context.Background(), g)
	// Output:
	// image queued
	// image checking
	// image applying 0/2
	// image applying 1/2
	// image applying 2/2
	// image done
}

// ResultStates reads an item's states from a walk's result with the item's
// own state type, instead of as any.
func ExampleResultStates() {
	file := &convergetest.Item{Key: "file:/etc/motd", Value: "old", Goal: "new"}
	g := converge.NewGraph()
	g.Add(file.Node(), converge.Present)
	rep, _ := converge.Apply(context.Background(), g)
	res, _ := rep.Item("file:/etc/motd")
	before, after, ok := converge.ResultStates[string](res)
	fmt.Printf("%q -> %q (%v)\n", before, after, ok)
	// Output:
	// "old" -> "new" (true)
}

// ExampleConfig_metrics records what a walk reports with convergetest's
// recorder (a program passes the prometheus module's adapter instead) and
// logs its failures; the log never holds the items' states. The walker's
// Name is the "target" label of every series.
func ExampleConfig_metrics() {
	m := &convergetest.Metrics{}
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelWarn,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { // stable output
			if a.Key == slog.TimeKey || a.Key == "walk" || a.Key == "duration" {
				return slog.Attr{}
			}
			return a
		},
	}))
	w, err := converge.NewWalker(converge.WalkerConfig{Name: "edge", Metrics: m, Logger: logger})
	if err != nil {
		panic(err)
	}
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "file:/etc/motd", Goal: "hello"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "file:/etc/hostname", Value: "pi", Goal: "pi"}).Node(), converge.Present)
	token := &convergetest.Item{Key: "secret:api-token", Goal: "s3cret"}
	g.Add(token.FailAt(converge.PhaseApply, 1, nil).Node(), converge.Present)
	_, _ = w.Apply(context.Background(), g)

	for _, s := range m.Series() {
		if s.Metric.Kind != converge.MetricHistogram {
			fmt.Println(s)
		}
	}
	// Output:
	// level=WARN msg="item failed" item=secret:api-token outcome=failed phase=apply error="convergetest: injected failure"
	// converge_walk_item_failures_total{target="edge",kind="secret",phase="apply"} 1
	// converge_walk_items_total{target="edge",kind="file",outcome="changed"} 1
	// converge_walk_items_total{target="edge",kind="file",outcome="unchanged"} 1
	// converge_walk_items_total{target="edge",kind="secret",outcome="failed"} 1
	// converge_walks_total{target="edge",mode="apply",result="error"} 1
}
