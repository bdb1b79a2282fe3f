package hostcfg

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"time"

	"github.com/convergekit/converge"
)

// ConfigFile is a key=value configuration file, such as a Raspberry Pi
// /boot/firmware/config.txt, that hands out one ConfigKey item per managed
// key. Its items share the file: each edit re-reads it under a per-file
// lock and changes only its own line, so items of one file never overwrite
// each other, and the parsed document is shared between them (the file is
// parsed again only when its bytes changed).
//
// A ConfigFile is safe for concurrent use. Make one with NewConfigFile.
type ConfigFile struct {
	root *Root
	path string
	// Reboot says that a change of the file takes effect only after a
	// reboot (boot configuration). NewConfigFile sets it; clear it for
	// other key=value files before the first walk. Items of a file with
	// Reboot call converge.RequireAction(ctx, converge.ActionReboot, ...)
	// when Apply changed the file, and set RebootRequired in the state
	// they return.
	Reboot bool

	mu  sync.Mutex
	raw []byte
	doc *ConfigDoc
	// snap identifies the file version raw was read from, so that items
	// can skip reading it again (see current).
	snap fileSnap
}

// fileSnap identifies the version of a file that was read.
type fileSnap struct {
	rel          string
	dev, ino     uint64
	size         int64
	mtime, ctime time.Time
	readAt       time.Time
}

// timeNow is time.Now, replaceable in tests.
var timeNow = time.Now

// racyWindow is how long after a file's last change its stat is not
// trusted to reveal a further change: larger than the timestamp
// granularity of the file systems that hold boot configuration (FAT keeps
// modification times to 2 seconds).
const racyWindow = 3 * time.Second

// trusted reports whether a file whose lstat is fi is still the version
// snap was read from. The stat must match exactly, and the version must
// have been older than racyWindow when it was read, so that a change made
// after the read cannot carry the same timestamps.
func (s fileSnap) trusted(rel string, fi fs.FileInfo) bool {
	dev, ino, ctime, ok := statID(fi)
	return ok && s.rel == rel && s.dev == dev && s.ino == ino && s.size == fi.Size() &&
		s.mtime.Equal(fi.ModTime()) && s.ctime.Equal(ctime) &&
		s.readAt.Sub(fi.ModTime()) > racyWindow && s.readAt.Sub(ctime) > racyWindow
}

// NewConfigFile returns the configuration file at path inside root, marked
// as boot configuration (Reboot set).
func NewConfigFile(root *Root, path string) *ConfigFile {
	return &ConfigFile{root: root, path: path, Reboot: true}
}

// Path returns the file's canonical path.
func (c *ConfigFile) Path() string { return canonical(c.path) }

// parsed returns the document for content, reusing the last parse when
// the bytes did not change. The result must not be modified.
func (c *ConfigFile) parsed(content []byte) *ConfigDoc {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.doc != nil && bytes.Equal(c.raw, content) {
		return c.doc
	}
	c.raw = append([]byte(nil), content...)
	c.doc = ParseConfig(c.raw)
	return c.doc
}

// current returns the parsed file for StateCurrent. When the file's lstat
// shows the very version read last (see fileSnap.trusted), the shared
// document is returned without reading the file again; so the items of one
// file read it about once per walk, and not at all while it does not
// change. The document must not be modified.
func (c *ConfigFile) current() (name string, doc *ConfigDoc, leftovers int, err error) {
	name, err = cleanPath(c.path)
	if err != nil {
		return "", nil, 0, err
	}
	if c.root == nil || c.root.r == nil {
		return "", nil, 0, &ItemError{Item: name, Reason: "nil Root"}
	}
	rel, seen, err := c.root.resolveInfo(name, true)
	if err != nil {
		return "", nil, 0, err
	}
	if seen != nil && seen.Mode().IsRegular() {
		c.mu.Lock()
		if c.doc != nil && c.snap.trusted(rel, seen) {
			doc = c.doc
		}
		c.mu.Unlock()
		if doc != nil {
			return name, doc, len(c.root.leftovers(rel)), nil
		}
	}
	readAt := timeNow()
	name, rel, fi, err := c.root.readResolved(c.path)
	if err != nil {
		return "", nil, 0, err
	}
	doc = c.parsed(fi.content)
	if fi.exists && fi.stat != nil {
		dev, ino, ctime, ok := statID(fi.stat)
		if ok {
			c.mu.Lock()
			if c.doc == doc {
				c.snap = fileSnap{rel: rel, dev: dev, ino: ino, size: fi.stat.Size(), mtime: fi.stat.ModTime(), ctime: ctime, readAt: readAt}
			}
			c.mu.Unlock()
		}
	}
	return name, doc, len(c.root.leftovers(rel)), nil
}

