package hostcfg

import (
	"context"
	"fmt"
	"strings"

	"github.com/convergekit/converge"
)

// Hostname is an Item for the host name: the content of /etc/hostname
// (written atomically) and, when the root has proc/sys/kernel/hostname,
// the running host name. It has no clean state: a host always has a name.
//
// The zero value has no Root and fails; set Root and Name.
type Hostname struct {
	Root *Root
	// Name is the host name: labels of letters, digits and hyphens
	// separated by dots (RFC 1123), at most 253 characters.
	Name string
}

// HostnameState is the state of a Hostname.
type HostnameState struct {
	// Name is the name in /etc/hostname ("" when the file is missing).
	Name string
	// Runtime is the running host name, and HasRuntime whether the root
	// has one (proc/sys/kernel/hostname exists).
	Runtime    string
	HasRuntime bool
	// Leftovers counts temporary files of ours next to /etc/hostname.
	Leftovers int
	// Diff is set on the state ApplyDry returns: the change it simulated.
	Diff string
}

func (s HostnameState) diffText() string { return s.Diff }

var _ converge.Item[HostnameState] = (*Hostname)(nil)

const (
	hostnameFile    = "/etc/hostname"
	hostnameRuntime = "/proc/sys/kernel/hostname"
)

// ID returns "hostname".
func (h *Hostname) ID() converge.ID { return "hostname" }

// Node returns the item wrapped for a graph.
func (h *Hostname) Node() converge.Node { return converge.Wrap[HostnameState](h) }

func (h *Hostname) validate() error {
	if h.Root == nil || h.Root.r == nil {
		return &ItemError{Item: "hostname", Reason: "Root is nil"}
	}
	if !validHostname(h.Name) {
		return &ItemError{Item: "hostname", Reason: fmt.Sprintf("invalid host name %q", h.Name)}
	}
	return nil
}

// validHostname checks RFC 1123 host names.
func validHostname(name string) bool {
	if name == "" || len(name) > 253 {
		return false
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// firstLine returns the first line of content without blanks (and without
// a byte-order mark).
func firstLine(content []byte) string {
	_, content = cutBOM(content)
	s := string(content)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// StateCurrent reads /etc/hostname and the running name.
func (h *Hostname) StateCurrent(context.Context, converge.DepStates) (HostnameState, error) {
	if h.Root == nil || h.Root.r == nil {
		return HostnameState{}, &ItemError{Item: "hostname", Reason: "Root is nil"}
	}
	_, content, _, leftovers, err := h.Root.peek(hostnameFile)
	if err != nil {
		return HostnameState{}, err
	}
	st := HostnameState{Name: firstLine(content), Leftovers: leftovers}
	_, rt, exists, _, err := h.Root.peek(hostnameRuntime)
	if err != nil {
		return HostnameState{}, err
	}
	st.Runtime, st.HasRuntime = firstLine(rt), exists
	return st, nil
}

// StateGoal is Name in both places.
func (h *Hostname) StateGoal(context.Context, converge.DepStates) (HostnameState, error) {
	if err := h.validate(); err != nil {
		return HostnameState{}, err
	}
	return HostnameState{Name: h.Name, Runtime: h.Name}, nil
}

// Check compares the file and, when there is one, the running name.
func (h *Hostname) Check(_ context.Context, current, target HostnameState) (converge.Decision, error) {
	if current.Name != target.Name || (current.HasRuntime && current.Runtime != target.Runtime) || current.Leftovers > 0 {
		return converge.Required(1), nil
	}
	return converge.NotRequired(), nil
}

// Apply writes /etc/hostname and sets the running name.
func (h *Hostname) Apply(ctx context.Context, _, target HostnameState) (HostnameState, error) {
	return h.converge(ctx, target, true)
}

// ApplyDry returns the state Apply would reach, writing nothing.
func (h *Hostname) ApplyDry(ctx context.Context, _, target HostnameState) (HostnameState, error) {
	return h.converge(ctx, target, false)
}

func (h *Hostname) converge(ctx context.Context, target HostnameState, write bool) (HostnameState, error) {
	if err := h.validate(); err != nil {
		return HostnameState{}, err
	}
	res, err := h.Root.edit(ctx, hostnameFile, write, 0o644, func(cur []byte) ([]byte, error) {
		if cur != nil && firstLine(cur) == target.Name {
			return cur, nil
		}
		bom, _ := cutBOM(cur)
		return []byte(bom + target.Name + "\n"), nil
	})
	if err != nil {
		return HostnameState{}, err
	}
	cur, err := h.StateCurrent(ctx, nil)
	if err != nil {
		return HostnameState{}, err
	}
	out := HostnameState{Name: target.Name, Runtime: cur.Runtime, HasRuntime: cur.HasRuntime, Diff: res.diff}
	if cur.HasRuntime && cur.Runtime != target.Runtime {
		out.Runtime = target.Runtime
		out.Diff += fmt.Sprintf("hostname (running): %s -> %s\n", cur.Runtime, target.Runtime)
		if write {
			rs := &Sysctl{Root: h.Root, Key: "kernel.hostname"}
			if err := rs.writeRuntime(ctx, target.Runtime); err != nil {
				return HostnameState{}, err
			}
		}
	}
	return out, nil
}
