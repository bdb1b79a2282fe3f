package converge_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/convergekit/converge"
)

// sharedRead is an item kind whose items share one read per walk: the
// first item of a walk to discover reads, the others reuse what it read.
type sharedRead struct {
	id    converge.ID
	cache *walkCache
}

// walkCache keeps one read per walk.
type walkCache struct {
	mu    sync.Mutex
	walk  converge.WalkID
	reads int
}

func (c *walkCache) read(ctx context.Context) {
	walk, _ := converge.CurrentWalk(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.walk != walk {
		c.walk = walk
		c.reads++ // the expensive read, once per walk
	}
}

func (s *sharedRead) ID() converge.ID { return s.id }
func (s *sharedRead) StateCurrent(ctx context.Context, _ converge.DepStates) (bool, error) {
	s.cache.read(ctx)
	return true, nil
}
func (s *sharedRead) StateGoal(context.Context, converge.DepStates) (bool, error) { return true, nil }
func (s *sharedRead) Check(_ context.Context, c, t bool) (converge.Decision, error) {
	if c == t {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}
func (s *sharedRead) Apply(_ context.Context, _, t bool) (bool, error)    { return t, nil }
func (s *sharedRead) ApplyDry(_ context.Context, _, t bool) (bool, error) { return t, nil }

// Items that share work within one walk key it on CurrentWalk: here ten
// items read a shared source once per walk, as the keys of one
// hostcfg.ConfigFile look at their file.
func ExampleCurrentWalk() {
	cache := &walkCache{}
	g := converge.NewGraph()
	for i := range 10 {
		g.Add(converge.Wrap[bool](&sharedRead{id: converge.ID(fmt.Sprint("key-", i)), cache: cache}), converge.Present)
	}
	for range 3 {
		if _, err := converge.Apply(context.Background(), g); err != nil {
			fmt.Println("error:", err)
		}
	}
	_, ok := converge.CurrentWalk(context.Background())
	fmt.Println("reads for 3 walks of 10 items:", cache.reads)
	fmt.Println("a context outside a walk names one:", ok)
	// Output:
	// reads for 3 walks of 10 items: 3
	// a context outside a walk names one: false
}
