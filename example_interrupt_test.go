package converge_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// gate is an Item[string] whose Apply waits until open is closed (or its
// context ends), so that an example can act while it runs.
type gate struct {
	id      converge.ID
	started chan struct{} // receives a value when Apply starts
	open    chan struct{}

	mu          sync.Mutex
	value, goal string
}

func newGate(id converge.ID, goal string) *gate {
	return &gate{id: id, goal: goal, started: make(chan struct{}, 1), open: make(chan struct{})}
}

func (g *gate) setGoal(v string) { g.mu.Lock(); g.goal = v; g.mu.Unlock() }
func (g *gate) current() string  { g.mu.Lock(); defer g.mu.Unlock(); return g.value }
func (g *gate) ID() converge.ID  { return g.id }
func (g *gate) StateCurrent(context.Context, converge.DepStates) (string, error) {
	return g.current(), nil
}
func (g *gate) StateGoal(context.Context, converge.DepStates) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.goal, nil
}
func (g *gate) Check(_ context.Context, cur, target string) (converge.Decision, error) {
	if cur == target {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (g *gate) Apply(ctx context.Context, cur, target string) (string, error) {
	select {
	case g.started <- struct{}{}:
	default:
	}
	select {
	case <-g.open:
	case <-ctx.Done():
		return cur, ctx.Err()
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.value = target
	return target, nil
}
func (g *gate) ApplyDry(_ context.Context, _, target string) (string, error) { return target, nil }

// A program stops a walk in two steps, as with a first and a second Ctrl-C:
// the first interrupt lets the item already applying finish (within
// WalkerConfig.Grace) and starts nothing new; a second one would cancel the
// items' context at once.
func ExampleWithInterrupt() {
	download := newGate("download", "v2")
	g := converge.NewGraph()
	g.Add(converge.Wrap[string](download), converge.Present)
	g.Add((&convergetest.Item{Key: "install", Goal: "v2"}).Node(), converge.Present, "download")
	w, _ := converge.NewWalker(converge.WalkerConfig{Grace: time.Minute})

	ctx, interrupt := converge.WithInterrupt(context.Background())
	// In a program: signal.Notify(sig, os.Interrupt); for range sig { interrupt() }
	done := make(chan *converge.Report)
	go func() {
		rep, _ := w.Apply(ctx, g)
		done <- rep
	}()
	<-download.started
	interrupt() // the first Ctrl-C: download goes on, install will not start
	close(download.open)
	rep := <-done
	fmt.Println("interrupted:", rep.Interrupted)
	fmt.Print(rep.Summary())
	// Output:
	// interrupted: graceful
	// apply (interrupted, graceful): 2 items: 1 changed, 1 not-run
	//   changed      download (present)
	//   not-run      install
}

// A new target preempts the pass of the previous one at the next item
// boundary: the item applying finishes, the rest of the old target does
// not start, and the new target's pass begins. Every event says which
// target revision it belongs to.
func ExampleTargetReconciler_SetTarget() {
	app := newGate("app", "")
	config := &convergetest.Item{Key: "config"}
	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
		Build: func(_ context.Context, version string) ([]converge.TargetStage, error) {
			app.setGoal(version)
			config.Goal = version
			g := converge.NewGraph()
			g.Add(converge.Wrap[string](app), converge.Present)
			g.Add(config.Node(), converge.Present, "app")
			return []converge.TargetStage{{Name: "apps", Graph: g}}, nil
		},
	})
	if err != nil {
		panic(err)
	}
	finished := make(chan struct{})
	r.Subscribe(func(e converge.TargetEvent) {
		switch e.Kind {
		case converge.TargetStateChanged:
			fmt.Printf("revision %d: changed %v\n", e.Revision, e.Report.IDs(converge.OutcomeChanged))
		case converge.TargetPassPreempted:
			fmt.Printf("revision %d: %s\n", e.Revision, e.Kind)
		case converge.TargetPassFinished:
			fmt.Printf("revision %d: %s\n", e.Revision, e.Kind)
			close(finished)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.SetTarget(ctx, "v1"); err != nil {
		panic(err)
	}
	stopped := make(chan error)
	go func() { stopped <- r.Run(ctx) }()
	<-app.started // app is being updated to v1
	if err := r.SetTarget(ctx, "v2"); err != nil {
		panic(err)
	}
	close(app.open)
	<-finished
	cancel()
	fmt.Println("stopped:", <-stopped)
	fmt.Println("app:", app.current(), "config:", config.Current())
	// Output:
	// revision 1: changed [app]
	// revision 1: pass-preempted
	// revision 2: changed [app config]
	// revision 2: pass-finished
	// stopped: <nil>
	// app: v2 config: v2
}

// A one-shot walk is forced past update locks with WithForce; items see it
// through Forced.
func ExampleWithForce() {
	g := converge.NewGraph()
	// lockItem refuses to change while locked, unless Forced(ctx).
	g.Add(converge.Wrap[string](&lockItem{id: "app", value: "v1", goal: "v2", locked: true}), converge.Present)
	_, err := converge.Apply(context.Background(), g)
	fmt.Println("locked:", errors.Is(err, converge.ErrLocked))
	rep, err := converge.Apply(converge.WithForce(context.Background()), g)
	fmt.Println("forced:", rep.IDs(converge.OutcomeChanged), err)
	// Output:
	// locked: true
	// forced: [app] <nil>
}
