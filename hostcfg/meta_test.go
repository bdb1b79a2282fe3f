package hostcfg

import (
	"context"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/require"
)

func TestOwnerNeedsRoot(t *testing.T) {
	r, _, _ := newRoot(t)
	saved := geteuid
	geteuid = func() int { return 1000 }
	t.Cleanup(func() { geteuid = saved })
	for _, n := range []converge.Node{
		(&File{Root: r, Path: "/x", Owner: &Ownership{UID: 0, GID: 0}}).Node(),
		(&Dir{Root: r, Path: "/d", Owner: &Ownership{UID: 0, GID: 0}}).Node(),
	} {
		for _, walk := range []func(context.Context, *converge.Graph) (*converge.Report, error){converge.Apply, converge.ApplyDry} {
			_, err := walk(context.Background(), graph(n))
			require.ErrorIs(t, err, ErrNeedRoot, n.ID())
		}
	}
}
