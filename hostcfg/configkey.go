package hostcfg

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/convergekit/converge"
)

// Key returns an item for a single-valued key of section ("" or "all" for
// unconditional lines): Present gives the key value (rewriting the value of
// its entry in the section, or adding a line), Absent removes its entry.
//
// A Key never touches more than its own line: a repeatable key (see
// IsRepeatable) is refused with an *ItemError, and a key that the section
// holds more than once fails with a *RepeatedKeyError naming the lines
// when the item would change it. Manage such keys with Entry.
func (c *ConfigFile) Key(section, key, value string) *ConfigKey {
	return c.register(&ConfigKey{file: c, Section: normSection(section), Key: key, Value: value})
}

// Entry returns an item for one entry key=value of a key that may repeat
// (dtoverlay, dtparam, gpio): Present adds the line unless the section has
// it, Absent removes that exact entry, and other entries of the key are
// left alone.
func (c *ConfigFile) Entry(section, key, value string) *ConfigKey {
	return c.register(&ConfigKey{file: c, Section: normSection(section), Key: key, Value: value, Repeated: true})
}

// ConfigKey is an Item for one key (or, when Repeated, one entry) of a
// ConfigFile. Get one from ConfigFile.Key, Entry or Import; the zero value
// has no file and fails.
type ConfigKey struct {
	file *ConfigFile
	// Section is the filter the key is under, "" for unconditional.
	Section string
	Key     string
	Value   string
	// Repeated makes the item manage the one entry Key=Value instead of
	// the value of Key.
	Repeated bool

	// seq is the order in which the file handed out the item: lines that
	// items add land in this order.
	seq int
	// memo holds the ID and validation of the fields as the file handed
	// the item out; set before the item is shared and never changed.
	memo *keyMemo
	// seen is the current state last read while the fields held the
	// values of memo, with what it was read from: a read that finds the
	// same gets the same boxed state again instead of a new one.
	seen atomic.Pointer[keySeen]
}

// keySeen is a current state of a ConfigKey, boxed, with what it was
// derived from besides the item's fields: the index of the file's version,
// the number of leftover temporary files and whether a reboot is pending.
// The box holds a copy, so sharing it shares nothing mutable.
type keySeen struct {
	idx       *docIndex
	leftovers int
	reboot    bool
	state     any
}

// keyMemo is what a ConfigKey derives from its fields alone, recorded with
// the fields it was derived from: the methods of a walk use it while the
// fields still hold those values.
type keyMemo struct {
	section, key, value string
	repeated            bool
	id                  converge.ID
	err                 error
	// goal and clean are the goal and clean states of the fields, boxed
	// once for every walk (a box holds a copy: nothing can change them).
	goal, clean any
}

// remember records the memo of the item's fields as they are now.
func (k *ConfigKey) remember() {
	k.memo = &keyMemo{section: k.Section, key: k.Key, value: k.Value, repeated: k.Repeated, id: k.id(), err: k.check(),
		goal: k.goal(), clean: k.clean()}
}

// memoed returns the memo when the fields still hold the values it was
// derived from, nil otherwise.
func (k *ConfigKey) memoed() *keyMemo {
	m := k.memo
	if m == nil || m.section != k.Section || m.key != k.Key || m.value != k.Value || m.repeated != k.Repeated {
		return nil
	}
	return m
}

// ConfigKeyState is the state of a ConfigKey.
type ConfigKeyState struct {
	Path    string
	Section string
	Key     string
	// Present is true when the section has the key (for a repeated entry:
	// the entry Key=Value).
	Present bool
	// Value is the key's winning value (the entry's value when Repeated).
	Value string
	// Leftovers counts temporary files of ours next to the file.
	Leftovers int
	// RebootRequired is set on the state ApplyDry returns when it would
	// change boot configuration, and, once Apply changed it, on every state
	// of the key read through the same ConfigFile (so on the verified state
	// in ItemResult.After too) until the process ends.
	RebootRequired bool
	// Diff is set on the state ApplyDry returns: the unified diff of the
	// change it simulated.
	Diff string
}

func (s ConfigKeyState) diffText() string { return s.Diff }

var (
	_ converge.Item[ConfigKeyState]    = (*ConfigKey)(nil)
	_ converge.Cleaner[ConfigKeyState] = (*ConfigKey)(nil)
)

