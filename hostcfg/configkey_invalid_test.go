package hostcfg

import (
	"context"
	"errors"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

// TestConfigKeyRefusesKeysThatReadAsSomethingElse checks that a key with
// blanks around it, or one that starts a comment, is refused as an
// invalid key, quoting it, before anything is read or written: by the
// Key and by the Entry item, in Apply and in a dry run.
func TestConfigKeyRefusesKeysThatReadAsSomethingElse(t *testing.T) {
	for _, tc := range []struct {
		key, why string
	}{
		{key: " lead", why: "leading or trailing space"},
		{key: "trail ", why: "leading or trailing space"},
		{key: "\tgpu_mem", why: "leading or trailing space"},
		{key: "#gpu_mem", why: `starts with "#"`},
		{key: ";gpu_mem", why: `starts with ";"`},
		{key: "# gpu_mem", why: `starts with "#"`},
	} {
		for _, repeated := range []bool{false, true} {
			t.Run(strconv.Quote(tc.key)+"/repeated="+strconv.FormatBool(repeated), func(t *testing.T) {
				r, dir, _ := newRoot(t)
				p := filepath.Join(dir, "boot/config.txt")
				writeFile(t, p, realConfig)
				cf := NewConfigFile(r, "/boot/config.txt")
				k := cf.Key("", tc.key, "1")
				if repeated {
					k = cf.Entry("", tc.key, "1")
				}
				for _, walk := range []func(context.Context, *converge.Graph) (*converge.Report, error){converge.Apply, converge.ApplyDry} {
					_, err := walk(context.Background(), graph(k.Node()))
					require.ErrorIs(t, err, ErrInvalidItem)
					var ie *ItemError
					require.True(t, errors.As(err, &ie))
					assert.Contains(t, ie.Reason, "invalid key "+strconv.Quote(tc.key), "the key, quoted")
					assert.Contains(t, ie.Reason, tc.why)
					assert.NotContains(t, ie.Reason, "would not read back")
				}
				assert.Equal(t, realConfig, readFile(t, p), "nothing written")
			})
		}
	}
}
