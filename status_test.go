package converge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// statusLogs is a slog handler that keeps its records for assertions.
type statusLogs struct{ records []slog.Record }

func (h *statusLogs) Enabled(context.Context, slog.Level) bool { return true }
func (h *statusLogs) Handle(_ context.Context, r slog.Record) error {
	h.records = append(h.records, r)
	return nil
}
func (h *statusLogs) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *statusLogs) WithGroup(string) slog.Handler      { return h }

// attrs returns the attributes of record i as strings.
func (h *statusLogs) attrs(i int) map[string]string {
	out := map[string]string{}
	h.records[i].Attrs(func(a slog.Attr) bool {
		out[a.Key] = a.Value.String()
		return true
	})
	return out
}

func statusDiscard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestStatusDeriveTable has one case per row of the status table (the
// items in the configuration as DeriveItemStatus documents them, the
// others as DroppedAttention does; the last row lists two edge states, so it
// has two cases), run through
// DeriveStatus with a real desired configuration and edge report.
func TestStatusDeriveTable(t *testing.T) {
	const notInConfig = converge.Presence(255)
	tests := []struct {
		row      string
		desired  converge.Presence // notInConfig: the item is not in the configuration
		detected converge.EdgeDetected
		edge     converge.EdgeState // EdgeNotReported: the edge report lacks the item
		drop     bool
		status   converge.Status
		review   converge.Attention
	}{
		{"1 present/present", converge.Present, converge.EdgeDetectedPresent, converge.EdgePresent, false, converge.StatusPresent, converge.AttentionNone},
		{"2 absent/absent", converge.Absent, converge.EdgeDetectedAbsent, converge.EdgeAbsent, false, converge.StatusAbsent, converge.AttentionNone},
		{"3 present/absent", converge.Present, converge.EdgeDetectedAbsent, converge.EdgeAbsent, false, converge.StatusCreating, converge.AttentionNone},
		{"4 absent/present", converge.Absent, converge.EdgeDetectedPresent, converge.EdgePresent, false, converge.StatusRemoving, converge.AttentionNone},
		{"5 present/creating-failed", converge.Present, converge.EdgeDetectedAbsent, converge.EdgeCreatingFailed, false, converge.StatusCreatingFailed, converge.AttentionNeeded},
		{"6 absent/removing-failed", converge.Absent, converge.EdgeDetectedPresent, converge.EdgeRemovingFailed, false, converge.StatusRemovingFailed, converge.AttentionNeeded},
		{"7 present/check-present-failed", converge.Present, converge.EdgeDetectedUnknown, converge.EdgeCheckPresentFailed, false, converge.StatusCheckPresentFailed, converge.AttentionNeeded},
		{"8 absent/check-absent-failed", converge.Absent, converge.EdgeDetectedUnknown, converge.EdgeCheckAbsentFailed, false, converge.StatusCheckAbsentFailed, converge.AttentionNeeded},
		{"9 present/waiting", converge.Present, converge.EdgeDetectedUnknown, converge.EdgeWaitingForDependencies, false, converge.StatusWaitingForDependencies, converge.AttentionNone},
		{"10 absent/waiting", converge.Absent, converge.EdgeDetectedUnknown, converge.EdgeWaitingForDependencies, false, converge.StatusWaitingForDependencies, converge.AttentionNone},
		{"11 present/not reported", converge.Present, converge.EdgeDetectedUnknown, converge.EdgeNotReported, false, converge.StatusCreating, converge.AttentionNone},
		{"12 absent/not reported", converge.Absent, converge.EdgeDetectedUnknown, converge.EdgeNotReported, false, converge.StatusRemoving, converge.AttentionNone},
		{"13 dropped absent", notInConfig, converge.EdgeDetectedAbsent, converge.EdgeAbsent, true, 0, converge.AttentionNone},
		{"14 dropped present", notInConfig, converge.EdgeDetectedPresent, converge.EdgePresent, true, 0, converge.AttentionMaybe},
		{"15 dropped removing-failed", notInConfig, converge.EdgeDetectedPresent, converge.EdgeRemovingFailed, true, 0, converge.AttentionNeeded},
		{"16 dropped creating-failed", notInConfig, converge.EdgeDetectedAbsent, converge.EdgeCreatingFailed, true, 0, converge.AttentionNeeded},
		{"17a dropped check-present-failed", notInConfig, converge.EdgeDetectedUnknown, converge.EdgeCheckPresentFailed, true, 0, converge.AttentionNeeded},
		{"17b dropped check-absent-failed", notInConfig, converge.EdgeDetectedUnknown, converge.EdgeCheckAbsentFailed, true, 0, converge.AttentionNeeded},
	}
	for _, tt := range tests {
		t.Run(tt.row, func(t *testing.T) {
			assert.Equal(t, tt.detected, tt.edge.Detected(), "detected column")
			desired := converge.Desired{Revision: 3}
			if tt.desired != notInConfig {
				desired.Items = []converge.DesiredItem{{ID: "x", Presence: tt.desired}}
			}
			edge := &converge.EdgeReport{Revision: 3}
			if tt.edge != converge.EdgeNotReported {
				it := converge.EdgeItem{ID: "x", State: tt.edge}
				if tt.edge == converge.EdgeWaitingForDependencies {
					it.WaitingFor = []converge.ID{"dep"}
				}
				edge.Items = append(edge.Items, it)
			}
			logs := &statusLogs{}
			st, err := converge.DeriveStatus(desired, edge, slog.New(logs))
			require.NoError(t, err)
			assert.True(t, st.Reported)
			if tt.drop {
				assert.Empty(t, st.Items)
				require.Len(t, st.Dropped, 1)
				assert.Equal(t, converge.StatusDropped{ID: "x", Edge: tt.edge, Attention: tt.review}, st.Dropped[0])
				require.Len(t, logs.records, 1, "a dropped entry is logged")
				wantLevel := slog.LevelInfo
				if tt.review.Needed() {
					wantLevel = slog.LevelWarn
				}
				assert.Equal(t, wantLevel, logs.records[0].Level)
				a := logs.attrs(0)
				assert.Equal(t, "x", a["id"])
				assert.Equal(t, tt.edge.String(), a["edge"])
				assert.Equal(t, tt.review.String(), a["review"])
				assert.Equal(t, tt.review.Needed(), slicesContains(st.NeedsAttention(), "x"))
				return
			}
			assert.Empty(t, st.Dropped)
			assert.Empty(t, logs.records)
			require.Len(t, st.Items, 1)
			it := st.Items[0]
			assert.Equal(t, tt.desired, it.Desired)
			assert.Equal(t, tt.edge, it.Edge)
			assert.Equal(t, tt.detected, it.Detected())
			assert.Equal(t, tt.status, it.Status)
			assert.Equal(t, tt.review, it.Attention)
			if tt.edge == converge.EdgeWaitingForDependencies {
				assert.Equal(t, []converge.ID{"dep"}, it.WaitingFor)
			}
			assert.Equal(t, tt.status.Final(), st.Ready())

			// The same answer without DeriveStatus's plumbing.
			s, r := converge.DeriveItemStatus(tt.desired, tt.edge)
			assert.Equal(t, tt.status, s)
			assert.Equal(t, tt.review, r)
		})
	}
}

func slicesContains(ids []converge.ID, id converge.ID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// TestStatusDeriveUnlisted covers the combinations the table does not list.
func TestStatusDeriveUnlisted(t *testing.T) {
	tests := []struct {
		name    string
		desired converge.Presence
		edge    converge.EdgeState
		status  converge.Status
		review  converge.Attention
	}{
		// A failure of the opposite presence is shown as it is, for review.
		{"present/removing-failed", converge.Present, converge.EdgeRemovingFailed, converge.StatusRemovingFailed, converge.AttentionNeeded},
		{"present/check-absent-failed", converge.Present, converge.EdgeCheckAbsentFailed, converge.StatusCheckAbsentFailed, converge.AttentionNeeded},
		{"absent/creating-failed", converge.Absent, converge.EdgeCreatingFailed, converge.StatusCreatingFailed, converge.AttentionNeeded},
		{"absent/check-present-failed", converge.Absent, converge.EdgeCheckPresentFailed, converge.StatusCheckPresentFailed, converge.AttentionNeeded},
		// Not run counts as not reported yet.
		{"present/not-run", converge.Present, converge.EdgeNotRun, converge.StatusCreating, converge.AttentionNone},
		{"absent/not-run", converge.Absent, converge.EdgeNotRun, converge.StatusRemoving, converge.AttentionNone},
		// Nonsense in, no status out, flagged for review.
		{"undeclared edge state", converge.Present, converge.EdgeState(99), 0, converge.AttentionNeeded},
		{"undeclared presence", converge.Presence(7), converge.EdgePresent, 0, converge.AttentionNeeded},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, r := converge.DeriveItemStatus(tt.desired, tt.edge)
			assert.Equal(t, tt.status, s)
			assert.Equal(t, tt.review, r)
		})
	}

	t.Run("through DeriveStatus", func(t *testing.T) {
		st, err := converge.DeriveStatus(
			converge.Desired{Revision: 1, Items: []converge.DesiredItem{{ID: "a"}, {ID: "b", Presence: converge.Absent}}},
			&converge.EdgeReport{Revision: 1, Items: []converge.EdgeItem{
				{ID: "a", State: converge.EdgeRemovingFailed, Message: "busy"},
				{ID: "b", State: converge.EdgeNotRun},
			}}, statusDiscard())
		require.NoError(t, err)
		a, _ := st.Item("a")
		assert.Equal(t, converge.StatusRemovingFailed, a.Status)
		assert.Equal(t, "busy", a.Message)
		b, _ := st.Item("b")
		assert.Equal(t, converge.StatusRemoving, b.Status)
		assert.Equal(t, []converge.ID{"a"}, st.NeedsAttention())
		assert.Equal(t, []converge.ID{"a"}, st.Failed())
		assert.Equal(t, []converge.ID{"b"}, st.Transitional())
	})

	t.Run("dropped entries the table does not list", func(t *testing.T) {
		assert.Equal(t, converge.AttentionNone, converge.EdgeWaitingForDependencies.DroppedAttention())
		assert.Equal(t, converge.AttentionNone, converge.EdgeNotRun.DroppedAttention())
		assert.Equal(t, converge.AttentionNeeded, converge.EdgeState(99).DroppedAttention())
	})
}