// ID returns "configkey:<path>:<key>", with "[section]" before the key when
// the section is not "" and "=<value>" after it for a repeated entry; for
// example "configkey:/boot/config.txt:[pi4]arm_boost" or
// "configkey:/boot/config.txt:dtoverlay=vc4-kms-v3d".
func (k *ConfigKey) ID() converge.ID {
	if m := k.memoed(); m != nil {
		return m.id
	}
	return k.id()
}

func (k *ConfigKey) id() converge.ID {
	var b strings.Builder
	b.WriteString("configkey:")
	if k.file != nil {
		b.WriteString(k.file.Path())
	}
	b.WriteByte(':')
	if k.Section != "" {
		b.WriteString("[" + k.Section + "]")
	}
	b.WriteString(k.Key)
	if k.Repeated {
		b.WriteString("=" + k.Value)
	}
	return converge.ID(b.String())
}

// Node returns the item wrapped for a graph, with ConfigKeyState values as
// its states, as converge.Wrap would. Unlike a Node made by Wrap, it boxes
// a state into an interface value once and hands out the same box while
// the state is the same (the goal for all walks, the current state while
// the file and the item's fields do not change), so a walk over converged
// keys allocates no state. converge.Unwrap does not apply to it: keep the
// *ConfigKey to reach the item.
func (k *ConfigKey) Node() converge.Node {
	return &configKeyNode{Node: converge.Wrap[ConfigKeyState](k), k: k}
}

// configKeyNode is the Node of a ConfigKey: Check, Apply and ApplyDry are
// those of converge.Wrap, and the states it reads come boxed from the
// item's caches.
type configKeyNode struct {
	converge.Node
	k *ConfigKey
}

var _ converge.CleanNode = (*configKeyNode)(nil)

// StateCurrent is ConfigKey.StateCurrent, boxed.
func (n *configKeyNode) StateCurrent(ctx context.Context, _ converge.DepStates) (any, error) {
	return n.k.current(ctx)
}

// StateGoal is ConfigKey.StateGoal, boxed.
func (n *configKeyNode) StateGoal(context.Context, converge.DepStates) (any, error) {
	return n.k.fixed(false)
}

// StateClean is ConfigKey.StateClean, boxed.
func (n *configKeyNode) StateClean(context.Context, converge.DepStates) (any, error) {
	return n.k.fixed(true)
}

// fixed returns the goal state of the item, or its clean state, boxed:
// the box of the memo while the fields hold its values.
func (k *ConfigKey) fixed(clean bool) (any, error) {
	m, err := k.checked()
	switch {
	case err != nil:
		return zeroConfigKeyState, err
	case m == nil && clean:
		return k.clean(), nil
	case m == nil:
		return k.goal(), nil
	case clean:
		return m.clean, nil
	}
	return m.goal, nil
}

// zeroConfigKeyState is the state a Node made by converge.Wrap returns
// with an error.
var zeroConfigKeyState any = ConfigKeyState{}

func (k *ConfigKey) validate() error {
	_, err := k.checked()
	return err
}

// checked returns the memo when the fields still hold the values it was
// derived from (nil otherwise), and the validation of the fields.
func (k *ConfigKey) checked() (*keyMemo, error) {
	if m := k.memoed(); m != nil {
		return m, m.err
	}
	return nil, k.check()
}

// check validates the fields (see validate).
func (k *ConfigKey) check() error {
	switch {
	case k.file == nil || k.file.root == nil:
		return &ItemError{Item: string(k.ID()), Reason: "no ConfigFile (use ConfigFile.Key or Entry)"}
	case k.Key == "" || strings.ContainsAny(k.Key, "=\n"):
		return &ItemError{Item: string(k.ID()), Reason: fmt.Sprintf("invalid key %q", k.Key)}
	case keyProblem(k.Key) != "":
		return &ItemError{Item: string(k.ID()), Reason: fmt.Sprintf("invalid key %q: %s", k.Key, keyProblem(k.Key))}
	case strings.ContainsRune(k.Value, '\n'):
		return &ItemError{Item: string(k.ID()), Reason: fmt.Sprintf("invalid value %q", k.Value)}
	case strings.ContainsRune(k.Section, '\n') || !readsBack(parseLine("["+k.Section+"]\n", ""), lineSection, k.Section, "", ""):
		return &ItemError{Item: string(k.ID()), Reason: fmt.Sprintf("invalid section %q", k.Section)}
	case !readsBack(parseLine(k.Key+"="+k.Value+"\n", k.Section), lineEntry, k.Section, k.Key, k.Value):
		return &ItemError{Item: string(k.ID()), Reason: fmt.Sprintf("%s=%s would not read back as that entry", k.Key, k.Value)}
	case !k.Repeated && IsRepeatable(k.Key):
		return &ItemError{Item: string(k.ID()), Reason: fmt.Sprintf("%s may appear several times: use ConfigFile.Entry for each entry", k.Key)}
	}
	return nil
}

