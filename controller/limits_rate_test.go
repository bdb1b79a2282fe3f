package controller_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
)

// entryTimes is a store that records when it wrote each transition into
// "updating", by its own clock.
type entryTimes struct {
	converge.Queue
	mu sync.Mutex
	at []time.Time
}

func (s *entryTimes) Put(ctx context.Context, rec converge.StoreRecord, history ...converge.HistoryEntry) (uint64, error) {
	v, err := s.Queue.Put(ctx, rec, history...)
	if err == nil {
		for _, h := range history {
			if h.To == "updating" && h.From != "updating" {
				s.mu.Lock()
				s.at = append(s.at, time.Now())
				s.mu.Unlock()
			}
		}
	}
	return v, err
}

func (s *entryTimes) times() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.at...)
}

// TestLimitRateCountsFromTheWrite: an entry token is held for
// Burst×Every from the write of the transition it let in, not from its
// claim: a replica whose store answers late writes its transition well
// after claiming the token, and the next entry, once the store answers
// on time again, still comes Every after that write (by the store's
// clock), not Every after the first claim.
func TestLimitRateCountsFromTheWrite(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		const every = 10 * time.Second
		store := &entryTimes{Queue: converge.NewMemStore()}
		slow := convergetest.NewFaultStore(store)
		c, err := controller.New(controller.Config{
			Kind: "fw", Store: slow, Owner: "r", LeaseTTL: 30 * time.Second, Poll: time.Second,
			Limits: map[controller.State]controller.Limit{"updating": {Every: every}},
			Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
				if o.State == "new" {
					return controller.Transition("updating"), nil
				}
				return controller.NoChange().After(time.Hour), nil
			})})
		require.NoError(t, err)
		slow.Delay(4 * time.Second) // every answer comes 4 s late
		require.NoError(t, c.Add(ctx, "first", "new", nil))
		startController(t, c)
		for len(store.times()) == 0 {
			time.Sleep(100 * time.Millisecond)
		}
		slow.Delay(0)
		// The token was claimed 4 s before the first write: Every after
		// the claim, and well within Every of the write, another object
		// asks to enter.
		time.Sleep(time.Until(store.times()[0].Add(every - 4*time.Second + time.Second)))
		require.NoError(t, c.Add(ctx, "second", "new", nil))
		for len(store.times()) < 2 {
			time.Sleep(100 * time.Millisecond)
		}
		at := store.times()
		// The first write came 4 s after its token's claim; the next
		// entry comes every (10 s) after that write at the earliest.
		assert.GreaterOrEqual(t, at[1].Sub(at[0]), every, "entries %s apart", at[1].Sub(at[0]))
	})
}