// TestStatusRevisionMismatch: a report for another revision is not a report
// for the current one.
func TestStatusRevisionMismatch(t *testing.T) {
	desired := converge.Desired{Revision: 5, Items: []converge.DesiredItem{
		{ID: "a", Presence: converge.Present}, {ID: "b", Presence: converge.Absent},
	}}
	for _, rev := range []uint64{4, 6} {
		t.Run(fmt.Sprint("edge revision ", rev), func(t *testing.T) {
			at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			edge := &converge.EdgeReport{Revision: rev, Time: at, Items: []converge.EdgeItem{
				{ID: "a", State: converge.EdgePresent},
				{ID: "b", State: converge.EdgeAbsent},
				{ID: "gone", State: converge.EdgeRemovingFailed},
			}}
			logs := &statusLogs{}
			st, err := converge.DeriveStatus(desired, edge, slog.New(logs))
			require.NoError(t, err)
			assert.False(t, st.Reported)
			assert.Equal(t, rev, st.EdgeRevision)
			assert.Equal(t, at, st.EdgeTime)
			a, _ := st.Item("a")
			b, _ := st.Item("b")
			assert.Equal(t, converge.StatusCreating, a.Status)
			assert.Equal(t, converge.EdgeNotReported, a.Edge)
			assert.Equal(t, converge.StatusRemoving, b.Status)
			assert.Empty(t, st.Dropped, "an ignored report drops nothing")
			assert.False(t, st.Ready())
			require.Len(t, logs.records, 1)
			assert.Equal(t, slog.LevelInfo, logs.records[0].Level)
			assert.Equal(t, fmt.Sprint(rev), logs.attrs(0)["edge_revision"])
			assert.Contains(t, st.Summary(), fmt.Sprintf("edge report is for revision %d", rev))
		})
	}
	t.Run("no report at all", func(t *testing.T) {
		st, err := converge.DeriveStatus(desired, nil, statusDiscard())
		require.NoError(t, err)
		assert.False(t, st.Reported)
		assert.Zero(t, st.EdgeRevision)
		assert.Equal(t, []converge.ID{"a", "b"}, st.Transitional())
		assert.Equal(t, "revision 5: not ready: 2 items: 1 creating, 1 removing; no edge report", st.Summary())
	})
}

