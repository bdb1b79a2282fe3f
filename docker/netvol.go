package docker

import (
	"context"
	"fmt"
	"maps"
	"net"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/convergekit/converge"
)

// NetworkState is whether an engine network exists and whether we own it.
type NetworkState struct {
	Name   string
	Exists bool
	ID     string
	// Owned is true when the network carries our owner label, or compose's
	// project label with the project's name; a network we do not own is
	// never removed.
	Owned bool

	snap *snapshot
}

// Network is the item of an engine network.
type Network struct {
	spec      NetworkSpec
	project   string
	eng       Engine
	projectID converge.ID
}

// NewNetwork returns a standalone Network item on eng, labelled with project.
func NewNetwork(eng Engine, project string, spec NetworkSpec) *Network {
	return &Network{spec: spec, project: project, eng: eng}
}

// ID returns NetworkID(name).
func (n *Network) ID() converge.ID { return NetworkID(n.spec.Name) }

func (n *Network) key() string { return "network:" + n.spec.Name }

// StateCurrent reads the project's snapshot (a network a running project
// container is attached to exists) or lists the network by name. Right
// after an Apply of this walk that created the network, it returns what the
// engine answered to the create (the network's ID, with our labels): the
// walk's verification costs no engine call of its own.
func (n *Network) StateCurrent(ctx context.Context, deps converge.DepStates) (NetworkState, error) {
	if n.projectID != "" {
		ps, err := converge.DepState[ProjectState](deps, n.projectID)
		if err == nil {
			if st, ok := takeObserved[NetworkState](ps.snap, n.key()); ok {
				return st, nil
			}
		}
		if err == nil && ps.snap.usable(n.key()) {
			info, ok := ps.snap.networks[n.spec.Name]
			return NetworkState{Name: n.spec.Name, Exists: ok, ID: info.ID, Owned: ok && info.owns(n.project), snap: ps.snap}, nil
		}
	}
	found, err := listNetworks(ctx, n.eng, []string{n.spec.Name})
	if err != nil {
		return NetworkState{}, err
	}
	info, ok := found[n.spec.Name]
	return NetworkState{Name: n.spec.Name, Exists: ok, ID: info.ID, Owned: ok && info.owns(n.project)}, nil
}

// StateGoal is the network existing.
func (n *Network) StateGoal(context.Context, converge.DepStates) (NetworkState, error) {
	return NetworkState{Name: n.spec.Name, Exists: true, Owned: true}, nil
}

// StateClean is the network removed (if we own it).
func (n *Network) StateClean(context.Context, converge.DepStates) (NetworkState, error) {
	return NetworkState{Name: n.spec.Name}, nil
}

