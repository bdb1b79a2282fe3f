package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/docker/docker/api/types"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"
)

// Hook is a command run inside a container through the engine's exec API
// (Compose post_start and pre_stop).
type Hook struct {
	// Command is the argv to run; required.
	Command []string `json:"command,omitempty"`
	// User runs it as this user; "" is the container's.
	User string `json:"user,omitzero"`
	// Privileged runs it with extended privileges.
	Privileged bool `json:"privileged,omitzero"`
	// WorkingDir is its working directory; "" is the container's.
	WorkingDir string `json:"working_dir,omitzero"`
	// Env adds variables to the container's for the hook.
	Env map[string]string `json:"environment,omitempty"`
}

// ContainerExecer is the ability to run a command in a running container,
// which *client.Client has. The Engine of a project whose containers have
// hooks must have it; an engine without it fails them with ErrCannotExec.
type ContainerExecer interface {
	ContainerExecCreate(ctx context.Context, container string, options container.ExecOptions) (container.ExecCreateResponse, error)
	ContainerExecAttach(ctx context.Context, execID string, config container.ExecAttachOptions) (types.HijackedResponse, error)
	ContainerExecInspect(ctx context.Context, execID string) (container.ExecInspect, error)
}

// ErrCannotExec means a container has hooks but the Engine has no exec
// methods (see ContainerExecer).
var ErrCannotExec = errors.New("the engine cannot run commands in containers")

// ErrHookFailed is matched by the *HookError of a hook that exited with a
// status other than 0.
var ErrHookFailed = errors.New("hook failed")

// HookError is a lifecycle hook that failed: it exited with ExitCode, and
// Output holds the last lines it printed (secrets of the spec redacted).
// It matches ErrHookFailed.
type HookError struct {
	Container string
	// Hook names it: "post_start[0]", "pre_stop[1]".
	Hook     string
	ExitCode int
	Output   string
}

// Error describes the problem, naming its culprit.
func (e *HookError) Error() string {
	return withLog(fmt.Sprintf("docker: container %s: %s hook exited with status %d", e.Container, e.Hook, e.ExitCode), e.Output)
}

// Is makes HookError match ErrHookFailed.
func (e *HookError) Is(target error) bool { return target == ErrHookFailed }

// runHooks runs hooks (named kind: "post_start", "pre_stop") one after the
// other in the running container name, stopping at the first that fails.
func (c *Container) runHooks(ctx context.Context, name, kind string, hooks []Hook) error {
	if len(hooks) == 0 {
		return nil
	}
	ex, ok := c.eng.(ContainerExecer)
	if !ok {
		return ErrCannotExec
	}
	for i, h := range hooks {
		hook := fmt.Sprintf("%s[%d]", kind, i)
		env := make([]string, 0, len(h.Env))
		for _, k := range slices.Sorted(maps.Keys(h.Env)) {
			env = append(env, k+"="+h.Env[k])
		}
		created, err := ex.ContainerExecCreate(ctx, name, container.ExecOptions{Cmd: h.Command, User: h.User, Privileged: h.Privileged,
			WorkingDir: h.WorkingDir, Env: env, AttachStdout: true, AttachStderr: true})
		if err != nil {
			return fmt.Errorf("%s hook: %w", hook, err)
		}
		att, err := ex.ContainerExecAttach(ctx, created.ID, container.ExecAttachOptions{})
		if err != nil {
			return fmt.Errorf("%s hook: %w", hook, err)
		}
		var out bytes.Buffer
		_, err = stdcopy.StdCopy(&out, &out, io.LimitReader(att.Reader, 1<<20))
		att.Close()
		if err != nil {
			return fmt.Errorf("%s hook: output: %w", hook, err)
		}
		st, err := ex.ContainerExecInspect(ctx, created.ID)
		if err != nil {
			return fmt.Errorf("%s hook: %w", hook, err)
		}
		if st.ExitCode != 0 {
			return &HookError{Container: c.name, Hook: hook, ExitCode: st.ExitCode, Output: tail(out.String())}
		}
	}
	return nil
}

// preStop runs the spec's pre_stop hooks in the current container when it
// is running, before it is stopped or removed.
func (c *Container) preStop(ctx context.Context, current ContainerState) error {
	if len(c.spec.PreStop) == 0 || !current.Exists || current.Status != string(container.StateRunning) {
		return nil
	}
	id := current.ID
	if id == "" {
		id = c.name
	}
	return c.runHooks(ctx, id, "pre_stop", c.spec.PreStop)
}
