package docker

import (
	"log/slog"
	"strings"
)

// The states and events of the package log as named attributes (a
// slog.LogValuer each), never as a Go struct: slog.Any("after", state)
// reads "after.name=shop-web after.status=running after.health=healthy"
// in a text log, and an object in a JSON one.

// LogValue returns the container's name, whether it exists, its status,
// health, image and the fields found changed behind our back, as they
// apply.
func (s ContainerState) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("name", s.Name), slog.Bool("exists", s.Exists)}
	if s.Status != "" {
		attrs = append(attrs, slog.String("status", s.Status))
	}
	if s.Paused {
		attrs = append(attrs, slog.Bool("paused", true))
	}
	if s.ExitCode != 0 {
		attrs = append(attrs, slog.Int("exit_code", s.ExitCode))
	}
	if s.Health != "" {
		attrs = append(attrs, slog.String("health", s.Health))
	}
	if s.Image != "" {
		attrs = append(attrs, slog.String("image", s.Image))
	}
	if len(s.Drift) > 0 {
		attrs = append(attrs, slog.String("drift", strings.Join(s.Drift, ",")))
	}
	return slog.GroupValue(attrs...)
}

// LogValue returns the image's reference, whether it is present, and
// whether the registry serves a newer one.
func (s ImageState) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("ref", s.Ref), slog.Bool("present", s.Present)}
	if s.Outdated {
		attrs = append(attrs, slog.Bool("outdated", true))
	}
	return slog.GroupValue(attrs...)
}

// LogValue returns the network's name, whether it exists and whether we
// own it.
func (s NetworkState) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", s.Name), slog.Bool("exists", s.Exists), slog.Bool("owned", s.Owned))
}

// LogValue returns the volume's name, whether it exists and whether we own
// it.
func (s VolumeState) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", s.Name), slog.Bool("exists", s.Exists), slog.Bool("owned", s.Owned))
}

// LogValue returns the project's name and its containers' names.
func (s ProjectState) LogValue() slog.Value {
	return slog.GroupValue(slog.String("project", s.Project), slog.String("containers", strings.Join(s.Containers, ",")))
}

// LogValue returns the plan's words: "shop-web: recreate (image, env.MODE)".
func (p Plan) LogValue() slog.Value { return slog.StringValue(p.String()) }

// LogValue returns the event's action, container and service, as they
// apply.
func (e Event) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("action", e.Action)}
	if e.Container != "" {
		attrs = append(attrs, slog.String("container", e.Container), slog.String("service", e.Service))
	}
	return slog.GroupValue(attrs...)
}
