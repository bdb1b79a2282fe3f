package hostcfg

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/require"
)

// BenchmarkHostcfgNoop1k measures one full converge.Apply over 1,000 File
// items (in 10 directories) that are already converged.
func BenchmarkHostcfgNoop1k(b *testing.B) {
	r, dir, _ := newRoot(b)
	g := converge.NewGraph()
	for i := range 1000 {
		p := fmt.Sprintf("/srv/d%d/f%03d.conf", i%10, i)
		content := fmt.Sprintf("file %d\n", i)
		writeFile(b, filepath.Join(dir, p), content)
		g.Add((&File{Root: r, Path: p, Content: []byte(content), Mode: 0o644}).Node(), converge.Present)
	}
	ctx := context.Background()
	rep, err := converge.Apply(ctx, g)
	require.NoError(b, err)
	require.Equal(b, 1000, rep.Count(converge.OutcomeUnchanged))
	b.ReportAllocs()
	for b.Loop() {
		rep, err := converge.Apply(ctx, g)
		if err != nil || rep.Count(converge.OutcomeUnchanged) != 1000 {
			b.Fatalf("not a no-op: %v", err)
		}
	}
}

// BenchmarkConfigTxtNoop200 measures one full converge.Apply over 200
// ConfigKey items of one config.txt that are already converged. The items
// share one read of the file (it is not read again while its stat shows
// no change).
func BenchmarkConfigTxtNoop200(b *testing.B) {
	r, dir, _ := newRoot(b)
	var sb strings.Builder
	sb.WriteString(realConfig)
	cf := NewConfigFile(r, "/boot/firmware/config.txt")
	g := converge.NewGraph()
	for i := range 200 {
		section := []string{"", "pi4", "cm4", "all"}[i%4]
		if i%4 == 1 || i%4 == 2 {
			fmt.Fprintf(&sb, "[%s]\n", section)
		} else {
			sb.WriteString("[all]\n")
		}
		fmt.Fprintf(&sb, "# setting %d\nkey_%03d=%d\n", i, i, i)
		g.Add(cf.Key(section, fmt.Sprintf("key_%03d", i), fmt.Sprint(i)).Node(), converge.Present)
	}
	require.NoError(b, os.MkdirAll(filepath.Join(dir, "boot/firmware"), 0o755))
	writeFile(b, filepath.Join(dir, "boot/firmware/config.txt"), sb.String())
	// On a device config.txt last changed long ago; wait until the file is
	// older than the window in which its timestamps are not trusted, so
	// that the walks below see the steady state.
	time.Sleep(racyWindow + 100*time.Millisecond)
	ctx := context.Background()
	rep, err := converge.Apply(ctx, g)
	require.NoError(b, err)
	require.Equal(b, 200, rep.Count(converge.OutcomeUnchanged))
	b.ReportAllocs()
	for b.Loop() {
		rep, err := converge.Apply(ctx, g)
		if err != nil || rep.Count(converge.OutcomeUnchanged) != 200 {
			b.Fatalf("not a no-op: %v", err)
		}
	}
}