// keyProblem says why key, not empty, cannot be a key of a config file
// line: a reader trims the blanks around a key and takes a line that
// starts with '#' or ';' for a comment. "" when none of these applies.
func keyProblem(key string) string {
	switch {
	case strings.TrimSpace(key) != key:
		return "leading or trailing space"
	case key[0] == '#' || key[0] == ';':
		return fmt.Sprintf("starts with %q, which makes the line a comment", key[:1])
	}
	return ""
}

// readsBack reports whether a parsed line is of kind with section, key and
// value: a line the item writes must parse as what it means.
func readsBack(l docLine, kind lineKind, section, key, value string) bool {
	return l.kind == kind && l.section == section && l.key == key && l.value == value
}

// lookup reads the key from the index of a document, as observe does.
func (k *ConfigKey) lookup(idx *docIndex) (present bool, value string) {
	values := idx.values[[2]string{normSection(k.Section), k.Key}]
	if k.Repeated {
		if slices.Contains(values, k.Value) {
			return true, k.Value
		}
		return false, ""
	}
	if len(values) == 0 {
		return false, ""
	}
	return true, values[len(values)-1]
}

// observe reads the key from a document.
func (k *ConfigKey) observe(doc *ConfigDoc) (present bool, value string) {
	if k.Repeated {
		if doc.Has(k.Section, k.Key, k.Value) {
			return true, k.Value
		}
		return false, ""
	}
	value, present = doc.Get(k.Section, k.Key)
	return present, value
}

// StateCurrent reads the key from the file.
func (k *ConfigKey) StateCurrent(ctx context.Context, _ converge.DepStates) (ConfigKeyState, error) {
	st, err := k.current(ctx)
	return st.(ConfigKeyState), err
}

// current reads the key from the file and returns its state boxed, the
// box of the last read when the item's fields, the version of the file,
// its leftovers and the pending reboot are those of that read. With an
// error the state is the zero ConfigKeyState.
func (k *ConfigKey) current(ctx context.Context) (any, error) {
	m, err := k.checked()
	if err != nil {
		return zeroConfigKeyState, err
	}
	name, idx, leftovers, err := k.file.current(ctx)
	if err != nil {
		return zeroConfigKeyState, err
	}
	reboot := k.file.rebootPending(k)
	if s := k.seen.Load(); m != nil && s != nil && s.idx == idx && s.leftovers == leftovers && s.reboot == reboot {
		return s.state, nil
	}
	present, value := k.lookup(idx)
	var st any = ConfigKeyState{Path: name, Section: k.Section, Key: k.Key, Present: present, Value: value, Leftovers: leftovers,
		RebootRequired: reboot}
	if m != nil {
		k.seen.Store(&keySeen{idx: idx, leftovers: leftovers, reboot: reboot, state: st})
	}
	return st, nil
}

// StateGoal is the key with Value.
func (k *ConfigKey) StateGoal(context.Context, converge.DepStates) (ConfigKeyState, error) {
	if err := k.validate(); err != nil {
		return ConfigKeyState{}, err
	}
	return k.goal(), nil
}

// goal is the goal state of the fields as they are.
func (k *ConfigKey) goal() ConfigKeyState {
	return ConfigKeyState{Path: k.file.Path(), Section: k.Section, Key: k.Key, Present: true, Value: k.Value}
}

