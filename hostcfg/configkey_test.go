package hostcfg

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestConfigKeyRebootAndOneLine(t *testing.T) {
	ctx := context.Background()
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "boot/config.txt")
	writeFile(t, p, realConfig)
	cf := NewConfigFile(r, "/boot/config.txt")
	k := cf.Key("", "arm_boost", "0")
	g := graph(k.Node())

	rep, err := converge.ApplyDry(ctx, g)
	require.NoError(t, err)
	res := rep.Items[0]
	assert.True(t, res.After.(ConfigKeyState).RebootRequired)
	assert.Equal(t, realConfig, readFile(t, p))
	assert.Contains(t, Diffs(rep)[0].Diff, "-arm_boost=1\n+arm_boost=0\n")
	require.Len(t, rep.Actions(), 1, "a dry run says the change would need a reboot")
	assert.Equal(t, converge.ActionReboot, rep.Actions()[0].Action)

	rep = mustApply(t, g)
	require.Len(t, rep.Actions(), 1)
	assert.Equal(t, converge.ActionReboot, rep.Actions()[0].Action)
	assert.Equal(t, k.ID(), rep.Actions()[0].ID)
	assert.Contains(t, rep.Actions()[0].Reason, "arm_boost=0")
	assert.Equal(t, []string{"arm_boost=1 -> arm_boost=0"}, changedLines(t, realConfig, readFile(t, p)))

	// Converged: no action.
	rep = mustApply(t, g)
	assert.Empty(t, rep.Actions())

	// A file that is not boot configuration asks for nothing.
	writeFile(t, filepath.Join(dir, "etc/app.conf"), "x=1\n")
	other := NewConfigFile(r, "/etc/app.conf")
	other.Reboot = false
	rep = mustApply(t, graph(other.Key("", "x", "2").Node()))
	assert.Empty(t, rep.Actions())
	assert.Equal(t, "x=2\n", readFile(t, filepath.Join(dir, "etc/app.conf")))
}

func TestConfigKeyAbsentAndEntries(t *testing.T) {
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "boot/config.txt")
	writeFile(t, p, realConfig)
	cf := NewConfigFile(r, "/boot/config.txt")
	g := converge.NewGraph()
	g.Add(cf.Entry("", "dtoverlay", "disable-bt").Node(), converge.Absent)
	g.Add(cf.Key("cm4", "otg_mode", "").Node(), converge.Absent)
	g.Add(cf.Entry("", "dtoverlay", "i2c-rtc,ds3231").Node(), converge.Present)
	mustApply(t, g)
	doc := ParseConfig([]byte(readFile(t, p)))
	assert.Equal(t, []string{"vc4-kms-v3d", "i2c-rtc,ds3231"}, doc.Values("", "dtoverlay"))
	_, ok := doc.Get("cm4", "otg_mode")
	assert.False(t, ok)
	// A missing file with an Absent key stays missing.
	g = converge.NewGraph()
	g.Add(NewConfigFile(r, "/boot/none.txt").Key("", "a", "").Node(), converge.Absent)
	mustApply(t, g)
	assert.NoFileExists(t, filepath.Join(dir, "boot/none.txt"))
	// Invalid keys and values.
	for _, k := range []*ConfigKey{cf.Key("", "", "1"), cf.Key("", "a=b", "1"), cf.Key("", "a", "1\n"), cf.Key("x\ny", "a", "1"), cf.Key("", "dtoverlay", "x"), {Key: "a"}} {
		_, err := converge.Apply(context.Background(), graph(k.Node()))
		require.ErrorIs(t, err, ErrInvalidItem, k.ID())
	}
}

// boxOf returns the address of the value that v holds: two interface
// values with the same box share one copy of the state.
func boxOf(v any) unsafe.Pointer { return (*[2]unsafe.Pointer)(unsafe.Pointer(&v))[1] }

