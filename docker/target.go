package docker

import (
	"context"
	"log/slog"
	"slices"

	"github.com/convergekit/converge"
)

// Runtime holds what a program gives a Project at run time and never
// stores with it: the engine-call metrics, the change log and the key of
// the label hashes. A Project decoded from a stored target has none of
// them (their fields are not part of its JSON), so a program gives them
// once, to TargetBuild, instead of setting them again in every build. The
// zero value gives nothing: no metrics, no log, and the hash key derived
// from the project name (see Project.HashKey).
type Runtime struct {
	// Metrics is Project.Metrics for every project that has none.
	Metrics converge.Metrics
	// Logger is Project.Logger for every project that has none.
	Logger *slog.Logger
	// HashKey is Project.HashKey for every project that has none; keep it
	// apart from the target, as LoadHashKey does.
	HashKey []byte
	// PullRecords is Project.PullRecords for every project that has none.
	PullRecords converge.Store
}

// Apply gives p the runtime dependencies it lacks: each field of rt that
// is set fills the Project field of the same name when that one is unset.
// A field the project sets itself (a HashKey given to the Compose loader,
// say) is kept.
func (rt Runtime) Apply(p *Project) {
	if p.Metrics == nil {
		p.Metrics = rt.Metrics
	}
	if p.Logger == nil {
		p.Logger = rt.Logger
	}
	if len(p.HashKey) == 0 && len(rt.HashKey) > 0 {
		p.HashKey = slices.Clone(rt.HashKey)
	}
	if p.PullRecords == nil {
		p.PullRecords = rt.PullRecords
	}
}

// merge returns rt with the fields set in o replacing its own.
func (rt Runtime) merge(o Runtime) Runtime {
	if o.Metrics != nil {
		rt.Metrics = o.Metrics
	}
	if o.Logger != nil {
		rt.Logger = o.Logger
	}
	if len(o.HashKey) > 0 {
		rt.HashKey = slices.Clone(o.HashKey)
	}
	if o.PullRecords != nil {
		rt.PullRecords = o.PullRecords
	}
	return rt
}

// TargetBuild returns a converge.TargetBuildFunc that turns a Project into
// one stage named "docker:<project>", so a converge.TargetReconciler keeps
// the project converged: set the project as its target and feed
// WatchEvents into its Trigger to repair drift within a pass.
//
// The runtime dependencies rt (usually one Runtime; the fields set in a
// later one replace those of an earlier one) are applied to every project
// it builds (Runtime.Apply), the stored targets a restarted program
// resumes included:
//
//	key, err := docker.LoadHashKey(ctx, store, "shop")
//	build := docker.TargetBuild(eng, docker.Runtime{Metrics: m, Logger: log, HashKey: key})
//
// The function is a converge.TargetBuildFunc[Project], so it composes with
// the build functions of other parts of a program's target.
func TargetBuild(eng Engine, rt ...Runtime) converge.TargetBuildFunc[Project] {
	var all Runtime
	for _, r := range rt {
		all = all.merge(r)
	}
	return func(_ context.Context, p Project) ([]converge.TargetStage, error) {
		all.Apply(&p)
		g, err := p.Graph(eng)
		if err != nil {
			return nil, err
		}
		return []converge.TargetStage{{Name: "docker:" + p.Name, Graph: g}}, nil
	}
}