func TestStatusDeriveRejectsInvalidInput(t *testing.T) {
	ok := converge.Desired{Revision: 1, Items: []converge.DesiredItem{{ID: "a"}}}
	tests := []struct {
		name    string
		desired converge.Desired
		edge    *converge.EdgeReport
		field   string
		want    error
	}{
		{"desired revision 0", converge.Desired{}, nil, "revision", converge.ErrStatusNoRevision},
		{"desired empty ID", converge.Desired{Revision: 1, Items: []converge.DesiredItem{{}}}, nil, "items[0].id", converge.ErrStatusEmptyID},
		{"desired duplicate ID", converge.Desired{Revision: 1, Items: []converge.DesiredItem{{ID: "a"}, {ID: "a"}}}, nil, "items[1].id", converge.ErrStatusDuplicateID},
		{"desired bad presence", converge.Desired{Revision: 1, Items: []converge.DesiredItem{{ID: "a", Presence: 9}}}, nil, "items[0].presence", converge.ErrStatusUnknownValue},
		{"edge revision 0", ok, &converge.EdgeReport{}, "revision", converge.ErrStatusNoRevision},
		{"edge not-reported state", ok, &converge.EdgeReport{Revision: 1, Items: []converge.EdgeItem{{ID: "a"}}}, "items[0].state", converge.ErrStatusUnknownValue},
		{"edge undeclared state", ok, &converge.EdgeReport{Revision: 1, Items: []converge.EdgeItem{{ID: "a", State: 42}}}, "items[0].state", converge.ErrStatusUnknownValue},
		{"edge duplicate", ok, &converge.EdgeReport{Revision: 1, Items: []converge.EdgeItem{{ID: "a", State: converge.EdgePresent}, {ID: "a", State: converge.EdgePresent}}}, "items[1].id", converge.ErrStatusDuplicateID},
		{"edge waiting on non-waiting", ok, &converge.EdgeReport{Revision: 1, Items: []converge.EdgeItem{{ID: "a", State: converge.EdgePresent, WaitingFor: []converge.ID{"b"}}}}, "items[0].waitingFor", converge.ErrStatusInconsistent},
		{"edge empty waiting ID", ok, &converge.EdgeReport{Revision: 1, Items: []converge.EdgeItem{{ID: "a", State: converge.EdgeWaitingForDependencies, WaitingFor: []converge.ID{""}}}}, "items[0].waitingFor[0]", converge.ErrStatusEmptyID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := converge.DeriveStatus(tt.desired, tt.edge, statusDiscard())
			require.Error(t, err)
			assert.Nil(t, st)
			assert.ErrorIs(t, err, converge.ErrStatusInvalid)
			assert.ErrorIs(t, err, tt.want)
			var fe *converge.StatusFieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tt.field, fe.Field)
		})
	}
}

// TestStatusNilLoggerUsesDefault: nil means slog.Default().
func TestStatusNilLoggerUsesDefault(t *testing.T) {
	logs := &statusLogs{}
	prev := slog.Default()
	slog.SetDefault(slog.New(logs))
	defer slog.SetDefault(prev)
	_, err := converge.DeriveStatus(converge.Desired{Revision: 1},
		&converge.EdgeReport{Revision: 1, Items: []converge.EdgeItem{{ID: "stray", State: converge.EdgePresent}}}, nil)
	require.NoError(t, err)
	require.Len(t, logs.records, 1)
	assert.Equal(t, "stray", logs.attrs(0)["id"])
	assert.Equal(t, "maybe", logs.attrs(0)["review"])
}

// statusReport builds a walk report by hand for EdgeReportFrom.
func statusReport(items ...converge.ItemResult) *converge.Report {
	return &converge.Report{Mode: converge.ModeApply, Items: items}
}

func TestStatusEdgeReportFromOutcomes(t *testing.T) {
	at := time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)
	started := at.Add(-time.Minute)
	boom := errors.New("boom")
	ie := func(id converge.ID, p converge.Phase) error { return &converge.ItemError{ID: id, Phase: p, Err: boom} }
	tests := []struct {
		name string
		in   converge.ItemResult
		want converge.EdgeItem
	}{
		{"unchanged present", converge.ItemResult{ID: "a", Outcome: converge.OutcomeUnchanged, Started: started, Duration: time.Second},
			converge.EdgeItem{ID: "a", State: converge.EdgePresent, Time: started.Add(time.Second)}},
		{"changed present", converge.ItemResult{ID: "a", Outcome: converge.OutcomeChanged},
			converge.EdgeItem{ID: "a", State: converge.EdgePresent, Time: at}},
		{"unchanged absent", converge.ItemResult{ID: "a", Presence: converge.Absent, Outcome: converge.OutcomeUnchanged},
			converge.EdgeItem{ID: "a", State: converge.EdgeAbsent, Time: at}},
		{"changed absent", converge.ItemResult{ID: "a", Presence: converge.Absent, Outcome: converge.OutcomeChanged},
			converge.EdgeItem{ID: "a", State: converge.EdgeAbsent, Time: at}},
	}
	for _, p := range []converge.Phase{converge.PhaseDiscover, converge.PhaseGoal, converge.PhaseCheck, converge.PhaseApply, converge.PhaseVerify} {
		for _, pr := range []converge.Presence{converge.Present, converge.Absent} {
			var want converge.EdgeState
			switch {
			// A check that errors while verifying leaves the state
			// unknown: openDuT's Assert step.
			case (p <= converge.PhaseCheck || p == converge.PhaseVerify) && pr == converge.Present:
				want = converge.EdgeCheckPresentFailed
			case p <= converge.PhaseCheck || p == converge.PhaseVerify:
				want = converge.EdgeCheckAbsentFailed
			case pr == converge.Present:
				want = converge.EdgeCreatingFailed
			default:
				want = converge.EdgeRemovingFailed
			}
			tests = append(tests, struct {
				name string
				in   converge.ItemResult
				want converge.EdgeItem
			}{
				fmt.Sprintf("failed in %s, %s", p, pr),
				converge.ItemResult{ID: "a", Presence: pr, Outcome: converge.OutcomeFailed, Phase: p, Err: ie("a", p)},
				converge.EdgeItem{ID: "a", State: want, Message: "boom", Time: at},
			})
		}
	}
	tests = append(tests, []struct {
		name string
		in   converge.ItemResult
		want converge.EdgeItem
	}{
		{"did not converge", converge.ItemResult{ID: "a", Outcome: converge.OutcomeFailed, Phase: converge.PhaseVerify,
			Err: &converge.ItemError{ID: "a", Phase: converge.PhaseVerify, Err: converge.ErrNotConverged}},
			converge.EdgeItem{ID: "a", State: converge.EdgeCreatingFailed, Message: converge.ErrNotConverged.Error(), Time: at}},
		{"did not converge, absent", converge.ItemResult{ID: "a", Presence: converge.Absent, Outcome: converge.OutcomeFailed, Phase: converge.PhaseVerify,
			Err: &converge.ItemError{ID: "a", Phase: converge.PhaseVerify, Err: converge.ErrNotConverged}},
			converge.EdgeItem{ID: "a", State: converge.EdgeRemovingFailed, Message: converge.ErrNotConverged.Error(), Time: at}},
		{"waiting", converge.ItemResult{ID: "a", Outcome: converge.OutcomeWaiting, WaitingFor: []converge.ID{"b", "c"}},
			converge.EdgeItem{ID: "a", State: converge.EdgeWaitingForDependencies, WaitingFor: []converge.ID{"b", "c"}, Time: at}},
		{"not run", converge.ItemResult{ID: "a", Outcome: converge.OutcomeNotRun, Err: fmt.Errorf("%w: %w", converge.ErrNotRun, context.Canceled)},
			converge.EdgeItem{ID: "a", State: converge.EdgeNotRun, Message: "converge: item not run: context canceled", Time: at}},
	}...)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			er, err := converge.EdgeReportFrom(statusReport(tt.in), 9, at)
			require.NoError(t, err)
			assert.Equal(t, uint64(9), er.Revision)
			assert.Equal(t, at, er.Time)
			require.Len(t, er.Items, 1)
			assert.Equal(t, tt.want, er.Items[0])
		})
	}
}

