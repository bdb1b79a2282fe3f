package docker_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge/docker"
)

func TestPlanFor(t *testing.T) {
	target := docker.ContainerState{Name: "c", Exists: true, SpecHash: "h1", Fields: map[string]string{"image": "a", "env.X": "1"},
		ImageID: "sha256:new", Networks: []string{"n"}}
	running := docker.ContainerState{Name: "c", Exists: true, Status: "running", SpecHash: "h1",
		Fields: map[string]string{"image": "a", "env.X": "1"}, ImageID: "sha256:new", Networks: []string{"n"}}
	with := func(f func(*docker.ContainerState)) docker.ContainerState {
		s := running
		s.Fields = map[string]string{"image": "a", "env.X": "1"}
		f(&s)
		return s
	}
	tgt := func(f func(*docker.ContainerState)) docker.ContainerState {
		s := target
		f(&s)
		return s
	}
	tests := []struct {
		name    string
		current docker.ContainerState
		target  docker.ContainerState
		want    docker.Plan
	}{
		{"converged", running, target, docker.Plan{Container: "c", Action: docker.ActionNone}},
		{"missing", docker.ContainerState{Name: "c"}, target, docker.Plan{Container: "c", Action: docker.ActionCreate}},
		{"env changed", with(func(s *docker.ContainerState) { s.SpecHash, s.Fields["env.X"] = "h0", "0" }), target,
			docker.Plan{Container: "c", Action: docker.ActionRecreate, Fields: []string{"env.X"}}},
		{"field dropped", with(func(s *docker.ContainerState) { s.SpecHash, s.Fields["label.l"] = "h0", "v" }), target,
			docker.Plan{Container: "c", Action: docker.ActionRecreate, Fields: []string{"label.l"}}},
		{"new image behind the tag", with(func(s *docker.ContainerState) { s.ImageID = "sha256:old" }), target,
			docker.Plan{Container: "c", Action: docker.ActionRecreate, Fields: []string{"image-id"}}},
		{"unknown target image id is not a change", running, tgt(func(s *docker.ContainerState) { s.ImageID = "" }),
			docker.Plan{Container: "c", Action: docker.ActionNone}},
		{"disconnected", with(func(s *docker.ContainerState) { s.Networks = nil }), target,
			docker.Plan{Container: "c", Action: docker.ActionRecreate, Fields: []string{"network.n"}}},
		{"extra network is not ours to judge", with(func(s *docker.ContainerState) { s.Networks = []string{"n", "other"} }), target,
			docker.Plan{Container: "c", Action: docker.ActionNone}},
		{"drift found by inspect", with(func(s *docker.ContainerState) { s.Drift = []string{"restart"} }), target,
			docker.Plan{Container: "c", Action: docker.ActionRecreate, Fields: []string{"restart"}}},
		{"exited", with(func(s *docker.ContainerState) { s.Status, s.ExitCode = "exited", 137 }), target,
			docker.Plan{Container: "c", Action: docker.ActionStart}},
		{"stopped wanted", running, tgt(func(s *docker.ContainerState) { s.Run = docker.Stopped }),
			docker.Plan{Container: "c", Action: docker.ActionStop}},
		{"stopped already", with(func(s *docker.ContainerState) { s.Status = "exited" }), tgt(func(s *docker.ContainerState) { s.Run = docker.Stopped }),
			docker.Plan{Container: "c", Action: docker.ActionNone}},
		{"once done", with(func(s *docker.ContainerState) { s.Status = "exited" }), tgt(func(s *docker.ContainerState) { s.Run = docker.Once }),
			docker.Plan{Container: "c", Action: docker.ActionNone}},
		{"once failed", with(func(s *docker.ContainerState) { s.Status, s.ExitCode = "exited", 1 }), tgt(func(s *docker.ContainerState) { s.Run = docker.Once }),
			docker.Plan{Container: "c", Action: docker.ActionStart}},
		{"once never started", with(func(s *docker.ContainerState) { s.Status = "created" }), tgt(func(s *docker.ContainerState) { s.Run = docker.Once }),
			docker.Plan{Container: "c", Action: docker.ActionStart}},
		{"remove", running, docker.ContainerState{Name: "c"}, docker.Plan{Container: "c", Action: docker.ActionRemove}},
		{"remove nothing", docker.ContainerState{Name: "c"}, docker.ContainerState{Name: "c"}, docker.Plan{Container: "c", Action: docker.ActionNone}},
		{"paused", with(func(s *docker.ContainerState) { s.Status, s.Paused = "paused", true }), target,
			docker.Plan{Container: "c", Action: docker.ActionUnpause}},
		{"paused once", with(func(s *docker.ContainerState) { s.Status, s.Paused = "paused", true }), tgt(func(s *docker.ContainerState) { s.Run = docker.Once }),
			docker.Plan{Container: "c", Action: docker.ActionUnpause}},
		{"paused but stopped wanted", with(func(s *docker.ContainerState) { s.Status, s.Paused = "paused", true }), tgt(func(s *docker.ContainerState) { s.Run = docker.Stopped }),
			docker.Plan{Container: "c", Action: docker.ActionStop}},
		{"leftover with the target spec", docker.ContainerState{Name: "c", Leftover: docker.Leftover{ID: "t", SpecHash: "h1"}}, target,
			docker.Plan{Container: "c", Action: docker.ActionAdopt}},
		{"leftover of another spec", docker.ContainerState{Name: "c", Leftover: docker.Leftover{ID: "t", SpecHash: "h0"}}, target,
			docker.Plan{Container: "c", Action: docker.ActionCreate}},
		{"leftover next to a converged container", with(func(s *docker.ContainerState) { s.Leftover = docker.Leftover{ID: "t", SpecHash: "h0"} }), target,
			docker.Plan{Container: docker.TempName("c"), Action: docker.ActionRemove}},
		{"leftover when removing", docker.ContainerState{Name: "c", Leftover: docker.Leftover{ID: "t"}}, docker.ContainerState{Name: "c"},
			docker.Plan{Container: "c", Action: docker.ActionRemove}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, docker.PlanFor(tt.current, tt.target))
		})
	}
}

func TestEnumsAndSecrets(t *testing.T) {
	for _, c := range []docker.Condition{docker.ServiceStarted, docker.ServiceHealthy, docker.ServiceCompletedSuccessfully} {
		got, err := docker.ParseCondition(c.String())
		assert.NoError(t, err)
		assert.Equal(t, c, got)
	}
	got, err := docker.ParseCondition("")
	assert.NoError(t, err)
	assert.Equal(t, docker.ServiceStarted, got)
	_, err = docker.ParseCondition("service_sleepy")
	assert.Error(t, err)
	assert.Equal(t, []string{"running", "stopped", "once"}, []string{docker.Running.String(), docker.Stopped.String(), docker.Once.String()})
	assert.Equal(t, "kill-then-download", docker.KillThenDownload.String())
	assert.Equal(t, "download-then-kill", docker.DownloadThenKill.String())

	for key, want := range map[string]bool{"DB_PASSWORD": true, "github_token": true, "API_KEY": true, "AWS_SECRET_ACCESS_KEY": true, "MODE": false, "PORT": false} {
		assert.Equal(t, want, docker.IsSecretEnv(key, nil), key)
	}
	assert.True(t, docker.IsSecretEnv("PIN", []string{"PIN"}))
}
