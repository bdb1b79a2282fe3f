package docker

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/docker/docker/api/types/container"
)

// ContainerState is what the engine says about one container, reduced to
// what the package compares. It never holds environment values: fields are
// compared through short hashes (see LabelSpecFields), so secrets cannot
// reach reports, logs or events through it.
type ContainerState struct {
	// Name is the engine container name.
	Name   string
	Exists bool
	ID     string
	// Status is the engine state: created, running, paused, restarting,
	// exited or dead ("" when the container does not exist).
	Status string
	// ExitCode is the exit code of an exited container.
	ExitCode int
	// Paused is true when the container is paused (Status "paused"); a
	// paused container that should run is unpaused.
	Paused bool
	// Health is "", "starting", "healthy" or "unhealthy".
	Health  string
	Image   string
	ImageID string
	// SpecHash and Fields come from our labels on the container (or, for a
	// target, from the spec).
	SpecHash string
	Fields   map[string]string
	// Networks are the networks the container is attached to, sorted.
	Networks []string
	// Drift lists user-specified fields found changed behind our back when
	// the container was inspected.
	Drift []string
	// Run is the wanted run mode (targets only).
	Run RunMode
	// Leftover is the container a recreate interrupted half-way left under
	// the temporary name (see TempName); the zero value means none.
	Leftover Leftover
	// UpdateLock is the path of the container's update lock file
	// (LabelUpdateLock; ContainerSpec.UpdateLock for a target); "" when it
	// takes none.
	UpdateLock string

	snap *snapshot // the walk's snapshot this state was read from
	// update is, for a target, the strategy of its update (AutoUpdate
	// resolved).
	update UpdateStrategy
	// brought is, for a container, its LabelImageBrought; for a target,
	// that its image item pulled or built the image in this walk.
	brought bool
	// staleImage is, for a target, the ID of a local image the registry
	// no longer serves under the tag (PullAlways): a container on it is
	// recreated on the newer one.
	staleImage string
	// netNS is the engine's network mode of a container ("container:<ID>"
	// when it shares another's namespace); for a target, the mode a
	// NetworkMode of service:NAME needs now, or "" to compare nothing.
	netNS string
	// staleNetNS is, for a target whose NetworkMode is service:NAME when
	// this walk (re)created NAME, the mode naming NAME's old container,
	// whose namespace is gone.
	staleNetNS string
	// composeHash is compose's configuration hash of the container
	// (LabelComposeConfigHash; ContainerSpec.ComposeHash for a target).
	composeHash string
}

// Leftover is an owned container found under the temporary name of a
// recreate ("<name>_converge_tmp"): the run that created it was stopped
// before renaming it. Apply adopts it when it has the target spec
// (ActionAdopt, or a recreate that reuses it) and removes it otherwise.
type Leftover struct {
	ID       string
	SpecHash string
}

// TempName is the name a recreate creates the new container under before
// renaming it to name.
func TempName(name string) string { return name + "_converge_tmp" }

// Action is what a container needs.
type Action string

// The planned actions for a container.
const (
	ActionNone     Action = "none"
	ActionCreate   Action = "create"
	ActionRecreate Action = "recreate"
	ActionStart    Action = "start"
	ActionStop     Action = "stop"
	ActionRemove   Action = "remove"
	// ActionUnpause unpauses a paused container that should run.
	ActionUnpause Action = "unpause"
	// ActionAdopt finishes a recreate that was interrupted after the new
	// container was created under its temporary name: the leftover already
	// has the target spec, so it is renamed and started.
	ActionAdopt Action = "adopt"
	// ActionRename adopts, without recreating it, a container "docker
	// compose up" started under another name than the package gives it
	// (see ContainerSpec.ComposeHash): it is renamed, and started when it
	// should run and does not.
	ActionRename Action = "rename"
)

// Plan is the action a container needs to go from a current to a target
// state; for a recreate, Fields lists what differs (for example "image",
// "env.DB_URL", "networks", "state").
type Plan struct {
	Container string
	Action    Action
	Fields    []string
}

