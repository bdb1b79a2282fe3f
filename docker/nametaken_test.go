package docker_test

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// missedByList is an engine whose container list misses the containers
// named in hide, as a list answered before a create another walk had sent
// was carried out misses that container.
type missedByList struct {
	*dockertest.Engine
	hide []string
}

func (e missedByList) ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error) {
	list, err := e.Engine.ContainerList(ctx, opts)
	return slices.DeleteFunc(list, func(c container.Summary) bool {
		return slices.Contains(e.hide, strings.TrimPrefix(c.Names[0], "/"))
	}), err
}

// TestNameTakenByTheProjectsOwnContainer: a create that meets, under its
// name, a container of the project that the walk's listing missed looks
// at it: with the target spec it is adopted (connected to the networks it
// misses, and started), with another spec it is replaced.
func TestNameTakenByTheProjectsOwnContainer(t *testing.T) {
	project := func(env string, run docker.RunMode) *docker.Project {
		return &docker.Project{Name: "nt", Networks: []docker.NetworkSpec{{Name: "n1"}, {Name: "n2"}},
			Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Env: map[string]string{"K": env}, Run: run,
				Networks: []docker.NetworkAttachment{{Name: "n1"}, {Name: "n2"}}}}}
	}
	t.Run("the target spec: adopted", func(t *testing.T) {
		f := newFake()
		apply(t, f, project("1", docker.Stopped)) // created, never started
		holder, ok := f.Container("nt-a")
		require.True(t, ok)
		f.Tamper("nt-a", func(c *dockertest.Container) { delete(c.Networks, "n2") }) // its create was cut short

		f.ResetCalls()
		rep := apply(t, missedByList{Engine: f, hide: []string{"nt-a"}}, project("1", docker.Running))
		require.True(t, rep.Converged())
		after, ok := f.Container("nt-a")
		require.True(t, ok)
		assert.Equal(t, holder.ID, after.ID, "adopted, not replaced")
		assert.Equal(t, container.StateRunning, after.Status)
		assert.ElementsMatch(t, []string{"n1", "n2"}, slices.Collect(maps.Keys(after.Networks)))
		assert.Len(t, f.Containers(), 1)
		assert.Zero(t, f.Calls()[dockertest.ContainerRemove])
	})
	t.Run("another spec: replaced", func(t *testing.T) {
		f := newFake()
		apply(t, f, project("1", docker.Running))
		holder, _ := f.Container("nt-a")

		rep := apply(t, missedByList{Engine: f, hide: []string{"nt-a"}}, project("2", docker.Running))
		require.True(t, rep.Converged())
		after, ok := f.Container("nt-a")
		require.True(t, ok)
		assert.NotEqual(t, holder.ID, after.ID)
		assert.Contains(t, after.Config.Env, "K=2")
		assert.Equal(t, container.StateRunning, after.Status)
		assert.Len(t, f.Containers(), 1)
	})
	t.Run("another project's container: refused, naming it", func(t *testing.T) {
		f := newFake()
		r, err := f.ContainerCreate(context.Background(), &container.Config{Image: "app:1", Labels: map[string]string{
			docker.LabelOwner: docker.OwnerValue, docker.LabelProject: "other"}}, nil, nil, nil, "nt-a")
		require.NoError(t, err)
		g := mustGraph(t, project("1", docker.Running), f)
		_, err = converge.Apply(context.Background(), g)
		require.ErrorIs(t, err, docker.ErrNotOwned)
		assert.Contains(t, err.Error(), "the name is taken by container "+r.ID)
		c, _ := f.Container("nt-a")
		assert.Equal(t, r.ID, c.ID, "left alone")
		assert.Equal(t, container.StateCreated, c.Status)
	})
}
