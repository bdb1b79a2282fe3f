package convergetest_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestItemFailAtCountsDown(t *testing.T) {
	it := (&convergetest.Item{Key: "a", Goal: "x"}).FailAt(converge.PhaseApply, 2, nil)
	g := converge.NewGraph()
	g.Add(it.Node(), converge.Present)
	for range 2 {
		_, err := converge.Apply(t.Context(), g)
		require.ErrorIs(t, err, convergetest.ErrInjected)
	}
	_, err := converge.Apply(t.Context(), g)
	require.NoError(t, err)
	assert.Equal(t, 3, it.Calls("Apply"))
	assert.Equal(t, "x", it.Current())
}

func TestItemRefuseFailsTheTargetsItNames(t *testing.T) {
	errNever := errors.New("never starts")
	tests := []struct {
		goal    string
		wantErr error
		want    string
	}{
		{goal: "good", want: "good"},
		{goal: "bad", wantErr: errNever, want: "old"},
	}
	for _, tt := range tests {
		t.Run(tt.goal, func(t *testing.T) {
			it := &convergetest.Item{Key: "a", Value: "old", Goal: tt.goal, Refuse: func(target string) error {
				if target == "bad" {
					return errNever
				}
				return nil
			}}
			g := converge.NewGraph()
			g.Add(it.Node(), converge.Present)
			_, err := converge.Apply(t.Context(), g)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.want, it.Current())
		})
	}
}

func TestItemVerifyFailureOnlyAfterApply(t *testing.T) {
	custom := errors.New("flaky read")
	it := (&convergetest.Item{Key: "a", Goal: "x"}).FailAt(converge.PhaseVerify, 1, custom)
	g := converge.NewGraph()
	g.Add(it.Node(), converge.Present)
	rep, err := converge.Apply(t.Context(), g)
	require.ErrorIs(t, err, custom)
	assert.Equal(t, converge.PhaseVerify, rep.Items[0].Phase)
	assert.Equal(t, 2, it.Calls("StateCurrent"))
}

func TestItemDriftAndRecorder(t *testing.T) {
	rec := &convergetest.Recorder{}
	it := &convergetest.Item{Key: "a", Goal: "x", Recorder: rec}
	g := converge.NewGraph()
	g.Add(it.Node(), converge.Present)
	_, err := converge.Apply(t.Context(), g)
	require.NoError(t, err)
	it.SetCurrent("drifted")
	rep, err := converge.Apply(t.Context(), g)
	require.NoError(t, err)
	assert.Equal(t, "drifted", rep.Items[0].Before)
	assert.Equal(t, []convergetest.Record{{ID: "a", What: "apply-start"}, {ID: "a", What: "apply-end"}, {ID: "a", What: "apply-start"}, {ID: "a", What: "apply-end"}}, rec.Records())
	assert.Equal(t, -1, rec.Index("b", "apply-start"))
	assert.Equal(t, "a apply-start", rec.Records()[0].String())
	var nilRec *convergetest.Recorder
	assert.NotPanics(t, func() { _, _ = (&convergetest.Item{Key: "n", Goal: "y", Recorder: nilRec}).Apply(t.Context(), "", "y") })
}

func TestConformPassesForTheFake(t *testing.T) {
	it := &convergetest.Item{Key: "a", Goal: "x", Value: "old"}
	require.NoError(t, convergetest.Conform[string](t.Context(), it, convergetest.ConformOptions{
		Snapshot: func(context.Context) (any, error) { return it.Current(), nil },
	}))
	assert.Equal(t, "x", it.Current(), "Conform leaves the item applied")
}

// dryWriter breaks the contract: its dry run writes.
type dryWriter struct{ convergetest.Item }

func (d *dryWriter) ApplyDry(ctx context.Context, c, t string) (string, error) {
	d.SetCurrent(t)
	return t, nil
}

// noop breaks the contract: Apply reports success but changes nothing.
type noop struct{ convergetest.Item }

func (n *noop) Apply(ctx context.Context, c, t string) (string, error) { return t, nil }

// badClean cannot be removed.
type badClean struct{ convergetest.Item }

func (b *badClean) Apply(ctx context.Context, c, t string) (string, error) {
	if t == "" {
		return c, errors.New("refuses to remove")
	}
	return b.Item.Apply(ctx, c, t)
}

func TestConformFindsBrokenItems(t *testing.T) {
	tests := []struct {
		name string
		item converge.Item[string]
		step string
	}{
		{"dry run writes", &dryWriter{convergetest.Item{Key: "d", Goal: "x"}}, "ApplyDry"},
		{"apply does nothing", &noop{convergetest.Item{Key: "n", Goal: "x"}}, "apply"},
		{"clean fails", &badClean{convergetest.Item{Key: "c", Goal: "x"}}, "clean: Apply"},
		{"goal fails", (&convergetest.Item{Key: "g", Goal: "x"}).FailAt(converge.PhaseGoal, -1, nil), "StateGoal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := convergetest.Conform(t.Context(), tt.item, convergetest.ConformOptions{})
			require.ErrorIs(t, err, convergetest.ErrNonConformant)
			var ce *convergetest.ConformanceError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.item.ID(), ce.ID)
			assert.Equal(t, tt.step, ce.Step)
		})
	}
}

func TestConformSnapshotCatchesHiddenWrites(t *testing.T) {
	dir := t.TempDir()
	it := &sneaky{Item: convergetest.Item{Key: "s", Goal: "x"}, dir: dir}
	err := convergetest.Conform[string](t.Context(), it, convergetest.ConformOptions{
		Snapshot: func(context.Context) (any, error) {
			entries, err := os.ReadDir(dir)
			names := []string{}
			for _, e := range entries {
				names = append(names, e.Name())
			}
			return names, err
		},
	})
	require.ErrorIs(t, err, convergetest.ErrNonConformant)
	assert.Contains(t, err.Error(), "the real system changed during a dry run")
}

// sneaky writes a file during its dry run that StateCurrent does not see.
type sneaky struct {
	convergetest.Item
	dir string
}

func (s *sneaky) ApplyDry(ctx context.Context, c, t string) (string, error) {
	return t, os.WriteFile(filepath.Join(s.dir, "oops"), nil, 0o600)
}