func TestStatusEdgeReportFromRefuses(t *testing.T) {
	at := time.Unix(0, 0)
	t.Run("dry run", func(t *testing.T) {
		rep := statusReport(converge.ItemResult{ID: "a", Outcome: converge.OutcomeWouldChange})
		rep.Dry = true
		er, err := converge.EdgeReportFrom(rep, 1, at)
		assert.Nil(t, er)
		assert.ErrorIs(t, err, converge.ErrEdgeDryRun)
		var we *converge.EdgeWalkError
		require.ErrorAs(t, err, &we)
		assert.Empty(t, we.ID)
	})
	t.Run("nil report", func(t *testing.T) {
		_, err := converge.EdgeReportFrom(nil, 1, at)
		assert.ErrorIs(t, err, converge.ErrEdgeNoReport)
	})
	t.Run("revision 0", func(t *testing.T) {
		_, err := converge.EdgeReportFrom(statusReport(), 0, at)
		assert.ErrorIs(t, err, converge.ErrStatusNoRevision)
	})
	t.Run("would-change outside a dry run", func(t *testing.T) {
		_, err := converge.EdgeReportFrom(statusReport(
			converge.ItemResult{ID: "ok", Outcome: converge.OutcomeUnchanged},
			converge.ItemResult{ID: "odd", Outcome: converge.OutcomeWouldChange}), 1, at)
		assert.ErrorIs(t, err, converge.ErrEdgeBadOutcome)
		var we *converge.EdgeWalkError
		require.ErrorAs(t, err, &we)
		assert.Equal(t, converge.ID("odd"), we.ID)
		assert.Contains(t, err.Error(), `"odd"`)
	})
	t.Run("failure without a phase", func(t *testing.T) {
		_, err := converge.EdgeReportFrom(statusReport(converge.ItemResult{ID: "p", Outcome: converge.OutcomeFailed}), 1, at)
		assert.ErrorIs(t, err, converge.ErrEdgeBadOutcome)
	})
	t.Run("duplicate IDs", func(t *testing.T) {
		_, err := converge.EdgeReportFrom(statusReport(
			converge.ItemResult{ID: "a", Outcome: converge.OutcomeUnchanged},
			converge.ItemResult{ID: "a", Outcome: converge.OutcomeUnchanged}), 1, at)
		assert.ErrorIs(t, err, converge.ErrStatusDuplicateID)
	})
}

// TestStatusEndToEnd walks a real graph in which one item fails, turns the
// walk into an edge report, sends it over JSON and derives the status.
//
//	base (fails in Apply) <- app <- web      cfg (independent)      old (absent)
func TestStatusEndToEnd(t *testing.T) {
	base := (&convergetest.Item{Key: "base", Goal: "v1"}).FailAt(converge.PhaseApply, 1, errors.New("disk full"))
	g := converge.NewGraph()
	g.Add(base.Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "app", Goal: "v1"}).Node(), converge.Present, "base")
	g.Add((&convergetest.Item{Key: "web", Goal: "v1"}).Node(), converge.Present, "app")
	g.Add((&convergetest.Item{Key: "cfg", Goal: "on", Value: "off"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "old", Value: "leftover"}).Node(), converge.Absent)
	desired := converge.Desired{Revision: 12, Items: []converge.DesiredItem{
		{ID: "base"}, {ID: "app"}, {ID: "web"}, {ID: "cfg"}, {ID: "old", Presence: converge.Absent},
	}}
	at := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

	rep, err := converge.Apply(context.Background(), g)
	require.Error(t, err)
	require.NotNil(t, rep)
	assert.Equal(t, 1, base.Calls("Apply"))

	edge, err := converge.EdgeReportFrom(rep, desired.Revision, at)
	require.NoError(t, err)
	states := map[converge.ID]converge.EdgeState{}
	for _, it := range edge.Items {
		states[it.ID] = it.State
	}
	assert.Equal(t, map[converge.ID]converge.EdgeState{
		"base": converge.EdgeCreatingFailed, "app": converge.EdgeWaitingForDependencies,
		"web": converge.EdgeWaitingForDependencies, "cfg": converge.EdgePresent, "old": converge.EdgeAbsent,
	}, states)
	b, _ := edge.Item("base")
	assert.Equal(t, "disk full", b.Message)
	assert.Equal(t, converge.EdgeDetectedAbsent, b.Detected())
	w, _ := edge.Item("web")
	assert.Equal(t, []converge.ID{"app"}, w.WaitingFor)

	// The agent sends the report; the central side reads it.
	wire, err := json.Marshal(edge)
	require.NoError(t, err)
	var got converge.EdgeReport
	require.NoError(t, json.Unmarshal(wire, &got))

	st, err := converge.DeriveStatus(desired, &got, statusDiscard())
	require.NoError(t, err)
	want := map[converge.ID]converge.Status{
		"base": converge.StatusCreatingFailed, "app": converge.StatusWaitingForDependencies,
		"web": converge.StatusWaitingForDependencies, "cfg": converge.StatusPresent, "old": converge.StatusAbsent,
	}
	for _, it := range st.Items {
		assert.Equal(t, want[it.ID], it.Status, it.ID)
	}
	assert.False(t, st.Ready())
	assert.Equal(t, []converge.ID{"base"}, st.NeedsAttention())
	assert.Equal(t, []converge.ID{"base"}, st.Failed())
	assert.Equal(t, []converge.ID{"app", "web"}, st.Transitional())
	assert.Empty(t, st.Dropped)
	assert.Equal(t, "revision 12: not ready: 5 items: 1 present, 1 absent, 2 waiting-for-dependencies, 1 creating-failed; needs review: base", st.Summary())

	// The central side publishes the status; a UI reads it back.
	wire, err = json.Marshal(st)
	require.NoError(t, err)
	var ui converge.StatusReport
	require.NoError(t, json.Unmarshal(wire, &ui))
	assert.Equal(t, st.Summary(), ui.Summary())

	// The failure was transient: the next walk of the same graph converges
	// and the device is ready.
	rep3, err := converge.Apply(context.Background(), g)
	require.NoError(t, err)
	edge3, err := converge.EdgeReportFrom(rep3, desired.Revision, at)
	require.NoError(t, err)
	st3, err := converge.DeriveStatus(desired, edge3, statusDiscard())
	require.NoError(t, err)
	assert.True(t, st3.Ready())
	assert.Empty(t, st3.NeedsAttention())
	assert.Equal(t, "revision 12: ready: 5 items: 4 present, 1 absent", st3.Summary())
}

