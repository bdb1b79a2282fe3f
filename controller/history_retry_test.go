package controller_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
)

// staleOnce makes the first transition write stale: just before it, the
// record is written again behind the controller's back.
type staleOnce struct {
	*convergetest.Store
	once  sync.Once
	stale atomic.Int32
}

func (s *staleOnce) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	if len(h) > 0 && rec.Version > 0 {
		s.once.Do(func() {
			if cur, err := s.Mem.Get(ctx, rec.Key); err == nil {
				_, _ = s.Mem.Put(ctx, cur)
			}
		})
	}
	v, err := s.Store.Put(ctx, rec, h...)
	if errors.Is(err, converge.ErrStoreStale) {
		s.stale.Add(1)
	}
	return v, err
}

// TestControllerHistoryOncePerTransition checks that every transition is
// in an object's history once, however its write is retried: after
// writes that failed, writes whose reply was lost (they were done), and a
// stale write, on one controller and on a replica; the deletion too.
func TestControllerHistoryOncePerTransition(t *testing.T) {
	faults := []struct {
		name  string
		store func() converge.Queue
	}{
		{name: "failed writes", store: func() converge.Queue {
			return (&convergetest.Store{}).FailNext(convergetest.OpPut, 3, nil)
		}},
		{name: "lost replies", store: func() converge.Queue {
			return &convergetest.Store{LostReplyRate: 0.5, Seed: 7}
		}},
		{name: "stale write", store: func() converge.Queue { return &staleOnce{Store: &convergetest.Store{}} }},
	}
	for _, owner := range []string{"", "replica-1"} {
		for _, f := range faults {
			t.Run(f.name+"/owner="+owner, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					store := f.store()
					next := map[controller.State]controller.State{"a": "b", "b": "c", "c": "d"}
					c, err := controller.New(controller.Config{Kind: "k", Store: store, Owner: owner,
						Backoff: converge.Backoff{Base: time.Second, Max: time.Second},
						Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
							if n, ok := next[o.State]; ok {
								return controller.Transition(n), nil
							}
							return controller.Deleted(), nil
						})})
					require.NoError(t, err)
					ctx := context.Background()
					for c.Add(ctx, "x", "a", nil) != nil {
						// A failed Add may have been written: then it exists.
						if _, err := store.Get(ctx, "k/x"); err == nil {
							break
						}
					}
					stop := startController(t, c)
					time.Sleep(5 * time.Minute)
					require.NoError(t, stop())

					hist, err := store.History(ctx, "k/x")
					require.NoError(t, err)
					var got []string
					for _, h := range hist {
						got = append(got, h.From+">"+h.To)
					}
					assert.Equal(t, []string{">a", "a>b", "b>c", "c>d", "d>"}, got)
					switch s := store.(type) {
					case *convergetest.Store:
						assert.Positive(t, s.Injected(), "faults were injected")
					case *staleOnce:
						assert.Equal(t, int32(1), s.stale.Load(), "a write was stale")
					}
				})
			})
		}
	}
}
