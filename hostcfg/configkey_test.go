package hostcfg

import (
	"context"
	"path/filepath"
	"testing"

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