// TestStatusEndToEndDryAndCancelled: a dry run is refused; a walk cancelled
// before it started reports every item not run, which the central side
// counts as not reported yet.
func TestStatusEndToEndDryAndCancelled(t *testing.T) {
	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "a", Goal: "x"}).Node(), converge.Present)
	g.Add((&convergetest.Item{Key: "b", Value: "y"}).Node(), converge.Absent)
	desired := converge.Desired{Revision: 2, Items: []converge.DesiredItem{{ID: "a"}, {ID: "b", Presence: converge.Absent}}}

	dry, err := converge.ApplyDry(context.Background(), g)
	require.NoError(t, err)
	_, err = converge.EdgeReportFrom(dry, 2, time.Now())
	require.ErrorIs(t, err, converge.ErrEdgeDryRun)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep, err := converge.Apply(ctx, g)
	require.ErrorIs(t, err, converge.ErrNotRun)
	edge, err := converge.EdgeReportFrom(rep, 2, time.Now())
	require.NoError(t, err)
	for _, it := range edge.Items {
		assert.Equal(t, converge.EdgeNotRun, it.State, it.ID)
		assert.Contains(t, it.Message, "context canceled")
	}
	st, err := converge.DeriveStatus(desired, edge, statusDiscard())
	require.NoError(t, err)
	a, _ := st.Item("a")
	b, _ := st.Item("b")
	assert.Equal(t, converge.StatusCreating, a.Status)
	assert.Equal(t, converge.StatusRemoving, b.Status)
	assert.Empty(t, st.NeedsAttention())
}

func TestStatusReadinessAndSummary(t *testing.T) {
	st, err := converge.DeriveStatus(
		converge.Desired{Revision: 4, Items: []converge.DesiredItem{
			{ID: "a"}, {ID: "b"}, {ID: "c", Presence: converge.Absent}, {ID: "d"},
		}},
		&converge.EdgeReport{Revision: 4, Items: []converge.EdgeItem{
			{ID: "a", State: converge.EdgePresent},
			{ID: "b", State: converge.EdgeCheckPresentFailed},
			{ID: "c", State: converge.EdgePresent},
			{ID: "x", State: converge.EdgePresent},
			{ID: "y", State: converge.EdgeAbsent},
		}}, statusDiscard())
	require.NoError(t, err)
	assert.False(t, st.Ready())
	assert.Equal(t, []converge.ID{"c", "d"}, st.Transitional())
	assert.Equal(t, []converge.ID{"b"}, st.Failed())
	assert.Equal(t, []converge.ID{"b", "x"}, st.NeedsAttention())
	assert.Equal(t, 1, st.Count(converge.StatusPresent))
	assert.Equal(t, 1, st.Count(converge.StatusRemoving))
	assert.Equal(t, 1, st.Count(converge.StatusCreating))
	assert.Len(t, st.Dropped, 2)
	assert.Equal(t, "revision 4: not ready: 4 items: 1 present, 1 creating, 1 removing, 1 check-present-failed; needs review: b, x; 2 dropped", st.Summary())
	_, ok := st.Item("x")
	assert.False(t, ok, "dropped entries are not items")

	empty, err := converge.DeriveStatus(converge.Desired{Revision: 1}, nil, statusDiscard())
	require.NoError(t, err)
	assert.True(t, empty.Ready(), "nothing desired is ready")

	var nilReport *converge.StatusReport
	assert.False(t, nilReport.Ready())
	assert.Nil(t, nilReport.NeedsAttention())
	assert.Equal(t, "no status", nilReport.Summary())
}