// Document reads and parses the file. A missing file is an empty document.
func (c *ConfigFile) Document(ctx context.Context) (*ConfigDoc, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	_, content, _, _, err := c.root.peek(c.path)
	if err != nil {
		return nil, err
	}
	return c.parsed(content).Clone(), nil
}

// Entries returns the entries the file has now, in order, as the targets
// that keep them (see ConfigDoc.Entries).
func (c *ConfigFile) Entries(ctx context.Context) ([]ConfigEntry, error) {
	doc, err := c.Document(ctx)
	if err != nil {
		return nil, err
	}
	return doc.Entries(), nil
}

// Import turns the settings the file has now into items whose goal is to
// keep them, so that a first run keeps what the device had: one Key item
// per single-valued key and section, with its winning (last) value, and one
// Entry item per entry of a repeatable key (dtoverlay, dtparam, gpio). Add
// them to a graph with AddConfigKeys, which keeps the order of repeated
// entries.
func (c *ConfigFile) Import(ctx context.Context) ([]*ConfigKey, error) {
	entries, err := c.Entries(ctx)
	if err != nil {
		return nil, err
	}
	type sk struct{ s, k string }
	last := map[sk]string{}
	for _, e := range entries {
		if !e.Repeated {
			last[sk{e.Section, e.Key}] = e.Value
		}
	}
	var out []*ConfigKey
	seen := map[sk]bool{}
	for _, e := range entries {
		if e.Repeated {
			out = append(out, c.Entry(e.Section, e.Key, e.Value))
			continue
		}
		k := sk{e.Section, e.Key}
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, c.Key(e.Section, e.Key, last[k]))
	}
	return out, nil
}

// AddConfigKeys adds items (for example from Import) to g as Present,
// each depending on deps. Every entry of a repeatable key also depends on
// the entry of the same file, section and key before it in items, so that
// a file rebuilt from them (after it was lost) keeps their order, which
// matters for dtoverlay and dtparam.
func AddConfigKeys(g *converge.Graph, items []*ConfigKey, deps ...converge.ID) {
	type fsk struct{ file, section, key string }
	prev := map[fsk]converge.ID{}
	for _, it := range items {
		d := deps
		if it.Repeated {
			k := fsk{"", it.Section, it.Key}
			if it.file != nil {
				k.file = it.file.Path()
			}
			if p, ok := prev[k]; ok {
				d = append(append([]converge.ID(nil), deps...), p)
			}
			prev[k] = it.ID()
		}
		g.Add(it.Node(), converge.Present, d...)
	}
}

// Key returns an item for a single-valued key of section ("" or "all" for
// unconditional lines): Present gives the key value (rewriting the value of
// its last entry in the section, or adding a line), Absent removes every
// entry of the key in the section.
func (c *ConfigFile) Key(section, key, value string) *ConfigKey {
	return &ConfigKey{file: c, Section: normSection(section), Key: key, Value: value}
}

