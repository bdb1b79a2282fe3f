package docker_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

func TestMovedTagRecreatesTheContainersOnTheOldImage(t *testing.T) {
	for _, update := range []docker.UpdateStrategy{docker.DownloadThenKill, docker.KillThenDownload} {
		t.Run(update.String(), func(t *testing.T) {
			f := newFake()
			p := &docker.Project{Name: "mv", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Update: update}}}
			apply(t, f, p)
			before, _ := f.Container("mv-a")

			moved := f.AddImage("app:1") // docker tag <other image> app:1
			assert.Contains(t, docker.Plans(dry(t, f, p)), docker.Plan{Container: "mv-a", Action: docker.ActionRecreate, Fields: []string{"image-id"}})
			rep := apply(t, f, p)
			assert.Equal(t, []converge.ID{docker.ContainerID("mv", "a")}, rep.IDs(converge.OutcomeChanged))
			after, _ := f.Container("mv-a")
			assert.NotEqual(t, before.ID, after.ID)
			assert.Equal(t, moved, after.ImageID)
			assert.Zero(t, f.Calls()[dockertest.ImagePull], "the image is local: nothing to pull")

			f.ResetCalls()
			rep = apply(t, f, p)
			assert.Empty(t, rep.IDs(converge.OutcomeChanged))
			assert.Zero(t, f.WriteCalls())
		})
	}
}

func TestPullAlwaysPullsWhatTheRegistryMoved(t *testing.T) {
	for _, update := range []docker.UpdateStrategy{docker.DownloadThenKill, docker.KillThenDownload} {
		t.Run(update.String(), func(t *testing.T) {
			f := newFake()
			f.Pullable("reg.example/app:stable", 100)
			p := &docker.Project{Name: "pa", Containers: []docker.ContainerSpec{
				{Service: "a", Image: "reg.example/app:stable", Pull: docker.PullAlways, Update: update},
				{Service: "b", Image: "reg.example/app:stable", Update: update}, // the image is asked about for a
				{Service: "c", Image: "app:1"},
			}}
			apply(t, f, p)
			a1, _ := f.Container("pa-a")

			// Converged: one registry question per image, whatever the
			// number of containers using it, and nothing pulled.
			f.ResetCalls()
			rep := apply(t, f, p)
			assert.Empty(t, rep.IDs(converge.OutcomeChanged))
			assert.Zero(t, f.WriteCalls(), "calls: %v", f.Calls())
			assert.Equal(t, 1, f.Calls()[dockertest.DistributionInspect])
			assert.LessOrEqual(t, f.TotalCalls(), 3, "calls: %v", f.Calls())

			// A new version is pushed under the same tag: the dry run
			// plans the recreate, Apply pulls it and recreates both
			// containers on it.
			f.Pullable("reg.example/app:stable", 200)
			f.ResetCalls()
			plans := docker.Plans(dry(t, f, p))
			assert.Zero(t, f.WriteCalls())
			assert.Contains(t, plans, docker.Plan{Container: "pa-a", Action: docker.ActionRecreate, Fields: []string{"image-id"}})
			assert.Contains(t, plans, docker.Plan{Container: "pa-c", Action: docker.ActionNone})
			rep = apply(t, f, p)
			changed := rep.IDs(converge.OutcomeChanged)
			assert.Subset(t, changed, []converge.ID{docker.ContainerID("pa", "a"), docker.ContainerID("pa", "b")})
			assert.NotContains(t, changed, docker.ContainerID("pa", "c"))
			a2, _ := f.Container("pa-a")
			b2, _ := f.Container("pa-b")
			assert.NotEqual(t, a1.ImageID, a2.ImageID)
			assert.Equal(t, a2.ImageID, b2.ImageID)
			assert.LessOrEqual(t, f.Calls()[dockertest.ImagePull], 2, "calls: %v", f.Calls())

			f.ResetCalls()
			rep = apply(t, f, p)
			assert.Empty(t, rep.IDs(converge.OutcomeChanged))
			assert.Zero(t, f.Calls()[dockertest.ImagePull])
		})
	}
}

func TestPullAlwaysKeepsTheLocalImageWhenTheRegistryIsUnreachable(t *testing.T) {
	f := newFake() // app:1 is local and no registry serves it
	p := &docker.Project{Name: "off", Containers: []docker.ContainerSpec{{Service: "a", Image: "app:1", Pull: docker.PullAlways}}}
	rep := apply(t, f, p)
	assert.Equal(t, []converge.ID{docker.ContainerID("off", "a")}, rep.IDs(converge.OutcomeChanged))
	f.ResetCalls()
	rep = apply(t, f, p)
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.Equal(t, 1, f.Calls()[dockertest.DistributionInspect], "the registry was asked")
	assert.Zero(t, f.WriteCalls())
}

func TestComposePullPolicyAlways(t *testing.T) {
	p := load(t, `
name: pa
services:
  a:
    image: app:1
    pull_policy: always
`)
	require.Len(t, p.Containers, 1)
	assert.Equal(t, docker.PullAlways, p.Containers[0].Pull)
	assert.Empty(t, p.Unsupported)
}
