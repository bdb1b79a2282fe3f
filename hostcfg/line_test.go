package hostcfg

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLine(t *testing.T) {
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "etc/hosts")
	writeFile(t, p, "127.0.0.1 localhost\n127.0.1.1 raspberrypi\n10.0.0.9 db\n10.0.0.9 db\n")

	// Replace rewrites the matching line in place.
	mustApply(t, graph((&Line{Root: r, Path: "/etc/hosts", Line: "127.0.1.1 edge-01", Replace: regexp.MustCompile(`^127\.0\.1\.1\s`)}).Node()))
	assert.Equal(t, "127.0.0.1 localhost\n127.0.1.1 edge-01\n10.0.0.9 db\n10.0.0.9 db\n", readFile(t, p))
	// Absent removes every copy.
	g := converge.NewGraph()
	g.Add((&Line{Root: r, Path: "/etc/hosts", Line: "10.0.0.9 db"}).Node(), converge.Absent)
	mustApply(t, g)
	assert.Equal(t, "127.0.0.1 localhost\n127.0.1.1 edge-01\n", readFile(t, p))
	// A missing file is created with the line; a file without a final
	// newline gets one.
	mustApply(t, graph((&Line{Root: r, Path: "/etc/new", Line: "x", Mode: 0o600}).Node()))
	assert.Equal(t, "x\n", readFile(t, filepath.Join(dir, "etc/new")))
	writeFile(t, filepath.Join(dir, "etc/nonl"), "a")
	mustApply(t, graph((&Line{Root: r, Path: "/etc/nonl", Line: "b"}).Node()))
	assert.Equal(t, "a\nb\n", readFile(t, filepath.Join(dir, "etc/nonl")))
	// Absent on a missing file creates nothing.
	g = converge.NewGraph()
	g.Add((&Line{Root: r, Path: "/etc/none", Line: "x"}).Node(), converge.Absent)
	mustApply(t, g)
	assert.NoFileExists(t, filepath.Join(dir, "etc/none"))
	// A line with a terminator is invalid.
	_, err := converge.Apply(context.Background(), graph((&Line{Root: r, Path: "/etc/x", Line: "a\nb"}).Node()))
	require.ErrorIs(t, err, ErrInvalidItem)
}