// Entry returns an item for one entry key=value of a key that may repeat
// (dtoverlay, dtparam, gpio): Present adds the line unless the section has
// it, Absent removes that exact entry, and other entries of the key are
// left alone.
func (c *ConfigFile) Entry(section, key, value string) *ConfigKey {
	return &ConfigKey{file: c, Section: normSection(section), Key: key, Value: value, Repeated: true}
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
	// RebootRequired is set on the state Apply or ApplyDry returns when
	// they changed (or would change) boot configuration.
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

// Node returns the item wrapped for a graph.
func (k *ConfigKey) Node() converge.Node { return converge.Wrap[ConfigKeyState](k) }

func (k *ConfigKey) validate() error {
	switch {
	case k.file == nil || k.file.root == nil:
		return &ItemError{Item: string(k.ID()), Reason: "no ConfigFile (use ConfigFile.Key or Entry)"}
	case k.Key == "" || strings.ContainsAny(k.Key, "=\r\n#;[") || strings.TrimSpace(k.Key) != k.Key:
		return &ItemError{Item: string(k.ID()), Reason: fmt.Sprintf("invalid key %q", k.Key)}
	case strings.ContainsAny(k.Value, "\r\n") || strings.TrimSpace(k.Value) != k.Value:
		return &ItemError{Item: string(k.ID()), Reason: fmt.Sprintf("invalid value %q", k.Value)}
	case strings.ContainsAny(k.Section, "[]\r\n"):
		return &ItemError{Item: string(k.ID()), Reason: fmt.Sprintf("invalid section %q", k.Section)}
	}
	return nil
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
func (k *ConfigKey) StateCurrent(context.Context, converge.Deps) (ConfigKeyState, error) {
	if err := k.validate(); err != nil {
		return ConfigKeyState{}, err
	}
	name, doc, leftovers, err := k.file.current()
	if err != nil {
		return ConfigKeyState{}, err
	}
	present, value := k.observe(doc)
	return ConfigKeyState{Path: name, Section: k.Section, Key: k.Key, Present: present, Value: value, Leftovers: leftovers}, nil
}

// StateGoal is the key with Value.
func (k *ConfigKey) StateGoal(context.Context, converge.Deps) (ConfigKeyState, error) {
	if err := k.validate(); err != nil {
		return ConfigKeyState{}, err
	}
	return ConfigKeyState{Path: k.file.Path(), Section: k.Section, Key: k.Key, Present: true, Value: k.Value}, nil
}

// StateClean is the key (or entry) absent.
func (k *ConfigKey) StateClean(context.Context, converge.Deps) (ConfigKeyState, error) {
	if err := k.validate(); err != nil {
		return ConfigKeyState{}, err
	}
	return ConfigKeyState{Path: k.file.Path(), Section: k.Section, Key: k.Key}, nil
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
	res, err := k.file.root.edit(ctx, k.file.path, write, 0o644, func(cur []byte) ([]byte, error) {
		doc := k.file.parsed(cur)
		if present, value := k.observe(doc); present == target.Present && (!present || value == target.Value) {
			return cur, nil
		}
		if cur == nil && !target.Present {
			return nil, nil
		}
		doc = doc.Clone()
		switch {
		case target.Present && k.Repeated:
			doc.Add(k.Section, k.Key, k.Value)
		case target.Present:
			doc.Set(k.Section, k.Key, target.Value)
		case k.Repeated:
			doc.DeleteEntry(k.Section, k.Key, k.Value)
		default:
			doc.Delete(k.Section, k.Key)
		}
		return doc.Bytes(), nil
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
		// A dry run reports the reboot the change would need, too.
		verb := "set in"
		if !target.Present {
			verb = "removed from"
		}
		converge.RequireAction(ctx, converge.ActionReboot, fmt.Sprintf("%s %s %s", k.describe(), verb, res.name))
	}
	return out, nil
}

// describe names the key for messages: "[pi4] arm_boost=1".
func (k *ConfigKey) describe() string {
	s := k.Key + "=" + k.Value
	if k.Section != "" {
		s = "[" + k.Section + "] " + s
	}
	return s
}
