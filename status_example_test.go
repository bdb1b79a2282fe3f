package converge_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// The agent walks its graph and reports; the central side derives the status
// of the configuration it asked for and shows a one-line summary and the
// items that need a person.
func ExampleDeriveStatus() {
	// Revision 3 of the configuration: a volume, a database on it, an app
	// on the database, and an old container to remove.
	desired := converge.Desired{Revision: 3, Items: []converge.DesiredItem{
		{ID: "volume:data", Presence: converge.Present},
		{ID: "container:db", Presence: converge.Present},
		{ID: "container:app", Presence: converge.Present},
		{ID: "container:legacy", Presence: converge.Absent},
	}}

	// The agent's walk: the database fails to start.
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "volume:data", Goal: "created"}).Node(), converge.Present)
	db := (&convergetest.Item{Key: "container:db", Goal: "running"}).
		FailAt(converge.PhaseApply, -1, errors.New("port 5432 in use"))
	g.Add(db.Node(), converge.Present, "volume:data")
	g.Add((&convergetest.Item{Key: "container:app", Goal: "running"}).Node(), converge.Present, "container:db")
	g.Add((&convergetest.Item{Key: "container:legacy", Value: "running"}).Node(), converge.Absent)
	rep, _ := converge.Apply(context.Background(), g)
	edge, err := converge.EdgeReportFrom(rep, desired.Revision, time.Now())
	if err != nil {
		fmt.Println(err)
		return
	}

	// The central side.
	st, err := converge.DeriveStatus(desired, edge, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(st.Summary())
	for _, it := range st.Items {
		line := fmt.Sprintf("%-17s %-25s review=%s", it.ID, it.Status, it.Attention)
		if it.Message != "" {
			line += ": " + it.Message
		}
		fmt.Println(line)
	}
	fmt.Println("ready:", st.Ready())
	// Output:
	// revision 3: not ready: 4 items: 1 present, 1 absent, 1 waiting-for-dependencies, 1 creating-failed; needs review: container:db
	// volume:data       present                   review=no
	// container:db      creating-failed           review=yes: port 5432 in use
	// container:app     waiting-for-dependencies  review=no
	// container:legacy  absent                    review=no
	// ready: false
}

// A dry run changed nothing, so it cannot answer a configuration.
func ExampleEdgeReportFrom_dryRun() {
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "file:/etc/motd", Goal: "hello"}).Node(), converge.Present)
	rep, _ := converge.ApplyDry(context.Background(), g)
	_, err := converge.EdgeReportFrom(rep, 1, time.Now())
	fmt.Println(errors.Is(err, converge.ErrEdgeDryRun))
	// Output: true
}