// TestConfigKeyNodeSharesStates checks that the Node of a ConfigKey hands
// out the same boxed goal, clean and current state again while they are
// the same, and a new current state as soon as anything it shows changed:
// the file, the item's fields, the leftover temporary files, a pending
// reboot.
func TestConfigKeyNodeSharesStates(t *testing.T) {
	ctx := context.Background()
	base := ConfigKeyState{Path: "/boot/config.txt", Key: "a", Present: true, Value: "1"}
	for _, tc := range []struct {
		name string
		// leftover plants a temporary file of ours before the first read.
		leftover bool
		change   func(t *testing.T, r *Root, k *ConfigKey, p string)
		want     func(st ConfigKeyState) ConfigKeyState
	}{
		{"nothing changed", false, func(*testing.T, *Root, *ConfigKey, string) {},
			func(st ConfigKeyState) ConfigKeyState { return st }},
		{"file edited in place", false, func(t *testing.T, _ *Root, _ *ConfigKey, p string) {
			fi, err := os.Stat(p)
			require.NoError(t, err)
			writeFile(t, p, "a=9\nb=2\n")
			require.NoError(t, os.Chtimes(p, fi.ModTime(), fi.ModTime()))
		}, func(st ConfigKeyState) ConfigKeyState { st.Value = "9"; return st }},
		{"fields changed", false, func(_ *testing.T, _ *Root, k *ConfigKey, _ string) { k.Key = "b" },
			func(st ConfigKeyState) ConfigKeyState { st.Key, st.Value = "b", "2"; return st }},
		{"leftovers swept", true, func(t *testing.T, r *Root, _ *ConfigKey, _ string) {
			require.NoError(t, r.sweep("/boot/config.txt", "boot/config.txt"))
		}, func(st ConfigKeyState) ConfigKeyState { st.Leftovers = 0; return st }},
		{"reboot pending", false, func(_ *testing.T, _ *Root, k *ConfigKey, _ string) { k.file.notePending(k.ID()) },
			func(st ConfigKeyState) ConfigKeyState { st.RebootRequired = true; return st }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, dir, _ := newRoot(t)
			p := filepath.Join(dir, "boot/config.txt")
			writeFile(t, p, "a=1\nb=2\n")
			before := base
			if tc.leftover {
				writeFile(t, filepath.Join(dir, "boot/.config.txt"+tempMarker+"deadbeef"), "a")
				before.Leftovers = 1
			}
			setNow(t, func() time.Time { return time.Now().Add(time.Hour) }) // the stamp is trusted
			k := NewConfigFile(r, "/boot/config.txt").Key("", "a", "1")
			n := k.Node()
			cn, ok := n.(converge.CleanNode)
			require.True(t, ok, "the Node of a ConfigKey cleans")

			goal, err := n.StateGoal(ctx, nil)
			require.NoError(t, err)
			again, err := n.StateGoal(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, boxOf(goal), boxOf(again), "the goal is boxed once")
			typed, err := k.StateGoal(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, typed, goal)
			clean, err := cn.StateClean(ctx, nil)
			require.NoError(t, err)
			again, err = cn.StateClean(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, boxOf(clean), boxOf(again), "the clean state is boxed once")
			assert.Equal(t, ConfigKeyState{Path: "/boot/config.txt", Key: "a"}, clean)

			cur, err := n.StateCurrent(ctx, nil)
			require.NoError(t, err)
			require.Equal(t, before, cur)
			again, err = n.StateCurrent(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, boxOf(cur), boxOf(again), "an unchanged current state is boxed once")

			tc.change(t, r, k, p)
			after, err := n.StateCurrent(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want(before), after)
			st, err := k.StateCurrent(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, tc.want(before), st, "the typed state")
			goal, err = n.StateGoal(ctx, nil)
			require.NoError(t, err)
			typed, err = k.StateGoal(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, typed, goal, "the goal of the fields as they are")
			clean, err = cn.StateClean(ctx, nil)
			require.NoError(t, err)
			typed, err = k.StateClean(ctx, nil)
			require.NoError(t, err)
			assert.Equal(t, typed, clean, "the clean state of the fields as they are")
		})
	}
}
