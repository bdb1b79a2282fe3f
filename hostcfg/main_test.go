package hostcfg

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package's tests when any test leaves a goroutine behind.
func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild()
		return
	}
	goleak.VerifyTestMain(m)
}

// newRoot returns a Root over a fresh temporary directory and the path of
// a sibling directory "outside" the root (for escape tests).
func newRoot(t testing.TB) (*Root, string, string) {
	t.Helper()
	base := t.TempDir()
	dir := filepath.Join(base, "root")
	outside := filepath.Join(base, "outside")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.MkdirAll(outside, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("outside\n"), 0o644))
	r, err := OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { r.Close() })
	return r, dir, outside
}

// snapshot records every file under dir: type, mode, content or link target.
func snapshot(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "link " + target
		case fi.IsDir():
			out[rel] = "dir " + fi.Mode().String()
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = "file " + fi.Mode().String() + " " + string(b)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
}

func readFile(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

// graph builds a graph of the nodes, each depending on nothing.
func graph(nodes ...converge.Node) *converge.Graph {
	g := converge.NewGraph()
	for _, n := range nodes {
		g.Add(n, converge.Present)
	}
	return g
}

// mustApply runs converge.Apply and requires success.
func mustApply(t testing.TB, g *converge.Graph) *converge.Report {
	t.Helper()
	rep, err := converge.Apply(context.Background(), g)
	require.NoError(t, err)
	return rep
}
