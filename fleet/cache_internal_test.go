package fleet

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

func TestRecordCache(t *testing.T) {
	c := newRecordCache[int](2)
	raw := []byte("one")
	c.put("a", raw, 1)
	raw[0] = 'X' // the caller's bytes change: the cache kept its own
	steps := []struct {
		name string
		key  string
		raw  string
		want int
		ok   bool
	}{
		{"the same bytes", "a", "one", 1, true},
		{"other bytes under the key", "a", "two", 0, false},
		{"another key", "b", "one", 0, false},
	}
	for _, st := range steps {
		v, ok := c.get(st.key, []byte(st.raw))
		assert.Equal(t, st.ok, ok, st.name)
		assert.Equal(t, st.want, v, st.name)
	}
	c.put("a", []byte("two"), 2)
	v, ok := c.get("a", []byte("two"))
	assert.True(t, ok)
	assert.Equal(t, 2, v, "a new value replaces the old")
	for i := range 10 {
		c.put(fmt.Sprint(i), []byte("x"), i)
		assert.LessOrEqual(t, c.len(), 2, "bounded")
	}
}

// TestTargetReadsDecodeOncePerRecord: a target read twice is decoded once;
// a record changed under the server, even damaged, is decoded again and
// refused as strictly as ever.
func TestTargetReadsDecodeOncePerRecord(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	s, err := NewServer(Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	_, err = s.Enrol(ctx, "d", nil)
	require.NoError(t, err)
	rev, err := s.SetTarget(ctx, "d", Target{})
	require.NoError(t, err)

	_, first, err := s.readTarget(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, rev, first.Desired.Revision)
	assert.Equal(t, 1, s.targets.len(), "kept decoded")
	rec, err := store.Get(ctx, keyTargets+"d")
	require.NoError(t, err)
	cached, ok := s.targets.get(rec.Key, rec.Value)
	require.True(t, ok)
	assert.Equal(t, first, cached)

	rev2, err := s.SetTarget(ctx, "d", Target{})
	require.NoError(t, err)
	_, second, err := s.readTarget(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, rev2, second.Desired.Revision, "a new record is decoded anew")

	rec, err = store.Get(ctx, keyTargets+"d")
	require.NoError(t, err)
	_, err = store.Put(ctx, converge.StoreRecord{Key: rec.Key, Version: rec.Version, Value: []byte(`{"format":1,"desired":{},"unknown":1}`)})
	require.NoError(t, err)
	_, _, err = s.readTarget(ctx, "d")
	var fe *FormatError
	require.ErrorAs(t, err, &fe, "a damaged record is refused, cached or not")
	assert.Equal(t, keyTargets+"d", fe.Key)
}

// TestForEachBounded: every call made once, as many at once as the limit
// allows and no more.
func TestForEachBounded(t *testing.T) {
	for _, tc := range []struct{ n, limit int }{{0, 4}, {1, 4}, {50, 4}, {50, 1}} {
		synctest.Test(t, func(t *testing.T) {
			var (
				mu      sync.Mutex
				now     int
				called  = make([]int, tc.n)
				release = make(chan struct{})
				done    = make(chan struct{})
			)
			go func() {
				defer close(done)
				forEachBounded(tc.n, tc.limit, func(i int) {
					mu.Lock()
					now++
					called[i]++
					mu.Unlock()
					<-release
					mu.Lock()
					now--
					mu.Unlock()
				})
			}()
			synctest.Wait()
			mu.Lock()
			assert.Equal(t, min(tc.n, tc.limit), now, "n=%d: calls at once", tc.n)
			mu.Unlock()
			close(release)
			<-done
			for i, c := range called {
				assert.Equal(t, 1, c, "call %d of %d", i, tc.n)
			}
		})
	}
}

// TestDeviceReadsSeeEveryChange: a device's record kept decoded is read
// again as soon as any writer changes it (a revocation by another
// replica), and a damaged one is refused.
func TestDeviceReadsSeeEveryChange(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	newServer := func() *Server {
		s, err := NewServer(Config{Store: store, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	s, other := newServer(), newServer()
	_, err := s.Enrol(ctx, "d", map[string]string{"site": "a"})
	require.NoError(t, err)
	dev, err := s.readDevice(ctx, "d")
	require.NoError(t, err)
	assert.True(t, dev.Revoked.IsZero())
	assert.Equal(t, 1, s.devices.len(), "kept decoded")

	st, err := s.DeviceStatus(ctx, "d")
	require.NoError(t, err)
	st.Labels["site"] = "changed by a caller"
	dev, err = s.readDevice(ctx, "d")
	require.NoError(t, err)
	assert.Equal(t, "a", dev.Labels["site"], "DeviceStatus hands out a copy of the labels")

	require.NoError(t, other.Revoke(ctx, "d"))
	dev, err = s.readDevice(ctx, "d")
	require.NoError(t, err)
	assert.False(t, dev.Revoked.IsZero(), "the revocation by another replica is seen at once")

	rec, err := store.Get(ctx, keyDevices+"d")
	require.NoError(t, err)
	_, err = store.Put(ctx, converge.StoreRecord{Key: rec.Key, Version: rec.Version, Value: []byte(`{"format":2}`)})
	require.NoError(t, err)
	_, err = s.readDevice(ctx, "d")
	var fe *FormatError
	require.ErrorAs(t, err, &fe, "a damaged record is refused, cached or not")
}
