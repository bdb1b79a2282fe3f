package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// slotClaims is a MemStore that counts the claims of limit slots.
type slotClaims struct {
	*converge.MemStore
	n atomic.Int64
}

func (s *slotClaims) Claim(ctx context.Context, key, owner string, ttl time.Duration) (converge.Lease, error) {
	if strings.Contains(key, ".limit/") {
		s.n.Add(1)
	}
	return s.MemStore.Claim(ctx, key, owner, ttl)
}

// TestLimitFullAsksTheStoreOncePerPass: while every slot of a state is
// held by other replicas, a replica with many due objects in the state
// asks the store for a slot about once per Poll, not once per object and
// slot, and still takes the objects through once the slots free.
func TestLimitFullAsksTheStoreOncePerPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const slots, objects, poll = 2, 40, time.Second
		store := &slotClaims{MemStore: converge.NewMemStore()}
		for i := range slots {
			_, err := store.MemStore.Claim(ctx, controller.LimitSlotKey("fw", "updating", i), "other", 10*time.Second)
			require.NoError(t, err)
		}
		c, err := controller.New(controller.Config{
			Kind: "fw", Store: store, Owner: "r", Workers: 8, Poll: poll,
			Limits: map[controller.State]controller.Limit{"updating": {Concurrent: slots}},
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				if o.State == "updating" {
					return controller.Transition("done"), nil
				}
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		for i := range objects {
			require.NoError(t, c.Add(ctx, fmt.Sprintf("m%02d", i), "updating", nil))
		}
		startController(t, c)
		time.Sleep(9 * time.Second) // the other replica holds the slots for 10 s
		t.Logf("%d claims of slots in 9 s, %d objects due, %d slots held elsewhere", store.n.Load(), objects, slots)
		// About one round of the slots per Poll: 9 passes, each of up to
		// two claims, and a round or two more for the objects that raced
		// the first; not 40 objects × 2 slots per pass.
		assert.LessOrEqual(t, store.n.Load(), int64(3*9*slots), "claims of slots while they were all held")
		assert.False(t, allIn(t, store, "fw", "done"))
		time.Sleep(30 * time.Second) // the slots expired: every object goes through
		assert.True(t, allIn(t, store, "fw", "done"))
	})
}