func TestStatusEnums(t *testing.T) {
	t.Run("edge states", func(t *testing.T) {
		names := []string{"not-reported", "present", "absent", "check-present-failed", "check-absent-failed",
			"creating-failed", "removing-failed", "waiting-for-dependencies", "not-run"}
		for i, n := range names {
			s := converge.EdgeState(i)
			assert.Equal(t, n, s.String())
			b, err := s.MarshalText()
			require.NoError(t, err)
			var back converge.EdgeState
			require.NoError(t, back.UnmarshalText(b))
			assert.Equal(t, s, back)
		}
		failed := []converge.EdgeState{converge.EdgeCheckPresentFailed, converge.EdgeCheckAbsentFailed, converge.EdgeCreatingFailed, converge.EdgeRemovingFailed}
		for i := range names {
			assert.Equal(t, slicesContainsState(failed, converge.EdgeState(i)), converge.EdgeState(i).Failed())
		}
		_, err := converge.EdgeState(99).MarshalText()
		assert.ErrorIs(t, err, converge.ErrStatusUnknownValue)
		var s converge.EdgeState
		err = s.UnmarshalText([]byte("Present"))
		assert.ErrorIs(t, err, converge.ErrStatusUnknownValue)
		assert.ErrorIs(t, err, converge.ErrStatusInvalid)
		assert.Contains(t, err.Error(), `"Present"`)
		assert.Equal(t, "edge-state(99)", converge.EdgeState(99).String())
	})
	t.Run("statuses", func(t *testing.T) {
		names := []string{"present", "absent", "creating", "removing", "waiting-for-dependencies",
			"creating-failed", "removing-failed", "check-present-failed", "check-absent-failed"}
		for i, n := range names {
			s := converge.Status(i + 1)
			assert.Equal(t, n, s.String())
			var back converge.Status
			require.NoError(t, back.UnmarshalText([]byte(n)))
			assert.Equal(t, s, back)
			kinds := 0
			for _, b := range []bool{s.Final(), s.Transitional(), s.Failed()} {
				if b {
					kinds++
				}
			}
			assert.Equal(t, 1, kinds, "%s is exactly one of final, transitional, failed", s)
		}
		_, err := converge.Status(0).MarshalText()
		assert.ErrorIs(t, err, converge.ErrStatusUnknownValue)
		var s converge.Status
		assert.ErrorIs(t, s.UnmarshalText([]byte("")), converge.ErrStatusUnknownValue)
		assert.False(t, converge.Status(0).Failed())
	})
	t.Run("reviews and detected", func(t *testing.T) {
		for i, n := range []string{"no", "yes", "maybe"} {
			r := converge.Attention(i)
			b, err := r.MarshalText()
			require.NoError(t, err)
			assert.Equal(t, n, string(b))
			var back converge.Attention
			require.NoError(t, back.UnmarshalText(b))
			assert.Equal(t, r, back)
		}
		assert.False(t, converge.AttentionNone.Needed())
		var r converge.Attention
		assert.ErrorIs(t, r.UnmarshalText([]byte("perhaps")), converge.ErrStatusUnknownValue)
		_, err := converge.Attention(3).MarshalText()
		assert.ErrorIs(t, err, converge.ErrStatusUnknownValue)
		assert.Equal(t, []string{"unknown", "present", "absent", "edge-detected(3)"}, []string{
			converge.EdgeDetectedUnknown.String(), converge.EdgeDetectedPresent.String(),
			converge.EdgeDetectedAbsent.String(), converge.EdgeDetected(3).String()})
	})
}

func slicesContainsState(ss []converge.EdgeState, s converge.EdgeState) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

const (
	statusDesiredJSON = `{"revision":7,"items":[{"id":"a","presence":"present"},{"id":"b","presence":"absent"}]}`
	statusEdgeJSON    = `{"revision":7,"time":"2026-11-22T10:00:00Z","items":[` +
		`{"id":"a","state":"creating-failed","message":"disk full","time":"2026-11-22T09:59:58Z"},` +
		`{"id":"c","state":"waiting-for-dependencies","waitingFor":["a"]},` +
		`{"id":"b","state":"present"}]}`
	statusReportJSON = `{"revision":7,"edgeRevision":7,"reported":true,"edgeTime":"2026-11-22T10:00:00Z","ready":false,"items":[` +
		`{"id":"a","desired":"present","edge":"creating-failed","status":"creating-failed","review":"yes","message":"disk full","time":"2026-11-22T09:59:58Z"},` +
		`{"id":"b","desired":"absent","edge":"present","status":"removing","review":"no"}],` +
		`"dropped":[{"id":"c","edge":"waiting-for-dependencies","review":"no"}]}`
)

// TestStatusJSONGolden pins the wire format of the three documents.
func TestStatusJSONGolden(t *testing.T) {
	var desired converge.Desired
	require.NoError(t, json.Unmarshal([]byte(statusDesiredJSON), &desired))
	assert.Equal(t, converge.Desired{Revision: 7, Items: []converge.DesiredItem{
		{ID: "a", Presence: converge.Present}, {ID: "b", Presence: converge.Absent}}}, desired)
	out, err := json.Marshal(desired)
	require.NoError(t, err)
	assert.JSONEq(t, statusDesiredJSON, string(out))

	var edge converge.EdgeReport
	require.NoError(t, json.Unmarshal([]byte(statusEdgeJSON), &edge))
	require.Len(t, edge.Items, 3)
	assert.Equal(t, []converge.ID{"a"}, edge.Items[1].WaitingFor)
	assert.Equal(t, "disk full", edge.Items[0].Message)
	out, err = json.Marshal(&edge)
	require.NoError(t, err)
	assert.Equal(t, statusEdgeJSON, string(out))

	// Derive from the decoded documents and compare with the golden status.
	logs := &statusLogs{}
	st, err := converge.DeriveStatus(desired, &edge, slog.New(logs))
	require.NoError(t, err)
	out, err = json.Marshal(st)
	require.NoError(t, err)
	assert.Equal(t, statusReportJSON, string(out))
	require.Len(t, logs.records, 1, "c is dropped")

	var back converge.StatusReport
	require.NoError(t, json.Unmarshal([]byte(statusReportJSON), &back))
	assert.Equal(t, *st, back)

	t.Run("empty lists", func(t *testing.T) {
		out, err := json.Marshal(converge.Desired{Revision: 1})
		require.NoError(t, err)
		assert.Equal(t, `{"revision":1,"items":[]}`, string(out))
		var d converge.Desired
		require.NoError(t, json.Unmarshal([]byte(`{"items":null,"revision":1}`), &d))
		assert.Equal(t, converge.Desired{Revision: 1}, d)
		out, err = json.Marshal(converge.StatusReport{Revision: 1})
		require.NoError(t, err)
		assert.Equal(t, `{"revision":1,"edgeRevision":0,"reported":false,"ready":true,"items":[],"dropped":[]}`, string(out))
	})
}

