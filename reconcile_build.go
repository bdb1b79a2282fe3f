package converge

import "context"

// JoinBuilds returns the TargetBuildFunc that calls builds in order, each
// with the same target, and walks their stages one after the other: the
// stages of builds[0] first (host configuration, say), then those of
// builds[1] (the applications), and so on. It is how the builds of several
// adapters, each over its part of one target type (see BuildPart), become
// the Build of one TargetReconciler. The first build that fails fails the
// pass with its error, unchanged; the stages of the builds before it are
// not walked. Give the stages distinct names: events and errors name a
// stage by its name only.
//
// JoinBuilds panics when a build is nil, as a programmer's mistake.
func JoinBuilds[T any](builds ...TargetBuildFunc[T]) TargetBuildFunc[T] {
	for _, b := range builds {
		if b == nil {
			panic("converge: JoinBuilds: nil build")
		}
	}
	return func(ctx context.Context, target T) ([]TargetStage, error) {
		var out []TargetStage
		for _, b := range builds {
			stages, err := b(ctx, target)
			if err != nil {
				return nil, err
			}
			out = append(out, stages...)
		}
		return out, nil
	}
}

// BuildPart adapts build, the TargetBuildFunc of a part U of a target T
// (an adapter's own target type, such as a Compose project), to T: part
// picks the U out of the target at the start of every pass. Together with
// JoinBuilds it lets one target type hold what several adapters converge:
//
//	Build: converge.JoinBuilds(
//		converge.BuildPart(func(d Device) []converge.Node { return d.HostItems() }, hostBuild),
//		converge.BuildPart(func(d Device) docker.Target { return d.Apps }, appsBuild),
//	)
//
// BuildPart panics when part or build is nil, as a programmer's mistake.
func BuildPart[T, U any](part func(T) U, build TargetBuildFunc[U]) TargetBuildFunc[T] {
	if part == nil || build == nil {
		panic("converge: BuildPart: nil part or build")
	}
	return func(ctx context.Context, target T) ([]TargetStage, error) {
		return build(ctx, part(target))
	}
}