// StateClean is the key (or entry) absent.
func (k *ConfigKey) StateClean(context.Context, converge.DepStates) (ConfigKeyState, error) {
	if err := k.validate(); err != nil {
		return ConfigKeyState{}, err
	}
	return k.clean(), nil
}

// clean is the clean state of the fields as they are.
func (k *ConfigKey) clean() ConfigKeyState {
	return ConfigKeyState{Path: k.file.Path(), Section: k.Section, Key: k.Key}
}

// Check compares presence and value; leftover temporary files also
// require Apply.
func (k *ConfigKey) Check(_ context.Context, current, target ConfigKeyState) (converge.Decision, error) {
	if current.Present != target.Present || (target.Present && current.Value != target.Value) || current.Leftovers > 0 {
		return converge.Required(1), nil
	}
	return converge.NotRequired(), nil
}

// Apply edits the one line of the key (or adds or removes it) and asks
// for a reboot when the file is boot configuration and changed.
func (k *ConfigKey) Apply(ctx context.Context, _, target ConfigKeyState) (ConfigKeyState, error) {
	return k.converge(ctx, target, true)
}

// ApplyDry returns the state Apply would reach, with its diff, writing
// nothing.
func (k *ConfigKey) ApplyDry(ctx context.Context, _, target ConfigKeyState) (ConfigKeyState, error) {
	return k.converge(ctx, target, false)
}

func (k *ConfigKey) converge(ctx context.Context, target ConfigKeyState, write bool) (ConfigKeyState, error) {
	if err := k.validate(); err != nil {
		return ConfigKeyState{}, err
	}
	if write {
		// The items after this one in the walk must look at the file
		// again: forget what was seen before the write, and what another
		// item may see while it runs.
		k.file.forget()
		defer k.file.forget()
	}
	res, err := k.file.root.edit(ctx, k.file.path, write, 0o644, func(cur []byte) ([]byte, error) {
		next, err := k.edited(k.file.parsed(cur), target)
		if err != nil || next == nil || (cur == nil && !target.Present) {
			return cur, err
		}
		return next.Bytes(), nil
	})
	if err != nil {
		return ConfigKeyState{}, err
	}
	out := ConfigKeyState{Path: res.name, Section: k.Section, Key: k.Key, Present: target.Present, Diff: res.diff}
	if target.Present {
		out.Value = target.Value
	}
	if res.changed() && k.file.Reboot {
		out.RebootRequired = true
		if write {
			k.file.notePending(k.ID())
		}
		// A dry run reports the reboot the change would need, too.
		verb := "set in"
		if !target.Present {
			verb = "removed from"
		}
		converge.RequireAction(ctx, converge.ActionReboot, fmt.Sprintf("%s %s %s", k.describe(), verb, res.name))
	}
	return out, nil
}

// edited returns doc changed to reach target, or nil when doc is there
// already. doc is not modified. A single-valued key held more than once in
// the section is a *RepeatedKeyError: changing one entry would leave the
// others, and removing all would touch lines that are not the item's.
// New lines go after the lines of the items the file handed out before
// this one and before those of the items after it, so independent edits
// give the same bytes in any order.
func (k *ConfigKey) edited(doc *ConfigDoc, target ConfigKeyState) (*ConfigDoc, error) {
	if present, value := k.observe(doc); present == target.Present && (!present || value == target.Value) {
		return nil, nil
	}
	if !k.Repeated {
		if lines := doc.LineNumbers(k.Section, k.Key); len(lines) > 1 {
			return nil, &RepeatedKeyError{Path: k.file.Path(), Section: k.Section, Key: k.Key, Lines: lines}
		}
	}
	doc = doc.Clone()
	o := k.file.order(k.seq)
	switch {
	case target.Present && k.Repeated:
		doc.add(k.Section, k.Key, k.Value, o)
	case target.Present:
		doc.set(k.Section, k.Key, target.Value, o)
	case k.Repeated:
		doc.DeleteEntry(k.Section, k.Key, k.Value)
	default:
		doc.Delete(k.Section, k.Key)
	}
	return doc, nil
}

// describe names the key for messages: "[pi4] arm_boost=1".
func (k *ConfigKey) describe() string {
	s := k.Key + "=" + k.Value
	if k.Section != "" {
		s = "[" + k.Section + "] " + s
	}
	return s
}