// TestStatusJSONStrict: every kind of bad document is rejected with an error
// naming the field and value, and leaves the target unchanged.
func TestStatusJSONStrict(t *testing.T) {
	type doc int
	const (
		desired doc = iota
		edge
		report
	)
	tests := []struct {
		name  string
		doc   doc
		in    string
		want  error
		field string
		value string
	}{
		{"unknown top field", desired, `{"revision":1,"items":[],"owner":"x"}`, converge.ErrStatusUnknownField, "owner", ""},
		{"unknown item field", desired, `{"revision":1,"items":[{"id":"a","presence":"present","mode":1}]}`, converge.ErrStatusUnknownField, "items[0].mode", ""},
		{"unknown presence", desired, `{"revision":1,"items":[{"id":"a","presence":"Present"}]}`, converge.ErrStatusUnknownValue, "items[0].presence", "Present"},
		{"missing presence", desired, `{"revision":1,"items":[{"id":"a"}]}`, converge.ErrStatusMissingField, "items[0].presence", ""},
		{"missing revision", desired, `{"items":[]}`, converge.ErrStatusMissingField, "revision", ""},
		{"revision 0", desired, `{"revision":0,"items":[]}`, converge.ErrStatusNoRevision, "revision", "0"},
		{"negative revision", desired, `{"revision":-1,"items":[]}`, converge.ErrStatusMalformed, "revision", ""},
		{"null revision", desired, `{"revision":null,"items":[]}`, converge.ErrStatusMalformed, "revision", "null"},
		{"duplicate field", desired, `{"revision":1,"revision":2,"items":[]}`, converge.ErrStatusDuplicateField, "revision", ""},
		{"duplicate id", desired, `{"revision":1,"items":[{"id":"a","presence":"present"},{"id":"a","presence":"absent"}]}`, converge.ErrStatusDuplicateID, "items[1].id", "a"},
		{"empty id", desired, `{"revision":1,"items":[{"id":"","presence":"present"}]}`, converge.ErrStatusEmptyID, "items[0].id", ""},
		{"not an object", desired, `[1]`, converge.ErrStatusMalformed, "", "["},
		{"null document", desired, `null`, converge.ErrStatusMalformed, "", "<nil>"},
		{"items not a list", desired, `{"revision":1,"items":{}}`, converge.ErrStatusMalformed, "items", "{"},
		{"item not an object", desired, `{"revision":1,"items":["a"]}`, converge.ErrStatusMalformed, "items[0]", "a"},

		{"unknown state", edge, `{"revision":1,"items":[{"id":"a","state":"exploded"}]}`, converge.ErrStatusUnknownValue, "items[0].state", "exploded"},
		{"not-reported in edge report", edge, `{"revision":1,"items":[{"id":"a","state":"not-reported"}]}`, converge.ErrStatusUnknownValue, "items[0].state", "not-reported"},
		{"state as number", edge, `{"revision":1,"items":[{"id":"a","state":1}]}`, converge.ErrStatusMalformed, "items[0].state", ""},
		{"bad time", edge, `{"revision":1,"time":"yesterday","items":[]}`, converge.ErrStatusMalformed, "time", ""},
		{"waitingFor on present", edge, `{"revision":1,"items":[{"id":"a","state":"present","waitingFor":["b"]}]}`, converge.ErrStatusInconsistent, "items[0].waitingFor", "present"},
		{"unknown edge item field", edge, `{"revision":1,"items":[{"id":"a","state":"present","detected":"present"}]}`, converge.ErrStatusUnknownField, "items[0].detected", ""},

		{"unknown status", report, `{"revision":1,"items":[{"id":"a","desired":"present","edge":"present","status":"done","review":"no"}]}`, converge.ErrStatusUnknownValue, "items[0].status", "done"},
		{"unknown review", report, `{"revision":1,"items":[{"id":"a","desired":"present","edge":"present","status":"present","review":"perhaps"}]}`, converge.ErrStatusUnknownValue, "items[0].review", "perhaps"},
		{"unknown edge", report, `{"revision":1,"items":[{"id":"a","desired":"present","edge":"gone","status":"present","review":"no"}]}`, converge.ErrStatusUnknownValue, "items[0].edge", "gone"},
		{"unknown desired", report, `{"revision":1,"items":[{"id":"a","desired":"maybe","edge":"present","status":"present","review":"no"}]}`, converge.ErrStatusUnknownValue, "items[0].desired", "maybe"},
		{"missing status", report, `{"revision":1,"items":[{"id":"a","desired":"present","edge":"present","review":"no"}]}`, converge.ErrStatusMissingField, "items[0].status", ""},
		{"ready contradicts items", report, `{"revision":1,"ready":true,"items":[{"id":"a","desired":"present","edge":"absent","status":"creating","review":"no"}]}`, converge.ErrStatusInconsistent, "ready", "true"},
		{"reported for another revision", report, `{"revision":2,"edgeRevision":1,"reported":true,"items":[]}`, converge.ErrStatusInconsistent, "reported", "1"},
		{"dropped repeats an item", report, `{"revision":1,"items":[{"id":"a","desired":"present","edge":"present","status":"present","review":"no"}],"dropped":[{"id":"a","edge":"present","review":"maybe"}]}`, converge.ErrStatusDuplicateID, "dropped[0].id", "a"},
		{"dropped not-reported", report, `{"revision":1,"items":[],"dropped":[{"id":"x","edge":"not-reported","review":"no"}]}`, converge.ErrStatusUnknownValue, "dropped[0].edge", "not-reported"},
		{"unknown dropped field", report, `{"revision":1,"items":[],"dropped":[{"id":"x","edge":"present","review":"no","status":"present"}]}`, converge.ErrStatusUnknownField, "dropped[0].status", ""},
		{"summary is not a field", report, `{"revision":1,"items":[],"summary":"ok"}`, converge.ErrStatusUnknownField, "summary", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var target any
			switch tt.doc {
			case desired:
				target = &converge.Desired{Revision: 99}
			case edge:
				target = &converge.EdgeReport{Revision: 99}
			case report:
				target = &converge.StatusReport{Revision: 99}
			}
			before := fmt.Sprint(target)
			err := json.Unmarshal([]byte(tt.in), target)
			require.Error(t, err)
			assert.ErrorIs(t, err, converge.ErrStatusInvalid)
			assert.ErrorIs(t, err, tt.want)
			var fe *converge.StatusFieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tt.field, fe.Field)
			assert.Equal(t, tt.value, fe.Value)
			if tt.field != "" {
				assert.Contains(t, err.Error(), tt.field)
			}
			assert.Equal(t, before, fmt.Sprint(target), "nothing half-written")
		})
	}

	t.Run("trailing data through a decoder", func(t *testing.T) {
		var d converge.Desired
		err := d.UnmarshalJSON([]byte(`{"revision":1,"items":[]} {}`))
		assert.ErrorIs(t, err, converge.ErrStatusMalformed)
	})
	t.Run("encoding an invalid document fails", func(t *testing.T) {
		_, err := json.Marshal(converge.Desired{})
		assert.ErrorIs(t, err, converge.ErrStatusNoRevision)
		_, err = json.Marshal(converge.EdgeReport{Revision: 1, Items: []converge.EdgeItem{{ID: "a", State: 50}}})
		assert.ErrorIs(t, err, converge.ErrStatusUnknownValue)
		_, err = json.Marshal(converge.StatusReport{Revision: 1, Items: []converge.StatusItem{{ID: "a", Edge: converge.EdgePresent}}})
		assert.ErrorIs(t, err, converge.ErrStatusUnknownValue, "zero status")
	})
	t.Run("errors read well", func(t *testing.T) {
		var e converge.EdgeReport
		err := json.Unmarshal([]byte(`{"revision":1,"items":[{"id":"a","state":"exploded"}]}`), &e)
		assert.EqualError(t, err, `converge: edge report: items[0].state: unknown value "exploded"`)
	})
}