// Check wants the network to exist (for a goal), or an owned network gone
// (for a clean state); a network we do not own satisfies a clean state.
func (n *Network) Check(_ context.Context, current, target NetworkState) (converge.Decision, error) {
	if target.Exists == current.Exists || !target.Exists && !current.Owned {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}

// Apply creates or removes the network.
func (n *Network) Apply(ctx context.Context, current, target NetworkState) (NetworkState, error) {
	current.snap.invalidate(n.key())
	if target.Exists {
		labels := composeObjectLabels(n.project, LabelComposeNetwork, n.spec.Name)
		labels[LabelOwner], labels[LabelProject] = OwnerValue, n.project
		for k, v := range n.spec.Labels {
			labels[k] = v
		}
		opts := network.CreateOptions{Driver: n.spec.Driver, Internal: n.spec.Internal, Labels: labels,
			Options: n.spec.Options, IPAM: n.spec.IPAM.engine()}
		if n.spec.EnableIPv6 {
			opts.EnableIPv6 = &n.spec.EnableIPv6
		}
		r, err := n.eng.NetworkCreate(ctx, n.spec.Name, opts)
		if err != nil && !errdefs.IsConflict(err) {
			return current, fmt.Errorf("docker: network %s: create: %w", n.spec.Name, err)
		}
		next := NetworkState{Name: n.spec.Name, Exists: true, ID: r.ID, Owned: true}
		if err == nil && r.ID != "" {
			// The engine created it, with our labels: that is its state.
			// A conflict (someone else's network of that name) is left
			// for the verification to read.
			current.snap.observe(n.key(), next)
		}
		return next, nil
	}
	id := current.ID
	if id == "" {
		id = n.spec.Name
	}
	if err := n.eng.NetworkRemove(ctx, id); err != nil && !errdefs.IsNotFound(err) {
		return current, fmt.Errorf("docker: network %s: remove: %w", n.spec.Name, err)
	}
	return NetworkState{Name: n.spec.Name}, nil
}

// ApplyDry returns the state Apply would reach without writing.
func (n *Network) ApplyDry(_ context.Context, _, target NetworkState) (NetworkState, error) {
	return target, nil
}

// VolumeState is whether an engine volume exists and whether we own it.
type VolumeState struct {
	Name   string
	Exists bool
	// Owned is true when the volume carries our owner label, or compose's
	// project label with the project's name; a volume we do not own is
	// never removed.
	Owned bool

	snap *snapshot
	keep bool // a clean target that leaves the volume and its data alone
}

// Volume is the item of an engine volume.
type Volume struct {
	spec      VolumeSpec
	project   string
	eng       Engine
	projectID converge.ID
	keep      bool
}

// NewVolume returns a standalone Volume item on eng, labelled with project.
func NewVolume(eng Engine, project string, spec VolumeSpec) *Volume {
	return &Volume{spec: spec, project: project, eng: eng}
}

// ID returns VolumeID(name).
func (v *Volume) ID() converge.ID { return VolumeID(v.spec.Name) }

func (v *Volume) key() string { return "volume:" + v.spec.Name }

// StateCurrent reads the project's snapshot (a volume a running project
// container mounts exists) or lists the volume by name.
func (v *Volume) StateCurrent(ctx context.Context, deps converge.DepStates) (VolumeState, error) {
	if v.projectID != "" {
		if ps, err := converge.DepState[ProjectState](deps, v.projectID); err == nil && ps.snap.usable(v.key()) {
			info, ok := ps.snap.volumes[v.spec.Name]
			return VolumeState{Name: v.spec.Name, Exists: ok, Owned: ok && info.owns(v.project), snap: ps.snap}, nil
		}
	}
	found, err := listVolumes(ctx, v.eng, []string{v.spec.Name})
	if err != nil {
		return VolumeState{}, err
	}
	info, ok := found[v.spec.Name]
	return VolumeState{Name: v.spec.Name, Exists: ok, Owned: ok && info.owns(v.project)}, nil
}

// StateGoal is the volume existing.
func (v *Volume) StateGoal(context.Context, converge.DepStates) (VolumeState, error) {
	return VolumeState{Name: v.spec.Name, Exists: true, Owned: true}, nil
}

// StateClean is the volume removed (if we own it); for the volume of a
// project that does not set RemoveVolumes, it is "whatever is there":
// cleaning the project keeps the volume and its data.
func (v *Volume) StateClean(context.Context, converge.DepStates) (VolumeState, error) {
	return VolumeState{Name: v.spec.Name, keep: v.keep}, nil
}

// Check is like Network.Check; a clean target that keeps the volume
// requires nothing.
func (v *Volume) Check(_ context.Context, current, target VolumeState) (converge.Decision, error) {
	if target.Exists == current.Exists || !target.Exists && (!current.Owned || target.keep) {
		return converge.NotRequired(), nil
	}
	return converge.Required(1), nil
}

// Apply creates or removes the volume.
func (v *Volume) Apply(ctx context.Context, current, target VolumeState) (VolumeState, error) {
	current.snap.invalidate(v.key())
	if target.Exists {
		labels := composeObjectLabels(v.project, LabelComposeVolume, v.spec.Name)
		labels[LabelOwner], labels[LabelProject] = OwnerValue, v.project
		for k, val := range v.spec.Labels {
			labels[k] = val
		}
		if _, err := v.eng.VolumeCreate(ctx, volume.CreateOptions{Name: v.spec.Name, Driver: v.spec.Driver, DriverOpts: v.spec.Options, Labels: labels}); err != nil {
			return current, fmt.Errorf("docker: volume %s: create: %w", v.spec.Name, err)
		}
		return VolumeState{Name: v.spec.Name, Exists: true, Owned: true}, nil
	}
	if err := v.eng.VolumeRemove(ctx, v.spec.Name, false); err != nil && !errdefs.IsNotFound(err) {
		return current, fmt.Errorf("docker: volume %s: remove: %w", v.spec.Name, err)
	}
	return VolumeState{Name: v.spec.Name}, nil
}

// ApplyDry returns the state Apply would reach without writing.
func (v *Volume) ApplyDry(_ context.Context, _, target VolumeState) (VolumeState, error) {
	return target, nil
}

// IPAM is the address management of a network: its driver ("" for the
// engine's default), the driver's options and the address pools.
type IPAM struct {
	Driver  string            `json:"driver,omitzero"`
	Options map[string]string `json:"options,omitempty"`
	Pools   []IPAMPool        `json:"config,omitempty"`
}

// IPAMPool is one address pool of a network: a Subnet in CIDR notation,
// optionally an IPRange inside it to allocate from, a Gateway and
// AuxAddresses the engine must not hand out (by host name).
type IPAMPool struct {
	Subnet       string            `json:"subnet,omitzero"`
	IPRange      string            `json:"ip_range,omitzero"`
	Gateway      string            `json:"gateway,omitzero"`
	AuxAddresses map[string]string `json:"aux_addresses,omitempty"`
}

// engine is the IPAM in the engine's terms; nil for a nil IPAM.
func (i *IPAM) engine() *network.IPAM {
	if i == nil {
		return nil
	}
	out := &network.IPAM{Driver: i.Driver, Options: maps.Clone(i.Options)}
	for _, p := range i.Pools {
		out.Config = append(out.Config, network.IPAMConfig{Subnet: p.Subnet, IPRange: p.IPRange, Gateway: p.Gateway,
			AuxAddress: maps.Clone(p.AuxAddresses)})
	}
	return out
}

// validate returns why the IPAM of a network is invalid, naming the field
// under IPAM, or "", "".
func (i *IPAM) validate() (field, reason string) {
	if i == nil {
		return "", ""
	}
	for k, p := range i.Pools {
		f := fmt.Sprintf("IPAM.Pools[%d].", k)
		_, subnet, err := net.ParseCIDR(p.Subnet)
		if err != nil {
			return f + "Subnet", fmt.Sprintf("%q is not a subnet in CIDR notation", p.Subnet)
		}
		if p.IPRange != "" {
			if ip, _, err := net.ParseCIDR(p.IPRange); err != nil || !subnet.Contains(ip) {
				return f + "IPRange", fmt.Sprintf("%q is not a CIDR range inside %s", p.IPRange, p.Subnet)
			}
		}
		if ip := net.ParseIP(p.Gateway); p.Gateway != "" && (ip == nil || !subnet.Contains(ip)) {
			return f + "Gateway", fmt.Sprintf("%q is not an address inside %s", p.Gateway, p.Subnet)
		}
		for h, a := range p.AuxAddresses {
			if ip := net.ParseIP(a); ip == nil || !subnet.Contains(ip) {
				return f + "AuxAddresses." + h, fmt.Sprintf("%q is not an address inside %s", a, p.Subnet)
			}
		}
	}
	return "", ""
}
