// Command netconfig is a config agent in miniature: it keeps the network
// configuration of a pretend device (in a temporary directory standing for
// its root file system) at a target, with a converge.TargetReconciler.
//
// The parameters depend on each other: each VLAN interface takes its MTU
// from the bridge it sits on (bridge MTU minus the 4-byte VLAN tag), so its
// goal is computed from the state the bridge item reached in the same walk.
// IP forwarding is a sysctl, set before the interfaces in a first stage.
//
// The program sets a target, repairs a hand edit (drift), then raises the
// bridge MTU and shows the VLANs follow.
//
//	go run ./examples/netconfig
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/examples/internal/cli"
	"github.com/convergekit/converge/hostcfg"
)

// NetSpec is the target: plain data, stored as JSON by the reconciler so a
// restarted agent resumes it.
type NetSpec struct {
	Bridge  string `json:"bridge"`
	MTU     int    `json:"mtu"`
	Address string `json:"address"`
	VLANs   []int  `json:"vlans"`
}

func main() {
	cli.Parse("netconfig", "", "Keeps the network configuration of a pretend device (a temporary directory) at a\n"+
		"target with a converge.TargetReconciler: sets a target, repairs a hand edit, then raises\n"+
		"the bridge MTU and shows the VLANs follow. It needs no services.")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "netconfig:", err)
		os.Exit(1)
	}
}

