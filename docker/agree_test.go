package docker_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// TestFailureAndReportAgree: the state a report shows for a container
// that failed, and the state its error describes, come from one read of
// the engine, so they say the same: a container that turned unhealthy
// right after its start is unhealthy in both; a dependency that turned
// unhealthy while its dependent waited is named unhealthy in the error's
// message and in its Status and Health, and the message says it was
// starting before (as the report's state of the dependency, read when its
// item finished, shows it).
func TestFailureAndReportAgree(t *testing.T) {
	health := &docker.Healthcheck{Test: []string{"CMD", "true"}}
	t.Run("container", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake()
			f.OnStart = func(c *dockertest.Container) (container.ContainerState, int) {
				c.Health = container.Unhealthy
				return "running", 0
			}
			p := &docker.Project{Name: "agree", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Healthcheck: health}}}
			g, err := p.Graph(f)
			require.NoError(t, err)
			rep, err := converge.Apply(t.Context(), g)
			var ce *docker.ContainerError
			require.ErrorAs(t, err, &ce)
			assert.Contains(t, ce.Error(), "turned unhealthy")
			r, ok := rep.Item(docker.ContainerID("agree", "a"))
			require.True(t, ok)
			_, after, ok := converge.ResultStates[docker.ContainerState](r)
			require.True(t, ok)
			assert.Equal(t, ce.Health, after.Health, "the report's After and the error agree")
			assert.Equal(t, ce.Status, after.Status)
			assert.True(t, after.Exists)
		})
	})
	t.Run("dependency", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			f := newFake()
			f.OnStart = func(c *dockertest.Container) (container.ContainerState, int) {
				if c.Name == "agree-a" {
					c.Health = container.Starting
				}
				return "running", 0
			}
			p := &docker.Project{Name: "agree", Containers: []docker.ContainerSpec{
				{Service: "a", Image: "app:1", Healthcheck: health},
				{Service: "b", Image: "app:1", DependsOn: []docker.Dependency{{Service: "a", Condition: docker.ServiceHealthy, Timeout: time.Minute}}},
			}}
			g, err := p.Graph(f)
			require.NoError(t, err)
			go func() {
				time.Sleep(2 * time.Second) // virtual time: a turns unhealthy while b waits
				f.SetHealth("agree-a", container.Unhealthy)
			}()
			rep, err := converge.Apply(t.Context(), g)
			r, ok := rep.Item(docker.ContainerID("agree", "a"))
			require.True(t, ok)
			_, after, ok := converge.ResultStates[docker.ContainerState](r)
			require.True(t, ok)
			require.Equal(t, string(container.Starting), after.Health, "the report read a when its item finished")
			var de *docker.DependencyError
			require.ErrorAs(t, err, &de)
			assert.Equal(t, string(container.Unhealthy), de.Health)
			assert.Equal(t, "running", de.Status)
			assert.Contains(t, de.Error(), "it turned unhealthy during the wait (it was starting)",
				"the message says the dependency changed since the walk read it starting")
		})
	})
}
