package docker_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/internal/errtext"
)

// TestErrorMessagesReadOnce sweeps the package's sentinels and typed
// errors as the core module's sweep does: one "docker: " prefix, first,
// where an error stands on its own, none where a sentinel is made to be
// embedded after another error's text, and the right articles.
func TestErrorMessagesReadOnce(t *testing.T) {
	prefixes := []string{"docker: ", "converge: "}
	prefixed := []error{
		docker.ErrContainerFailed,
		&docker.UnsupportedError{Fields: []string{"links", "scale"}},
		&docker.ImageError{Ref: "app:1", Services: []string{"web"}, Err: docker.ErrImageMissing},
		&docker.PullError{Ref: "app:1", Err: errors.New("unauthorized")},
		&docker.SpecError{Object: "service web", Field: "ports[0]", Reason: "port 70000 is out of range"},
	}
	embedded := []error{
		docker.ErrCannotBuild, docker.ErrBuildFailed, docker.ErrBadHashKey, docker.ErrInvalidSpec,
		docker.ErrImageMissing, docker.ErrImageInUse, docker.ErrDependencyTimeout,
		docker.ErrDependencyFailed, docker.ErrNotOwned, docker.ErrInvalidCompose, docker.ErrUnsupported,
	}
	for _, err := range prefixed {
		assert.Empty(t, errtext.Problems("docker", err.Error(), prefixes), "%q", err.Error())
	}
	for _, err := range embedded {
		assert.Empty(t, errtext.Problems("", err.Error(), prefixes), "%q", err.Error())
	}
}
