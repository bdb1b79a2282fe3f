package main

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
)

// TestLimits lists what the limits of a kind hold in a bolt file: two
// replicas holding the slots of "updating", and an object whose move into
// "rebooting" waits for its entry rate, as JSON and as a table; a kind
// whose limits hold nothing says so.
func TestLimits(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleet.db")
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	c, err := controller.New(controller.Config{
		Kind: "fw", Store: st, Owner: "r1",
		Limits: map[controller.State]controller.Limit{"rebooting": {Every: time.Hour}},
		Handler: controller.HandlerFunc(func(_ context.Context, o controller.Object) (controller.Result, error) {
			if o.State == "new" {
				return controller.Transition("rebooting"), nil
			}
			return controller.NoChange().After(time.Hour), nil
		}),
	})
	require.NoError(t, err)
	for i := range 2 {
		require.NoError(t, c.Add(ctx, fmt.Sprintf("n%d", i), "new", nil))
	}
	for i := range 3 {
		require.NoError(t, c.Add(ctx, fmt.Sprintf("u%d", i), "updating", nil))
	}
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- c.Run(rctx) }()
	require.Eventually(t, func() bool {
		l, err := c.Limits(ctx)
		return err == nil && len(l) == 1 && l[0].WaitingToEnter == 1
	}, 30*time.Second, 10*time.Millisecond)
	cancel()
	require.NoError(t, <-stopped)
	// Two replicas running handlers of "updating" hold its slots.
	for i, owner := range []string{"r2", "r1"} {
		_, err := st.Claim(ctx, controller.LimitSlotKey("fw", "updating", i), owner, time.Hour)
		require.NoError(t, err)
	}
	require.NoError(t, st.Close())

	var out struct {
		Kind   string `json:"kind"`
		Limits []struct {
			State          string   `json:"state"`
			Objects        int      `json:"objects"`
			SlotsInUse     int      `json:"slotsInUse"`
			SlotHolders    []string `json:"slotHolders"`
			WaitingToEnter int      `json:"waitingToEnter"`
		} `json:"limits"`
	}
	ctlJSON(t, &out, "limits", "fw", "--bolt", path)
	assert.Equal(t, "fw", out.Kind)
	require.Len(t, out.Limits, 2)
	l := out.Limits[0]
	assert.Equal(t, "rebooting", l.State)
	assert.Equal(t, 1, l.Objects, "one entered")
	assert.Equal(t, 1, l.WaitingToEnter, "one waits to enter")
	assert.Zero(t, l.SlotsInUse)
	l = out.Limits[1]
	assert.Equal(t, "updating", l.State)
	assert.Equal(t, 3, l.Objects)
	assert.Equal(t, 2, l.SlotsInUse)
	assert.Equal(t, []string{"r1", "r2"}, l.SlotHolders)
	assert.Zero(t, l.WaitingToEnter)

	res := ctl(t, "limits", "fw", "--bolt", path)
	require.Equal(t, 0, res.code, res.err)
	assert.Regexp(t, `STATE\s+OBJECTS\s+SLOTS IN USE\s+HELD BY\s+WAITING TO ENTER`, res.out)
	assert.Regexp(t, `rebooting\s+1\s+0\s+-\s+1`, res.out)
	assert.Regexp(t, `updating\s+3\s+2\s+r1,r2\s+0`, res.out)

	res = ctl(t, "limits", "other", "--bolt", path)
	assert.Equal(t, 0, res.code)
	assert.Contains(t, res.err, `no limit of kind "other" holds anything now`)
	res = ctl(t, "limits", "--bolt", path)
	assert.Equal(t, 2, res.code, "a kind is needed")
}
