package docker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

// itemErr applies p on eng and returns the error of the item that failed.
func itemErr(t *testing.T, eng docker.Engine, p *docker.Project) error {
	t.Helper()
	g, err := p.Graph(eng)
	require.NoError(t, err)
	_, err = converge.Apply(context.Background(), g)
	require.Error(t, err)
	var ie *converge.ItemError
	require.ErrorAs(t, err, &ie)
	return ie.Err
}

// TestErrorMessagesReadOnce: typical failures read "docker: <object>: ..."
// with one prefix and the object named once.
func TestErrorMessagesReadOnceOnTheEngine(t *testing.T) {
	cli, img := realEngine(t)
	ctx := context.Background()
	proj := uniqueName("cvmsg")
	cleanupProject(t, cli, proj)
	compose := func(services string) *docker.Project {
		t.Helper()
		p, err := docker.LoadCompose(ctx, []byte("name: "+proj+"\nservices:\n"+services), docker.LoadOptions{})
		require.NoError(t, err)
		return p
	}
	label := "    labels: {" + dockertest.TestLabel + ": \"1\"}\n"
	unreachable := "127.0.0.1:1/" + proj + "-missing:1"
	tests := []struct {
		name string
		err  func() error
		is   error
		obj  string
	}{
		{"invalid go spec", func() error {
			_, err := (&docker.Project{Name: proj, Containers: []docker.ContainerSpec{
				{Service: "web", Image: img, Ports: []docker.Port{{HostPort: "70000", ContainerPort: 80}}}}}).Graph(cli)
			return err
		}, docker.ErrInvalidSpec, "web"},
		{"invalid compose value", func() error {
			_, err := docker.LoadCompose(ctx, []byte("name: p\nservices:\n  web:\n    image: i\n    restart: sometimes\n"), docker.LoadOptions{})
			return err
		}, docker.ErrInvalidSpec, "web"},
		{"invalid compose file", func() error {
			_, err := docker.LoadCompose(ctx, []byte("name: p\nservices:\n  web:\n    command: [x]\n"), docker.LoadOptions{})
			return err
		}, docker.ErrInvalidCompose, "web"},
		{"pull error", func() error {
			return itemErr(t, cli, compose("  web:\n    image: "+unreachable+"\n"+label))
		}, nil, unreachable},
		{"pull error inside a kill-then-download container", func() error {
			return itemErr(t, cli, compose("  web:\n    image: "+unreachable+"\n    x-update: kill-then-download\n"+label))
		}, nil, unreachable},
		{"missing image", func() error {
			return itemErr(t, cli, compose("  web:\n    image: "+proj+"-absent:1\n    pull_policy: never\n"+label))
		}, docker.ErrImageMissing, proj + "-absent:1"},
		{"container exits right after its start", func() error {
			return itemErr(t, cli, compose("  a:\n    image: "+img+"\n    command: [/app, exit, \"3\"]\n"+label+
				"  b:\n    image: "+img+"\n    command: [/app, sleep]\n"+label+
				"    depends_on: {a: {condition: service_completed_successfully}}\n"))
		}, docker.ErrContainerFailed, proj + "-a"},
		{"create refused by the engine", func() error {
			return itemErr(t, cli, compose("  c:\n    image: "+img+"\n    volumes: [/nonexistent-"+proj+":/data]\n"+label))
		}, nil, proj + "-c"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err()
			require.Error(t, err)
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			}
			msg := err.Error()
			t.Log(msg)
			assert.True(t, strings.HasPrefix(msg, "docker: "), "starts with the package prefix")
			assert.Equal(t, 1, strings.Count(msg, "docker:"), "one prefix")
			assert.Equal(t, 1, strings.Count(msg, tt.obj), "the object named once")
			for _, step := range []string{"create", "start", "stop", "remove", "pull", "image"} {
				assert.NotContains(t, msg, step+": "+step+":", "no repeated step")
			}
			assert.False(t, errors.Is(err, context.Canceled))
		})
	}
}
