package hostcfg

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/convergekit/converge"
)

// Sysctl is an Item for a kernel parameter: its runtime value under
// proc/sys of the root and, when Persist is set, an entry "key=value" in
// that sysctl.d file so that it survives a reboot. The runtime file is
// written in place (files under /proc cannot be replaced by a rename), and
// refused with ErrHardLinked when it is a regular file with other hard
// links (which may lie outside the root); the persisted file is written
// atomically with only its own line changed.
// Absent removes the persisted entry and leaves the runtime value alone
// (a kernel parameter cannot be removed).
//
// The zero value has no Root and fails; set Root, Key and Value.
type Sysctl struct {
	Root *Root
	// Key is the parameter, dotted ("net.ipv4.ip_forward") or with slashes
	// ("net/ipv4/ip_forward"), as sysctl(8) accepts it.
	Key string
	// Value is the desired value. Whitespace between words is not
	// significant ("4096 16384" matches "4096\t16384").
	Value string
	// Persist, when set, is the sysctl.d file that keeps the value, such as
	// "/etc/sysctl.d/99-converge.conf". Its directory must exist.
	Persist string
}

// SysctlState is the state of a Sysctl.
type SysctlState struct {
	// Key is the dotted key.
	Key string
	// Value is the runtime value with whitespace normalised; "" in a goal
	// means "any" (the clean state).
	Value string
	// Persisted is true when the Persist file has the key, with
	// PersistedValue.
	Persisted      bool
	PersistedValue string
	// Leftovers counts temporary files of ours next to the Persist file.
	Leftovers int
	// Diff is set on the state ApplyDry returns: the change it simulated.
	Diff string
}

func (s SysctlState) diffText() string { return s.Diff }

var (
	_ converge.Item[SysctlState]    = (*Sysctl)(nil)
	_ converge.Cleaner[SysctlState] = (*Sysctl)(nil)
)

// sysctlParts splits a key into its components the way sysctl(8) does:
// with slashes when the first separator is a slash, else with dots (a
// slash inside a dotted component stands for a dot, as in "eth0/1").
func sysctlParts(key string) ([]string, error) {
	var parts []string
	if i, j := strings.IndexByte(key, '/'), strings.IndexByte(key, '.'); i >= 0 && (j < 0 || i < j) {
		parts = strings.Split(strings.Trim(key, "/"), "/")
	} else {
		parts = strings.Split(key, ".")
		for i, p := range parts {
			parts[i] = strings.ReplaceAll(p, "/", ".")
		}
	}
	for _, p := range parts {
		if p == "" || p == "." || p == ".." || strings.ContainsAny(p, " \t\r\n=\x00") {
			return nil, &ItemError{Item: "sysctl:" + key, Reason: fmt.Sprintf("invalid key %q", key)}
		}
	}
	return parts, nil
}

// dotted returns the canonical dotted form of the key.
func (s *Sysctl) dotted() string {
	parts, err := sysctlParts(s.Key)
	if err != nil {
		return s.Key
	}
	out := make([]string, len(parts))
	for i, p := range parts {
		out[i] = strings.ReplaceAll(p, ".", "/")
	}
	return strings.Join(out, ".")
}

// ID returns "sysctl:" and the dotted key.
func (s *Sysctl) ID() converge.ID { return converge.ID("sysctl:" + s.dotted()) }

// Node returns the item wrapped for a graph.
func (s *Sysctl) Node() converge.Node { return converge.Wrap[SysctlState](s) }

func (s *Sysctl) procPath() (string, error) {
	parts, err := sysctlParts(s.Key)
	if err != nil {
		return "", err
	}
	return "/proc/sys/" + strings.Join(parts, "/"), nil
}

func normValue(v string) string { return strings.Join(strings.Fields(v), " ") }

func (s *Sysctl) validate() error {
	if _, err := sysctlParts(s.Key); err != nil {
		return err
	}
	if strings.ContainsAny(s.Value, "\r\n") {
		return &ItemError{Item: string(s.ID()), Reason: "Value contains a line terminator"}
	}
	if s.Root == nil || s.Root.r == nil {
		return &ItemError{Item: string(s.ID()), Reason: "Root is nil"}
	}
	return nil
}

// StateCurrent reads the runtime value and the persisted entry. A key the
// kernel does not have fails with an error matching fs.ErrNotExist.
func (s *Sysctl) StateCurrent(context.Context, converge.DepStates) (SysctlState, error) {
	if err := s.validate(); err != nil {
		return SysctlState{}, err
	}
	p, _ := s.procPath()
	_, content, exists, _, err := s.Root.peek(p)
	if err != nil {
		return SysctlState{}, err
	}
	if !exists {
		return SysctlState{}, &PathError{Op: "read", Path: p, Err: fmt.Errorf("unknown kernel parameter %s: %w", s.dotted(), fs.ErrNotExist)}
	}
	st := SysctlState{Key: s.dotted(), Value: normValue(string(content))}
	if s.Persist != "" {
		_, pc, _, leftovers, err := s.Root.peek(s.Persist)
		if err != nil {
			return SysctlState{}, err
		}
		st.PersistedValue, st.Persisted = ParseConfig(pc).Get("", st.Key)
		st.Leftovers = leftovers
	}
	return st, nil
}

