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

// FuzzDecodeActions feeds the reader of the pending actions record:
// anything it accepts encodes back to a record it reads the same, and
// what it refuses is ErrActionsDamaged naming the key.
func FuzzDecodeActions(f *testing.F) {
	for _, s := range []string{
		`{"format":1}`,
		`{"format":1,"actions":[{"action":"reboot","item":"config:arm_freq","reason":"boot configuration changed","revision":3,"bootID":"0e5c","since":"2026-12-04T15:00:00Z"}]}`,
		`{"format":1,"actions":[{"action":"shutdown","item":"a","since":"2026-12-04T15:00:00Z"},{"action":"reboot","item":"a","since":"2026-12-04T15:00:00Z"}]}`,
		`{"format":2}`, `{"actions":[]}`, `[1]`, `{"format":1,"format":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		list, err := decodeActions("converge.actions/t", b)
		if err != nil {
			require.ErrorIs(t, err, ErrActionsDamaged)
			require.Contains(t, err.Error(), `"converge.actions/t"`)
			return
		}
		if len(list) == 0 {
			return
		}
		enc, err := encodeActions(list)
		require.NoError(t, err)
		again, err := decodeActions("converge.actions/t", enc)
		require.NoError(t, err)
		require.True(t, equalActions(list, again), "%s", enc)
	})
}
