package fleet

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

// readBarrier is a store whose reads of one key, once armed, are held in
// pairs: a read waits for the next one, and both then go on with the same
// value, as two replicas racing do.
type readBarrier struct {
	converge.Queue
	key string

	mu      sync.Mutex
	armed   int           // reads still to hold
	waiting chan struct{} // the held read of a pair, waiting for its partner
}

func (b *readBarrier) arm(n int) {
	b.mu.Lock()
	b.armed = n
	b.mu.Unlock()
}

func (b *readBarrier) Get(ctx context.Context, key string) (converge.StoreRecord, error) {
	rec, err := b.Queue.Get(ctx, key)
	if key != b.key {
		return rec, err
	}
	b.mu.Lock()
	if b.armed == 0 {
		b.mu.Unlock()
		return rec, err
	}
	b.armed--
	if b.waiting != nil {
		close(b.waiting)
		b.waiting = nil
		b.mu.Unlock()
		return rec, err
	}
	ch := make(chan struct{})
	b.waiting = ch
	b.mu.Unlock()
	select {
	case <-ch:
	case <-time.After(5 * time.Second): // no partner came: go on
	}
	return rec, err
}

// The setters of a device's target that race between replicas set it
// once: two replicas restoring one device at once (one whose claim on
// the rollout ran out) give it its previous target under one revision,
// and two moving it at once give it the rollout's target once.
func TestRacingReplicasSetATargetOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		race func(ctx context.Context, s *Server, spec RolloutSpec) error
		held int    // the reads of the device's target held in pairs
		want uint64 // the device's revision after both
	}{
		{"restore", func(ctx context.Context, s *Server, spec RolloutSpec) error {
			_, err := s.restore(ctx, "r", spec)
			return err
		}, 2, 3},
		{"move", func(ctx context.Context, s *Server, spec RolloutSpec) error {
			_, err := s.move(ctx, "r", "dev", spec)
			return err
		}, 4, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := &readBarrier{Queue: converge.NewMemStore(), key: keyTargets + "dev"}
			var replicas []*Server
			for range 2 {
				s, err := NewServer(Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
				require.NoError(t, err)
				t.Cleanup(func() { _ = s.Close() })
				replicas = append(replicas, s)
			}
			s := replicas[0]
			_, err := s.Enrol(ctx, "dev", nil)
			require.NoError(t, err)
			items := []converge.DesiredItem{{ID: "app", Presence: converge.Present}}
			_, err = s.SetTarget(ctx, "dev", Target{Desired: converge.Desired{Items: items}, Payload: json.RawMessage(`{"v":1}`)})
			require.NoError(t, err)
			spec := RolloutSpec{ID: "r", Items: items, Payload: json.RawMessage(`{"v":2}`)}
			if tc.name == "restore" {
				rev, err := s.move(ctx, "r", "dev", spec)
				require.NoError(t, err)
				require.Equal(t, uint64(2), rev)
			}

			store.arm(tc.held)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, r := range replicas {
				wg.Go(func() { errs[i] = tc.race(ctx, r, spec) })
			}
			wg.Wait()
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			_, cur, err := s.readTarget(ctx, "dev")
			require.NoError(t, err)
			assert.Equal(t, tc.want, cur.Desired.Revision, "the target was set once")
			rec, err := store.Get(ctx, keyRolloutMoved+"r/dev")
			require.NoError(t, err)
			var m movedDoc
			require.NoError(t, json.Unmarshal(rec.Value, &m))
			assert.Equal(t, uint64(2), m.Revision)
			if tc.name == "restore" {
				assert.Equal(t, uint64(3), m.Restored)
				assert.JSONEq(t, `{"v":1}`, string(cur.Payload))
			}
			if tc.name == "restore" {
				n, err := s.restore(ctx, "r", spec)
				require.NoError(t, err)
				assert.Equal(t, 1, n, "a device restored counts once restored, whoever restored it")
			}
		})
	}
}
