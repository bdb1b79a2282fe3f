package hostcfg

import (
	"bytes"
	"context"
	"io/fs"
	"sync"
	"time"

	"github.com/convergekit/converge"
)

// ConfigFile is a key=value configuration file, such as a Raspberry Pi
// /boot/firmware/config.txt, that hands out one ConfigKey item per managed
// key. Its items share the file: each edit re-reads it under a per-file
// lock and changes only its own line, so items of one file never overwrite
// each other, and the parsed document is shared between them (the file is
// parsed again only when its bytes changed). The lines its items add land
// in the order the ConfigFile handed the items out (Key, Entry, Import),
// whatever order a walk applies them in; see the package doc for the
// details and limits.
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
	// next numbers the items handed out; keys, entries and sections
	// record the first number of the Key items of each (section, key), of
	// the Entry items of each (section, key, value) and of the items of
	// each section, for the order of new lines.
	next     int
	keys     map[[2]string]int
	entries  map[[3]string]int
	sections map[string]int
	// pending holds the items whose Apply changed the file (Reboot set).
	pending map[converge.ID]bool
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

// register numbers an item handed out by the file.
func (c *ConfigFile) register(k *ConfigKey) *ConfigKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.keys == nil {
		c.keys, c.entries, c.sections = map[[2]string]int{}, map[[3]string]int{}, map[string]int{}
	}
	k.seq = c.next
	c.next++
	if _, ok := c.sections[k.Section]; !ok {
		c.sections[k.Section] = k.seq
	}
	if k.Repeated {
		e := [3]string{k.Section, k.Key, k.Value}
		if _, ok := c.entries[e]; !ok {
			c.entries[e] = k.seq
		}
	} else if _, ok := c.keys[[2]string{k.Section, k.Key}]; !ok {
		c.keys[[2]string{k.Section, k.Key}] = k.seq
	}
	return k
}

// order returns the placement of the new lines of the item numbered seq
// among the lines of the file's other items (see ConfigDoc.insertOrdered).
func (c *ConfigFile) order(seq int) *lineOrder {
	return &lineOrder{
		seq: seq,
		line: func(l docLine) (int, bool) {
			c.mu.Lock()
			defer c.mu.Unlock()
			n, ok := c.entries[[3]string{l.section, l.key, l.value}]
			if m, kok := c.keys[[2]string{l.section, l.key}]; kok && (!ok || m < n) {
				n, ok = m, true
			}
			return n, ok
		},
		section: func(s string) (int, bool) {
			c.mu.Lock()
			defer c.mu.Unlock()
			n, ok := c.sections[s]
			return n, ok
		},
	}
}

// notePending records that the item id changed boot configuration.
func (c *ConfigFile) notePending(id converge.ID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pending == nil {
		c.pending = map[converge.ID]bool{}
	}
	c.pending[id] = true
}

// rebootPending reports whether the item id changed boot configuration in
// this process.
func (c *ConfigFile) rebootPending(id converge.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending[id]
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
// per single-valued key and section, and one Entry item per entry of a
// repeatable key (dtoverlay, dtparam, gpio) or of a key the section holds
// more than once. Applying them to the file unchanged changes no byte, and
// a file rebuilt from them (after it was lost) has their lines in the
// file's order, whatever order the walk applies them in: a dtparam stays
// behind the dtoverlay it configures. Identical entries of one section
// are one item, so a rebuild keeps only the first of them.
func (c *ConfigFile) Import(ctx context.Context) ([]*ConfigKey, error) {
	entries, err := c.Entries(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]*ConfigKey, 0, len(entries))
	for _, e := range entries {
		if e.Repeated {
			out = append(out, c.Entry(e.Section, e.Key, e.Value))
		} else {
			out = append(out, c.Key(e.Section, e.Key, e.Value))
		}
	}
	return out, nil
}

// AddConfigKeys adds items (for example from Import) to g as Present,
// each depending on deps. Every entry of a repeatable key also depends on
// the entry of the same file, section and key before it in items. The
// order of the lines does not rest on these dependencies: items of one
// ConfigFile add their lines in the order the file handed them out.
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
