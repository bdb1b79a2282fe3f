package converge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// steppingClock returns a clock that moves on by step at every reading.
func steppingClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(step)
		return now
	}
}

// TestReportPlacesApplyOnTheItemsTimeLine: an item that applied has its
// Apply placed within its time line (after Started, before Started plus
// Duration); an item that did not apply has none, and its JSON form has no
// such keys, so that reports written before them read back the same.
func TestReportPlacesApplyOnTheItemsTimeLine(t *testing.T) {
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "same", Value: "x", Goal: "x"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "changed", Goal: "y"}).Node(), converge.Present, "same")
	failing := &convergetest.Item{Key: "failing", Goal: "z"}
	failing.FailAt(converge.PhaseApply, 1, nil)
	g.Add(failing.Node(), converge.Present)
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1, Now: steppingClock(time.Millisecond)})
	require.NoError(t, err)
	rep, err := w.Apply(t.Context(), g)
	require.Error(t, err)

	same, _ := rep.Item("same")
	assert.Positive(t, same.Duration)
	assert.Zero(t, same.ApplyStart)
	assert.Zero(t, same.ApplyDuration)
	for _, id := range []converge.ID{"changed", "failing"} {
		it, _ := rep.Item(id)
		assert.Positive(t, it.ApplyStart, "%s: discovery and check come before the apply", id)
		assert.Positive(t, it.ApplyDuration, id)
		assert.LessOrEqual(t, it.ApplyStart+it.ApplyDuration, it.Duration, "%s: the apply lies within the item's time line", id)
	}
	changed, _ := rep.Item("changed")
	assert.Less(t, changed.ApplyStart+changed.ApplyDuration, changed.Duration, "verification follows the apply")

	raw, err := json.Marshal(same)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), "ApplyStart", "left out when the item did not apply")
	assert.NotContains(t, string(raw), "ApplyDuration")
	raw, err = json.Marshal(changed)
	require.NoError(t, err)
	var back converge.ItemResult
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, changed.ApplyStart, back.ApplyStart)
	assert.Equal(t, changed.ApplyDuration, back.ApplyDuration)

	var old converge.Report // a report written before the apply's times
	require.NoError(t, json.Unmarshal([]byte(`{"Items":[{"ID":"a","Outcome":"changed","Duration":5000000}]}`), &old))
	require.Len(t, old.Items, 1)
	assert.Equal(t, 5*time.Millisecond, old.Items[0].Duration)
	assert.Zero(t, old.Items[0].ApplyStart)
}

// TestTargetPassEventCarriesItsWalks: a pass's end event carries the
// report of every walk it ran, in order, the walks that changed nothing
// too.
func TestTargetPassEventCarriesItsWalks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		r, ev := newReconciler(t, converge.TargetReconcilerConfig[spec]{Build: d.build})
		require.NoError(t, r.SetTarget(context.Background(), spec{Host: "on", App: "v1"}))
		stop := runReconciler(t, r)
		synctest.Wait()
		require.NoError(t, stop())

		fin := ev.of(converge.TargetPassFinished)
		require.Len(t, fin, 1)
		walks := fin[0].Walks
		require.Len(t, walks, 4, "each stage: a walk that changed it, then one that found nothing to do")
		var ids []string
		for _, w := range walks {
			require.Len(t, w.Report.Items, 1)
			ids = append(ids, fmt.Sprintf("%s/%d/%s", w.Stage, w.Round, w.Report.Items[0].ID))
			assert.Equal(t, fin[0].Revision, w.Report.Revision)
		}
		assert.Equal(t, []string{"host/1/host", "host/2/host", "apps/1/app", "apps/2/app"}, ids)
		assert.Equal(t, converge.OutcomeChanged, walks[0].Report.Items[0].Outcome)
		assert.Equal(t, converge.OutcomeUnchanged, walks[1].Report.Items[0].Outcome)
		for _, e := range ev.of(converge.TargetStateChanged) {
			assert.Empty(t, e.Walks, "only pass events carry the walks")
		}
	})
}
