package converge_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

// TestReconcileLogsResumeApart checks that a target read back from the
// Store is logged as resumed, not as set: nothing was set.
func TestReconcileLogsResumeApart(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		stored bool
		call   func(r *converge.TargetReconciler[spec]) error
		want   string
	}{
		{name: "SetTarget", call: func(r *converge.TargetReconciler[spec]) error { return r.SetTarget(ctx, spec{App: "new"}) }, want: "target set"},
		{name: "SetTarget over a stored one", stored: true, call: func(r *converge.TargetReconciler[spec]) error { return r.SetTarget(ctx, spec{App: "new"}) }, want: "target set"},
		{name: "Load", stored: true, call: func(r *converge.TargetReconciler[spec]) error { _, err := r.Load(ctx); return err }, want: "target resumed"},
		{name: "LoadOrSet finds one", stored: true, call: func(r *converge.TargetReconciler[spec]) error { _, err := r.LoadOrSet(ctx, spec{}); return err }, want: "target resumed"},
		{name: "LoadOrSet sets the default", call: func(r *converge.TargetReconciler[spec]) error { _, err := r.LoadOrSet(ctx, spec{}); return err }, want: "target set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := converge.NewMemStore()
			if tc.stored {
				_, err := store.PutTarget(ctx, converge.TargetDefaultName, []byte(`{"host":"on","app":"v1"}`))
				require.NoError(t, err)
			}
			var buf bytes.Buffer
			cfg := converge.TargetReconcilerConfig[spec]{Build: newDevice().build, Store: store, BootID: (&bootClock{}).read}
			cfg.Walk.Logger = slog.New(slog.NewTextHandler(&buf, nil))
			r, _ := newReconciler(t, cfg)
			require.NoError(t, tc.call(r))
			var msgs []string
			for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
				if i := strings.Index(line, "msg=\""); i >= 0 {
					msgs = append(msgs, strings.SplitN(line[i+5:], "\"", 2)[0])
				}
			}
			assert.Equal(t, []string{tc.want}, msgs)
		})
	}
}