// String formats the plan as "name: action (fields)".
func (p Plan) String() string {
	if len(p.Fields) == 0 {
		return fmt.Sprintf("%s: %s", p.Container, p.Action)
	}
	return fmt.Sprintf("%s: %s (%s)", p.Container, p.Action, strings.Join(p.Fields, ", "))
}

// PlanFor decides the action that takes current to target. Apply and
// ApplyDry both follow it, so a dry run shows what Apply does. A paused
// container that should run is unpaused; a leftover of an interrupted
// recreate (current.Leftover) is adopted when it has the target spec
// hash, and otherwise removed along the way (alone, the plan names it by
// its TempName with ActionRemove).
func PlanFor(current, target ContainerState) Plan {
	p := Plan{Container: target.Name, Action: ActionNone}
	if p.Container == "" {
		p.Container = current.Name
	}
	left := current.Leftover.ID != ""
	if !target.Exists {
		if current.Exists || left {
			p.Action = ActionRemove
		}
		return p
	}
	if !current.Exists {
		p.Action = ActionCreate
		if left && current.Leftover.SpecHash == target.SpecHash {
			p.Action = ActionAdopt
		}
		return p
	}
	if diff := diffFields(current, target); len(diff) > 0 {
		p.Action, p.Fields = ActionRecreate, diff
		return p
	}
	if current.Name != "" && target.Name != "" && current.Name != target.Name {
		p.Action = ActionRename
		return p
	}
	switch target.Run {
	case Running:
		switch {
		case current.Paused:
			p.Action = ActionUnpause
		case current.Status != "running":
			p.Action = ActionStart
		}
	case Stopped:
		if current.Status == "running" || current.Status == "restarting" || current.Paused {
			p.Action = ActionStop
		}
	case Once:
		switch {
		case current.Paused:
			p.Action = ActionUnpause
		case current.Status == "created" || (current.Status == "exited" || current.Status == "dead") && current.ExitCode != 0:
			p.Action = ActionStart
		}
	}
	if p.Action == ActionNone && left {
		// Only the leftover of an older recreate is in the way.
		p.Container, p.Action = TempName(p.Container), ActionRemove
	}
	return p
}

// diffFields lists the user-specified fields where current differs from
// target, sorted.
func diffFields(current, target ContainerState) []string {
	var diff []string
	if current.SpecHash == "" && current.composeHash != "" {
		// Started by compose: compared through compose's own hash.
		if current.composeHash != target.composeHash {
			diff = append(diff, "compose-config-hash")
		}
	} else if current.SpecHash != "" && !strings.HasPrefix(current.SpecHash, specHashScheme) && strings.HasPrefix(target.SpecHash, specHashScheme) {
		// Labelled with unkeyed hashes by an older version: recreated
		// once, so no label lets anyone test a guessed secret offline.
		diff = append(diff, "spec")
	} else if current.SpecHash != target.SpecHash {
		for k, v := range target.Fields {
			if current.Fields[k] != v {
				diff = append(diff, k)
			}
		}
		for k := range current.Fields {
			if _, ok := target.Fields[k]; !ok {
				diff = append(diff, k)
			}
		}
		if len(diff) == 0 { // hash differs but no field does: an older label format
			diff = append(diff, "spec")
		}
	}
	moved := target.ImageID != "" && current.ImageID != "" && current.ImageID != target.ImageID
	stale := target.staleImage != "" && current.ImageID == target.staleImage
	if (moved || stale) && !slices.Contains(diff, "image") {
		diff = append(diff, "image-id")
	}
	sharesGone := target.netNS != "" && current.netNS != target.netNS ||
		target.staleNetNS != "" && current.netNS == target.staleNetNS
	if sharesGone && !slices.Contains(diff, "network_mode") {
		// The container whose network namespace it shares was recreated.
		diff = append(diff, "network_mode")
	}
	for _, n := range target.Networks {
		if !slices.Contains(current.Networks, n) {
			diff = append(diff, "network."+n)
		}
	}
	for _, d := range current.Drift {
		if !slices.Contains(diff, d) {
			diff = append(diff, d)
		}
	}
	sort.Strings(diff)
	return slices.Compact(diff)
}

