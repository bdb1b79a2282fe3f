package converge_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/convergekit/converge"
)

// memDevice is an in-memory stand-in for a device: the things that exist on
// it, and what was done to it, in order.
type memDevice struct {
	mu     sync.Mutex
	exists map[converge.ID]bool
	done   []string
}

// thing is an item on a device, such as a bridge, an image or a container:
// its state is whether it exists. up and down say how it is created and
// removed ("create", "remove"; "download", "delete").
type thing struct {
	dev      *memDevice
	id       converge.ID
	up, down string
}

func (t *thing) ID() converge.ID { return t.id }

func (t *thing) StateCurrent(context.Context, converge.DepStates) (bool, error) {
	t.dev.mu.Lock()
	defer t.dev.mu.Unlock()
	return t.dev.exists[t.id], nil
}

func (t *thing) StateGoal(context.Context, converge.DepStates) (bool, error)  { return true, nil }
func (t *thing) StateClean(context.Context, converge.DepStates) (bool, error) { return false, nil }

func (t *thing) Check(_ context.Context, current, target bool) (converge.Decision, error) {
	if current == target {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}

func (t *thing) Apply(_ context.Context, _, target bool) (bool, error) {
	t.dev.mu.Lock()
	defer t.dev.mu.Unlock()
	verb := t.up
	if !target {
		verb = t.down
	}
	t.dev.done = append(t.dev.done, verb+" "+string(t.id))
	t.dev.exists[t.id] = target
	return target, nil
}

func (t *thing) ApplyDry(_ context.Context, _, target bool) (bool, error) { return target, nil }

// openDuT's EDGAR replaces a bridge: the old one must be gone before the
// new one is created, and the interface joins the new one. A Present item
// cannot depend on an Absent one, and the new bridge needs nothing from
// the old: an ordering edge says "after" without a dependency.
func ExampleGraph_After_replaceBridge() {
	dev := &memDevice{exists: map[converge.ID]bool{"bridge:br-old": true}}
	brOld := &thing{dev: dev, id: "bridge:br-old", up: "create", down: "remove"}
	brNew := &thing{dev: dev, id: "bridge:br-new", up: "create", down: "remove"}
	eth0 := &thing{dev: dev, id: "port:eth0@br-new", up: "join", down: "leave"}

	g := converge.NewGraph()
	g.Add(converge.Wrap[bool](eth0), converge.Present, brNew.ID()) // needs the new bridge
	g.Add(converge.Wrap[bool](brNew), converge.Present)
	g.Add(converge.Wrap[bool](brOld), converge.Absent)
	g.After(brNew.ID(), brOld.ID()) // the old bridge out, then the new one in

	if _, err := converge.Apply(context.Background(), g); err != nil {
		fmt.Println(err)
	}
	for _, d := range dev.done {
		fmt.Println(d)
	}
	fmt.Println("dependencies:", g.Dependencies(brNew.ID()), "after:", g.Afters(brNew.ID()))
	// Output:
	// remove bridge:br-old
	// create bridge:br-new
	// join port:eth0@br-new
	// dependencies: [] after: [bridge:br-old]
}

// balena's kill-then-download update strategy: the old container is
// stopped before the new image is fetched (to free the disk or the
// bandwidth it needs), then the new container starts from that image.
func ExampleGraph_After_killThenDownload() {
	dev := &memDevice{exists: map[converge.ID]bool{"container:app-v1": true, "image:app:v1": true}}
	oldApp := &thing{dev: dev, id: "container:app-v1", up: "start", down: "kill"}
	newImage := &thing{dev: dev, id: "image:app:v2", up: "download", down: "delete"}
	newApp := &thing{dev: dev, id: "container:app-v2", up: "start", down: "kill"}

	g := converge.NewGraph()
	g.Add(converge.Wrap[bool](oldApp), converge.Absent)
	g.Add(converge.Wrap[bool](newImage), converge.Present)
	g.Add(converge.Wrap[bool](newApp), converge.Present, newImage.ID()) // runs the image
	g.After(newImage.ID(), oldApp.ID())                                 // kill, then download

	rep, err := converge.Apply(context.Background(), g)
	if err != nil {
		fmt.Println(err)
	}
	for _, d := range dev.done {
		fmt.Println(d)
	}
	fmt.Print(rep.Summary())
	// Output:
	// kill container:app-v1
	// download image:app:v2
	// start container:app-v2
	// apply: 3 items: 3 changed
	//   changed      container:app-v1 (absent)
	//   changed      image:app:v2 (present)
	//   changed      container:app-v2 (present)
}
