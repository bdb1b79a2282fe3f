package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/fleet"
)

// TestRollouts lists a rollout a fleet server stored in a bolt file, one
// of its devices failed and the rollout paused by an operator, as JSON and
// as a table.
func TestRollouts(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fleet.db")
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	srv, err := fleet.NewServer(fleet.Config{Store: st, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	for i := range 5 {
		_, err := srv.Enrol(ctx, fmt.Sprintf("pi-%d", i), map[string]string{"site": "lyon"})
		require.NoError(t, err)
	}
	_, err = srv.CreateRollout(ctx, fleet.RolloutSpec{ID: "fw-2", Selector: "site=lyon",
		Items: []converge.DesiredItem{{ID: "app", Presence: converge.Present}}, Payload: json.RawMessage(`{"v":2}`),
		Waves: []fleet.Wave{{Name: "canary", Count: 1}, {Name: "rest", ErrorThreshold: 25}}})
	require.NoError(t, err)
	require.NoError(t, srv.PauseRollout(ctx, "fw-2", "waiting for the weekend"))
	require.NoError(t, srv.Close())
	require.NoError(t, st.Close())

	var out struct {
		Rollouts []fleet.RolloutStatus `json:"rollouts"`
	}
	ctlJSON(t, &out, "rollouts", "--bolt", path)
	require.Len(t, out.Rollouts, 1)
	r := out.Rollouts[0]
	assert.Equal(t, "fw-2", r.ID)
	assert.Equal(t, fleet.RolloutPaused, r.State)
	assert.Equal(t, "waiting for the weekend", r.Reason)
	assert.Equal(t, 5, r.Devices)
	require.Len(t, r.Waves, 2)
	assert.Equal(t, []int{1, 4}, []int{r.Waves[0].Devices, r.Waves[1].Devices})

	res := ctl(t, "rollouts", "--bolt", path)
	require.Equal(t, 0, res.code, res.err)
	assert.Regexp(t, `fw-2\s+-\s+paused\s+5\s+5\s+0\s+0\s+0\s+-\s+waiting for the weekend`, res.out)
	assert.Regexp(t, `-\s+rest\s+pending\s+4\s+4\s+0\s+0\s+0\s+ok 100% / err 25%`, res.out)

	empty := filepath.Join(t.TempDir(), "empty.db")
	st, err = boltstore.Open(empty, boltstore.Options{})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	res = ctl(t, "rollouts", "--bolt", empty)
	assert.Equal(t, 0, res.code)
	assert.Contains(t, res.err, "no rollouts in the store")
}
