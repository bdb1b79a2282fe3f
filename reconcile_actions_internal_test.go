package converge

import (
	"context"
	"os"
	"path/filepath"
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

// TestActionBookDropsWhatANewBootDid checks the rule that ends a pending
// action: a reboot or a shutdown asked for under one boot ID is done once
// the boot ID differs; an unknown boot ID, then or now, keeps it.
func TestActionBookDropsWhatANewBootDid(t *testing.T) {
	at := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	reboot := PendingAction{Action: ActionReboot, ID: "config:arm_freq", Revision: 2, BootID: "b1", Since: at}
	shutdown := PendingAction{Action: ActionShutdown, ID: "power", Revision: 3, BootID: "b1", Since: at}
	unknown := PendingAction{Action: ActionReboot, ID: "kernel", Revision: 3, Since: at}
	for _, tc := range []struct {
		name   string
		boot   string
		stored []PendingAction
		want   []PendingAction
	}{
		{name: "same boot keeps both", boot: "b1", stored: []PendingAction{reboot, shutdown}, want: []PendingAction{reboot, shutdown}},
		{name: "new boot ends both", boot: "b2", stored: []PendingAction{reboot, shutdown}, want: nil},
		{name: "unknown boot now keeps both", boot: "", stored: []PendingAction{reboot, shutdown}, want: []PendingAction{reboot, shutdown}},
		{name: "asked under an unknown boot is kept", boot: "b2", stored: []PendingAction{unknown, reboot}, want: []PendingAction{unknown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			store := NewMemStore()
			v, err := encodeActions(tc.stored)
			require.NoError(t, err)
			_, err = store.Put(ctx, StoreRecord{Key: TargetActionsKey("edge"), Value: v})
			require.NoError(t, err)
			obs := newTargetObs("edge", nil, nil, time.Now)
			b := &actionBook{store: store, key: TargetActionsKey("edge"), bootID: func(context.Context) (string, error) { return tc.boot, nil }, now: time.Now, obs: &obs}
			require.NoError(t, b.sync(ctx, "", false))
			assert.Equal(t, tc.want, b.pending())
			rec, err := store.Get(ctx, TargetActionsKey("edge"))
			if tc.want == nil {
				require.ErrorIs(t, err, ErrStoreNotFound, "the record is deleted once nothing is pending")
				return
			}
			require.NoError(t, err)
			got, err := decodeActions(rec.Key, rec.Value)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// TestLinuxBootID reads the boot ID where the kernel gives one: the same
// ID twice, and ctx's error when ctx ended.
func TestLinuxBootID(t *testing.T) {
	ctx := context.Background()
	first, err := LinuxBootID(ctx)
	require.NoError(t, err)
	if _, statErr := os.Stat(BootIDFile); statErr != nil {
		assert.Empty(t, first, "no file: unknown, not an error")
	} else {
		assert.NotEmpty(t, first)
		assert.NotContains(t, first, "\n")
	}
	again, err := LinuxBootID(ctx)
	require.NoError(t, err)
	assert.Equal(t, first, again, "one boot, one ID")
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = LinuxBootID(cancelled)
	require.ErrorIs(t, err, context.Canceled)
}

// TestLinuxBootIDReadOncePerProcess: the file is read by the first call
// that succeeds only; a failed read is not kept.
func TestLinuxBootIDReadOncePerProcess(t *testing.T) {
	saved := linuxBootID.Load()
	t.Cleanup(func() { bootIDFile = BootIDFile; linuxBootID.Store(saved) })
	file := filepath.Join(t.TempDir(), "boot_id")
	bootIDFile = filepath.Join(file, "not-a-dir", "boot_id")
	linuxBootID.Store(nil)
	require.NoError(t, os.WriteFile(file, []byte("first\n"), 0o600))
	_, err := LinuxBootID(context.Background())
	require.Error(t, err, "the path goes through a file")
	bootIDFile = file
	steps := []struct {
		name    string
		content string
		want    string
	}{
		{"the first read", "first\n", "first"},
		{"the file changed: the ID read stays", "second\n", "first"},
	}
	for _, st := range steps {
		require.NoError(t, os.WriteFile(file, []byte(st.content), 0o600))
		got, err := LinuxBootID(context.Background())
		require.NoError(t, err, st.name)
		assert.Equal(t, st.want, got, st.name)
	}
}