// StateGoal is the runtime value Value, persisted when Persist is set.
func (s *Sysctl) StateGoal(context.Context, converge.DepStates) (SysctlState, error) {
	if err := s.validate(); err != nil {
		return SysctlState{}, err
	}
	if normValue(s.Value) == "" {
		return SysctlState{}, &ItemError{Item: string(s.ID()), Reason: "Value is empty"}
	}
	st := SysctlState{Key: s.dotted(), Value: normValue(s.Value)}
	if s.Persist != "" {
		st.Persisted, st.PersistedValue = true, normValue(s.Value)
	}
	return st, nil
}

// StateClean is the persisted entry absent, the runtime value unmanaged.
func (s *Sysctl) StateClean(context.Context, converge.DepStates) (SysctlState, error) {
	if err := s.validate(); err != nil {
		return SysctlState{}, err
	}
	return SysctlState{Key: s.dotted()}, nil
}

// Check compares the runtime value (unless the target leaves it open) and,
// with Persist, the persisted entry.
func (s *Sysctl) Check(_ context.Context, current, target SysctlState) (converge.Decision, error) {
	units := 0
	if target.Value != "" && normValue(current.Value) != target.Value {
		units++
	}
	if s.Persist != "" && (current.Persisted != target.Persisted ||
		(target.Persisted && normValue(current.PersistedValue) != target.PersistedValue) || current.Leftovers > 0) {
		units++
	}
	if units > 0 {
		return converge.Required(units), nil
	}
	return converge.NotRequired(), nil
}

// Apply writes the runtime value and edits the persisted entry.
func (s *Sysctl) Apply(ctx context.Context, _, target SysctlState) (SysctlState, error) {
	return s.converge(ctx, target, true)
}

// ApplyDry returns the state Apply would reach, writing nothing.
func (s *Sysctl) ApplyDry(ctx context.Context, _, target SysctlState) (SysctlState, error) {
	return s.converge(ctx, target, false)
}

func (s *Sysctl) converge(ctx context.Context, target SysctlState, write bool) (SysctlState, error) {
	if err := s.validate(); err != nil {
		return SysctlState{}, err
	}
	cur, err := s.StateCurrent(ctx, nil)
	if err != nil {
		return SysctlState{}, err
	}
	out := SysctlState{Key: cur.Key, Value: cur.Value}
	if target.Value != "" && cur.Value != target.Value {
		out.Value = target.Value
		out.Diff = fmt.Sprintf("sysctl %s: %s -> %s\n", cur.Key, cur.Value, target.Value)
		if write {
			if err := s.writeRuntime(ctx, target.Value); err != nil {
				return SysctlState{}, err
			}
		}
	}
	if s.Persist != "" {
		res, err := s.Root.edit(ctx, s.Persist, write, 0o644, func(content []byte) ([]byte, error) {
			doc := ParseConfig(content)
			if target.Persisted {
				if v, ok := doc.Get("", cur.Key); ok && normValue(v) == target.PersistedValue {
					return content, nil
				}
				doc.Set("", cur.Key, target.PersistedValue)
				return doc.Bytes(), nil
			}
			if content == nil || doc.Delete("", cur.Key) == 0 {
				return content, nil
			}
			return doc.Bytes(), nil
		})
		if err != nil {
			return SysctlState{}, err
		}
		out.Persisted, out.PersistedValue = target.Persisted, target.PersistedValue
		out.Diff += res.diff
	}
	return out, nil
}

// writeRuntime writes the value into the existing proc/sys file.
func (s *Sysctl) writeRuntime(ctx context.Context, value string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	p, _ := s.procPath()
	name, rel, err := resolveItem(s.Root, p, true)
	if err != nil {
		return err
	}
	if s.Root.afterResolve != nil {
		s.Root.afterResolve(rel)
	}
	unlock := s.Root.lock(rel)
	defer unlock()
	// The value is written in place (a kernel parameter has no inode to
	// replace), through a handle that cannot have been swapped for a link;
	// a regular file with other hard links is refused, unchanged.
	f, err := s.Root.openLeaf(rel, os.O_WRONLY)
	if err != nil {
		return s.Root.fail("write", name, err)
	}
	st, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return &PathError{Op: "write", Path: name, Err: err}
	case st.Mode().IsRegular() && linkCount(st) > 1:
		f.Close()
		return &PathError{Op: "write", Path: name, Err: ErrHardLinked}
	case st.Mode().IsRegular():
		if err := f.Truncate(0); err != nil {
			f.Close()
			return &PathError{Op: "write", Path: name, Err: err}
		}
	}
	_, werr := f.WriteString(value + "\n")
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		return &PathError{Op: "write", Path: name, Err: err}
	}
	return nil
}