func TestStatusStringHelpers(t *testing.T) {
	// Message without ItemError wrapping keeps the error text.
	er, err := converge.EdgeReportFrom(statusReport(converge.ItemResult{
		ID: "a", Outcome: converge.OutcomeFailed, Phase: converge.PhaseApply, Err: errors.New("plain"),
	}), 1, time.Time{})
	require.NoError(t, err)
	assert.Equal(t, "plain", er.Items[0].Message)
	var buf bytes.Buffer
	require.NoError(t, json.NewEncoder(&buf).Encode(er))
	assert.False(t, strings.Contains(buf.String(), `"time"`), "zero times are left out: %s", buf.String())
}

func TestStatusReportValidate(t *testing.T) {
	item := func(mod func(*converge.StatusItem)) converge.StatusReport {
		it := converge.StatusItem{ID: "a", Edge: converge.EdgePresent, Status: converge.StatusPresent}
		mod(&it)
		return converge.StatusReport{Revision: 1, Items: []converge.StatusItem{it}}
	}
	tests := []struct {
		name  string
		in    converge.StatusReport
		field string
		want  error
	}{
		{"empty ID", item(func(it *converge.StatusItem) { it.ID = "" }), "items[0].id", converge.ErrStatusEmptyID},
		{"bad desired", item(func(it *converge.StatusItem) { it.Desired = 5 }), "items[0].desired", converge.ErrStatusUnknownValue},
		{"bad edge", item(func(it *converge.StatusItem) { it.Edge = 50 }), "items[0].edge", converge.ErrStatusUnknownValue},
		{"zero status", item(func(it *converge.StatusItem) { it.Status = 0 }), "items[0].status", converge.ErrStatusUnknownValue},
		{"bad review", item(func(it *converge.StatusItem) { it.Attention = 9 }), "items[0].review", converge.ErrStatusUnknownValue},
		{"waitingFor without waiting", item(func(it *converge.StatusItem) { it.WaitingFor = []converge.ID{"b"} }), "items[0].waitingFor", converge.ErrStatusInconsistent},
		{"bad dropped review", converge.StatusReport{Revision: 1, Dropped: []converge.StatusDropped{{ID: "x", Edge: converge.EdgeAbsent, Attention: 4}}}, "dropped[0].review", converge.ErrStatusUnknownValue},
		{"revision 0", converge.StatusReport{}, "revision", converge.ErrStatusNoRevision},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.in.Validate()
			assert.ErrorIs(t, err, tt.want)
			var fe *converge.StatusFieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tt.field, fe.Field)
			_, err = json.Marshal(tt.in)
			assert.ErrorIs(t, err, tt.want, "encoding refuses it too")
		})
	}
	var nilReport *converge.StatusReport
	assert.ErrorIs(t, nilReport.Validate(), converge.ErrStatusInvalid)
	var nilEdge *converge.EdgeReport
	assert.ErrorIs(t, nilEdge.Validate(), converge.ErrStatusInvalid)
	_, ok := nilEdge.Item("a")
	assert.False(t, ok)
	ok2 := item(func(*converge.StatusItem) {})
	assert.NoError(t, ok2.Validate())
}

// TestStatusValidateFindsRepeatsInLongLists: in lists long enough to be
// hashed, Validate still names the first entry that repeats an ID, and
// reports an earlier problem of another kind first.
func TestStatusValidateFindsRepeatsInLongLists(t *testing.T) {
	const n = 50
	id := func(i int) converge.ID { return converge.ID(fmt.Sprintf("item-%d", i)) }
	edge := func(mod func([]converge.EdgeItem)) *converge.EdgeReport {
		e := &converge.EdgeReport{Revision: 1}
		for i := range n {
			e.Items = append(e.Items, converge.EdgeItem{ID: id(i), State: converge.EdgePresent})
		}
		mod(e.Items)
		return e
	}
	desired := func(mod func([]converge.DesiredItem)) converge.Desired {
		c := converge.Desired{Revision: 1}
		for i := range n {
			c.Items = append(c.Items, converge.DesiredItem{ID: id(i), Presence: converge.Present})
		}
		mod(c.Items)
		return c
	}
	report := func(dropped ...converge.ID) *converge.StatusReport {
		s := &converge.StatusReport{Revision: 1}
		for i := range n {
			s.Items = append(s.Items, converge.StatusItem{ID: id(i), Edge: converge.EdgePresent, Status: converge.StatusPresent})
		}
		for _, d := range dropped {
			s.Dropped = append(s.Dropped, converge.StatusDropped{ID: d, Edge: converge.EdgePresent, Attention: converge.AttentionMaybe})
		}
		return s
	}
	tests := []struct {
		name  string
		err   error
		field string
		want  error
	}{
		{"edge: repeat far down", edge(func(it []converge.EdgeItem) { it[41].ID = id(7) }).Validate(), "items[41].id", converge.ErrStatusDuplicateID},
		{"edge: first of two repeats", edge(func(it []converge.EdgeItem) { it[45].ID, it[30].ID = id(2), id(44) }).Validate(), "items[44].id", converge.ErrStatusDuplicateID},
		{"edge: earlier bad state first", edge(func(it []converge.EdgeItem) { it[41].ID, it[40].State = id(7), 0 }).Validate(), "items[40].state", converge.ErrStatusUnknownValue},
		{"edge: empty before repeated empty", edge(func(it []converge.EdgeItem) { it[20].ID, it[30].ID = "", "" }).Validate(), "items[20].id", converge.ErrStatusEmptyID},
		{"desired: repeat far down", desired(func(it []converge.DesiredItem) { it[49].ID = id(48) }).Validate(), "items[49].id", converge.ErrStatusDuplicateID},
		{"status: dropped repeats an item", report("x", "y", id(33)).Validate(), "dropped[2].id", converge.ErrStatusDuplicateID},
		{"status: dropped repeats a dropped", report("x", "y", "x").Validate(), "dropped[2].id", converge.ErrStatusDuplicateID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.ErrorIs(t, tt.err, tt.want)
			var fe *converge.StatusFieldError
			require.ErrorAs(t, tt.err, &fe)
			assert.Equal(t, tt.field, fe.Field)
		})
	}
	assert.NoError(t, edge(func([]converge.EdgeItem) {}).Validate())
	assert.NoError(t, desired(func([]converge.DesiredItem) {}).Validate())
	assert.NoError(t, report("x", "y").Validate())
}
