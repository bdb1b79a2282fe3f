package hostcfg

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFileSensitiveDiffHidesContent(t *testing.T) {
	r, dir, _ := newRoot(t)
	tests := []struct {
		name     string
		existing *string
		want     string
		present  bool
	}{
		{name: "create", present: true, want: "content of /etc/token changes (sensitive, not shown): absent -> 12 bytes\n"},
		{name: "change", existing: ptr("old-token\n"), present: true, want: "content of /etc/token changes (sensitive, not shown): 10 bytes -> 12 bytes\n"},
		{name: "remove", existing: ptr("old-token\n"), want: "content of /etc/token changes (sensitive, not shown): 10 bytes -> absent\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, "etc/token")
			_ = os.Remove(p)
			if tt.existing != nil {
				require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
				require.NoError(t, os.WriteFile(p, []byte(*tt.existing), 0o600))
			}
			f := &File{Root: r, Path: "/etc/token", Content: []byte("TOKEN=s3cr3t"), Mode: 0o600, Sensitive: true}
			presence := converge.Absent
			if tt.present {
				presence = converge.Present
			}
			g := converge.NewGraph()
			g.Add(f.Node(), presence)
			rep, err := converge.ApplyDry(t.Context(), g)
			require.NoError(t, err)
			diffs := Diffs(rep)
			require.Len(t, diffs, 1)
			assert.Equal(t, tt.want, diffs[0].Diff)
			assert.NotContains(t, diffs[0].Diff, "s3cr3t")
			assert.NotContains(t, diffs[0].Diff, "old-token")
		})
	}
}

func ptr(s string) *string { return &s }
