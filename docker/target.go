package docker

import (
	"context"

	"github.com/convergekit/converge"
)

// TargetBuild returns a converge.TargetBuildFunc that turns a Project into
// one stage named "docker:<project>", so a converge.TargetReconciler keeps
// the project converged: set the project as its target and feed
// WatchEvents into its Trigger to repair drift within a pass.
func TargetBuild(eng Engine) converge.TargetBuildFunc[Project] {
	return func(_ context.Context, p Project) ([]converge.TargetStage, error) {
		g, err := p.Graph(eng)
		if err != nil {
			return nil, err
		}
		return []converge.TargetStage{{Name: "docker:" + p.Name, Graph: g}}, nil
	}
}