// run keeps a temporary device's network configuration at its targets and
// writes what happens to out.
func run(ctx context.Context, out io.Writer) error {
	dir, err := os.MkdirTemp("", "converge-netconfig-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The pretend kernel: the sysctl file exists, as under a real /proc.
	for name, content := range map[string]string{"proc/sys/net/ipv4/ip_forward": "0\n", "etc/sysctl.d/.keep": ""} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	root, err := hostcfg.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()

	rec, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[NetSpec]{
		Name:  "network",
		Build: func(_ context.Context, s NetSpec) ([]converge.TargetStage, error) { return build(root, s) },
	})
	if err != nil {
		return err
	}
	passes := make(chan converge.TargetEvent, 8)
	unsubscribe := rec.Subscribe(func(e converge.TargetEvent) {
		switch e.Kind {
		case converge.TargetStateChanged:
			for _, id := range e.Report.IDs(converge.OutcomeChanged) {
				fmt.Fprintf(out, "  pass %d, stage %-8s changed %s\n", e.Pass, e.Stage, id)
			}
		case converge.TargetPassFinished, converge.TargetPassFailed:
			passes <- e
		}
	})
	defer unsubscribe()

	runCtx, cancel := context.WithCancel(ctx)
	stopped := make(chan error, 1)
	go func() { stopped <- rec.Run(runCtx) }()
	defer func() {
		cancel()
		<-stopped
	}()
	// wait blocks until the reconciler finishes a pass, and fails on a
	// failed one.
	wait := func() error {
		select {
		case e := <-passes:
			if e.Kind == converge.TargetPassFailed {
				return e.Err
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}

	fmt.Fprintln(out, "== target: br0, MTU 1500, VLANs 10 and 20")
	if err := rec.SetTarget(ctx, NetSpec{Bridge: "br0", MTU: 1500, Address: "10.0.0.1/24", VLANs: []int{10, 20}}); err != nil {
		return err
	}
	if err := wait(); err != nil {
		return err
	}
	show(out, dir, "etc/network/interfaces.d/br0.10")

	fmt.Fprintln(out, "== someone edits br0.10 by hand; a trigger repairs it")
	if err := os.WriteFile(filepath.Join(dir, "etc/network/interfaces.d/br0.10"), []byte("mtu 1400\n"), 0o644); err != nil {
		return err
	}
	rec.Trigger()
	if err := wait(); err != nil {
		return err
	}
	show(out, dir, "etc/network/interfaces.d/br0.10")

	fmt.Fprintln(out, "== new target: jumbo frames on br0; the VLANs follow")
	if err := rec.SetTarget(ctx, NetSpec{Bridge: "br0", MTU: 9000, Address: "10.0.0.1/24", VLANs: []int{10, 20}}); err != nil {
		return err
	}
	if err := wait(); err != nil {
		return err
	}
	show(out, dir, "etc/network/interfaces.d/br0.20")
	return nil
}

// build turns the target into two stages: kernel parameters, then
// interfaces. Each VLAN depends on the bridge and derives its MTU from it.
func build(root *hostcfg.Root, s NetSpec) ([]converge.TargetStage, error) {
	if s.MTU < 68 {
		return nil, fmt.Errorf("netconfig: bridge %s: MTU %d is below the IPv4 minimum of 68", s.Bridge, s.MTU)
	}
	kernel := converge.NewGraph()
	kernel.Add((&hostcfg.Sysctl{Root: root, Key: "net.ipv4.ip_forward", Value: "1", Persist: "/etc/sysctl.d/90-netconfig.conf"}).Node(), converge.Present)

	ifaces := converge.NewGraph()
	bridge := &hostcfg.File{Root: root, Path: "/etc/network/interfaces.d/" + s.Bridge,
		Content: []byte(fmt.Sprintf("auto %s\niface %s inet static\n  address %s\n  mtu %d\n", s.Bridge, s.Bridge, s.Address, s.MTU))}
	dir := &hostcfg.Dir{Root: root, Path: "/etc/network/interfaces.d", Mode: 0o755}
	ifaces.Add(dir.Node(), converge.Present)
	ifaces.Add(bridge.Node(), converge.Present, dir.ID())
	for _, id := range s.VLANs {
		v := &vlan{File: hostcfg.File{Root: root, Path: fmt.Sprintf("/etc/network/interfaces.d/%s.%d", s.Bridge, id)}, bridge: bridge.ID(), id: id, parent: s.Bridge}
		ifaces.Add(converge.Wrap[hostcfg.FileState](v), converge.Present, bridge.ID())
	}
	return []converge.TargetStage{{Name: "kernel", Graph: kernel}, {Name: "ifaces", Graph: ifaces}}, nil
}

// vlan is a hostcfg.File whose content is computed from the bridge file's
// state in the same walk: its MTU is the bridge's minus the VLAN tag.
type vlan struct {
	hostcfg.File
	bridge converge.ID
	parent string
	id     int
}

// StateGoal reads the bridge's MTU from the state the bridge item reached.
func (v *vlan) StateGoal(ctx context.Context, deps converge.DepStates) (hostcfg.FileState, error) {
	br, err := converge.DepState[hostcfg.FileState](deps, v.bridge)
	if err != nil {
		return hostcfg.FileState{}, err
	}
	mtu, err := mtuOf(string(br.Content))
	if err != nil {
		return hostcfg.FileState{}, fmt.Errorf("vlan %d: bridge %s: %w", v.id, v.bridge, err)
	}
	name := fmt.Sprintf("%s.%d", v.parent, v.id)
	v.Content = []byte(fmt.Sprintf("auto %s\niface %s inet manual\n  vlan-raw-device %s\n  mtu %d\n", name, name, v.parent, mtu-4))
	return v.File.StateGoal(ctx, deps)
}

// mtuOf finds the "mtu N" line of an interface stanza.
func mtuOf(stanza string) (int, error) {
	for _, line := range strings.Split(stanza, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "mtu" {
			return strconv.Atoi(f[1])
		}
	}
	return 0, fmt.Errorf("no mtu line")
}

func show(out io.Writer, dir, name string) {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		fmt.Fprintf(out, "  %s: %v\n", name, err)
		return
	}
	fmt.Fprintf(out, "  /%s:\n    %s\n", name, strings.ReplaceAll(strings.TrimSpace(string(b)), "\n", "\n    "))
}