// stateFromSummary reads a container from a list entry, without inspecting.
func stateFromSummary(s container.Summary) ContainerState {
	st := ContainerState{
		Exists:     true,
		ID:         s.ID,
		Status:     string(s.State),
		Paused:     s.State == container.StatePaused,
		Image:      s.Image,
		ImageID:    s.ImageID,
		SpecHash:   s.Labels[LabelSpecHash],
		Fields:     decodeFields(s.Labels[LabelSpecFields]),
		UpdateLock: s.Labels[LabelUpdateLock],
		netNS:      s.HostConfig.NetworkMode,
		brought:    s.Labels[LabelImageBrought] == "true",
	}
	composeState(&st, s.Labels)
	if len(s.Names) > 0 {
		st.Name = strings.TrimPrefix(s.Names[0], "/")
	}
	st.Health = healthFromStatus(s.Status)
	if st.Status == "exited" || st.Status == "dead" {
		var code int
		if _, err := fmt.Sscanf(s.Status, "Exited (%d)", &code); err == nil {
			st.ExitCode = code
		}
	}
	if s.NetworkSettings != nil {
		st.Networks = slices.Sorted(maps.Keys(s.NetworkSettings.Networks))
	}
	return st
}

func healthFromStatus(status string) string {
	switch {
	case strings.Contains(status, "(healthy)"):
		return "healthy"
	case strings.Contains(status, "(unhealthy)"):
		return "unhealthy"
	case strings.Contains(status, "(health: starting)"):
		return "starting"
	}
	return ""
}

// stateFromInspect reads a container from an inspect response and records
// as Drift every user-specified field the engine no longer agrees with.
func stateFromInspect(r container.InspectResponse, spec *ContainerSpec) ContainerState {
	if r.ContainerJSONBase == nil {
		return ContainerState{Exists: true}
	}
	st := ContainerState{Exists: true, ID: r.ID, Name: strings.TrimPrefix(r.Name, "/"), ImageID: r.Image}
	if r.State != nil {
		st.Status = string(r.State.Status)
		st.Paused = r.State.Paused
		st.ExitCode = r.State.ExitCode
		if r.State.Health != nil {
			st.Health = string(r.State.Health.Status)
		}
	}
	if r.Config != nil {
		st.Image = r.Config.Image
		st.SpecHash = r.Config.Labels[LabelSpecHash]
		st.Fields = decodeFields(r.Config.Labels[LabelSpecFields])
		st.UpdateLock = r.Config.Labels[LabelUpdateLock]
		st.brought = r.Config.Labels[LabelImageBrought] == "true"
		composeState(&st, r.Config.Labels)
		if spec != nil {
			env := map[string]string{}
			for _, kv := range r.Config.Env {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			for k, v := range spec.Env {
				if got, ok := env[k]; !ok || got != v {
					st.Drift = append(st.Drift, "env."+k)
				}
			}
			for k, v := range spec.Labels {
				if r.Config.Labels[k] != v {
					st.Drift = append(st.Drift, "label."+k)
				}
			}
			if len(spec.Command) > 0 && !slices.Equal([]string(r.Config.Cmd), spec.Command) {
				st.Drift = append(st.Drift, "command")
			}
		}
	}
	if r.HostConfig != nil {
		st.netNS = string(r.HostConfig.NetworkMode)
	}
	if r.HostConfig != nil && spec != nil && spec.Restart != "" && restartString(r.HostConfig.RestartPolicy) != spec.Restart {
		st.Drift = append(st.Drift, "restart")
	}
	if r.NetworkSettings != nil {
		st.Networks = slices.Sorted(maps.Keys(r.NetworkSettings.Networks))
	}
	sort.Strings(st.Drift)
	return st
}

func restartString(p container.RestartPolicy) string {
	if p.Name == container.RestartPolicyOnFailure && p.MaximumRetryCount > 0 {
		return fmt.Sprintf("%s:%d", p.Name, p.MaximumRetryCount)
	}
	if p.Name == "" {
		return "no"
	}
	return string(p.Name)
}

// renameStarts reports whether adopting current under its target name
// (ActionRename) also starts it: it should run and does not.
func renameStarts(current, target ContainerState) bool {
	return target.Run == Running && current.Status != "running"
}
