package converge

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestActionBookRecordsOnlyRealWalks(t *testing.T) {
	asked := []ItemResult{{ID: "config:arm_freq", Actions: []RequiredAction{{ID: "config:arm_freq", Action: ActionReboot, Reason: "boot configuration changed"}}}}
	for _, tc := range []struct {
		name string
		rep  *Report
		want int
	}{
		{name: "dry run", rep: &Report{Dry: true, Items: asked}, want: 0},
		{name: "no report", rep: nil, want: 0},
		{name: "nothing asked", rep: &Report{Items: []ItemResult{{ID: "a"}}}, want: 0},
		{name: "apply", rep: &Report{Items: asked}, want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := NewMemStore()
			obs := newTargetObs("edge", nil, nil, time.Now)
			b := &actionBook{store: store, key: TargetActionsKey("edge"), bootID: func(context.Context) (string, error) { return "b1", nil }, now: time.Now, obs: &obs}
			require.NoError(t, b.record(ctx, tc.rep, 3))
			assert.Len(t, b.pending(), tc.want)
			_, err := store.Get(ctx, TargetActionsKey("edge"))
			if tc.want == 0 {
				require.ErrorIs(t, err, ErrStoreNotFound, "nothing stored")
			} else {
				require.NoError(t, err)
			}
		})
	}
}
