package hostcfg

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
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
// Within one walk (converge.CurrentWalk) its items look at the file once:
// the first item's discovery checks it (one stat while it is unchanged,
// a read when it changed), the others use what it saw, and an item that
// writes the file makes the items after it look again. So a walk sees a
// change another program makes to the file mid-walk only in the items
// that look after the change, or else in the next walk, the same as it
// sees a change to any other item between its discovery and its Apply;
// Apply itself always edits the file as it is on disk.
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

	// name and nameErr are the canonical form of path, or why it has none.
	name    string
	nameErr error

	mu  sync.Mutex
	raw []byte
	doc *ConfigDoc
	// index holds the entries of doc by section and key for StateCurrent;
	// built the first time a read is served from the cache. A new version
	// of the document gets a new index: its address names the version.
	index *docIndex
	// next numbers the items handed out; keys, entries and sections
	// record the first number of the Key items of each (section, key), of
	// the Entry items of each (section, key, value) and of the items of
	// each section, for the order of new lines.
	next     int
	keys     map[[2]string]int
	entries  map[[3]string]int
	sections map[string]int
	// pending holds the items whose Apply changed the file (Reboot set);
	// anyPending says whether it holds any, without the lock.
	pending    map[converge.ID]bool
	anyPending atomic.Bool
	// snap identifies the file version raw was read from, so that items
	// can skip reading it again (see current).
	snap fileSnap
	// seen is what the item that last looked at the file saw, and in which
	// walk: the other items of that walk take it without a stat or a lock.
	// A write through the file clears it.
	seen atomic.Pointer[fileLook]
	// writes counts the writes through the file (forget): a look that a
	// write overlapped is not taken by the items after it, since it may
	// have seen the version before the write.
	writes atomic.Uint64
	// lookMu is held by the item that looks at the file for its walk.
	lookMu sync.Mutex
}

// fileLook is what one look at the file saw in a walk: the index of the
// version it found and the number of leftover temporary files next to it.
type fileLook struct {
	walk      converge.WalkID
	writes    uint64 // ConfigFile.writes when the look started
	idx       *docIndex
	leftovers int
}

// fileStamp is what a stat tells of a version of a file: its device and
// inode, its size, and its modification and change times in nanoseconds
// since the epoch. The change time is the kernel's: nothing can set it,
// and any change of the file (a write, a truncation, a change of mode or
// owner, a link) moves it on.
type fileStamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime int64
}

// fileSnap identifies the version of a file that was read.
type fileSnap struct {
	rel   string
	stamp fileStamp
	// direct is set when rel is the item path itself and was read without
	// meeting a symbolic link: then stampBeneath can check it alone.
	direct bool
	// settled is set when the version's timestamps were safely older than
	// the read (see settled): only then may an equal stamp stand for it.
	settled bool
}

// timeNow is time.Now, replaceable in tests.
var timeNow = time.Now

const (
	// racyWindowCoarse is how long after a file's last change its stat is
	// not trusted to reveal a further change when its file system keeps
	// coarse timestamps: larger than the granularity of the file systems
	// that hold boot configuration (FAT keeps modification times to 2
	// seconds and, in Linux, change times with them; exFAT to 10 ms; ext4
	// with small inodes to 1 second).
	racyWindowCoarse = 3 * time.Second
	// racyWindowFine is the window for file systems whose change times
	// have digits below the millisecond (ext4, xfs, btrfs, tmpfs, NTFS):
	// the kernel stamps a change with its coarse clock, which lags the
	// time.Now of the same host by at most a few timer ticks (it takes the
	// update of a stalled clock over after 5 ticks; a tick is 10 ms at
	// most), so a later change cannot carry the same change time once
	// this much has passed.
	racyWindowFine = 100 * time.Millisecond
)

// racyWindow returns the window for a file whose change time is ctime
// (nanoseconds since the epoch). A file system keeps its timestamps to a
// granularity that divides them: one with a change time that is not a
// whole number of milliseconds keeps them finer than that, while one with
// a whole number may be as coarse as FAT (or hit a whole millisecond by
// chance, one time in a million: the longer window is then merely slow).
func racyWindow(ctime int64) time.Duration {
	if ctime%int64(time.Millisecond) != 0 {
		return racyWindowFine
	}
	return racyWindowCoarse
}

// settled reports whether a version of a file with stamp st, read at
// readAt (taken before the file was opened), can be told from any later
// version by its stamp alone: its modification and change times must be
// older than the read by more than the racy window, as in git's check for
// racily clean files. Otherwise a change made just after the read (in the
// same timestamp granule) could carry the same stamp.
func settled(st fileStamp, readAt time.Time) bool {
	w := int64(racyWindow(st.ctime))
	at := readAt.UnixNano()
	return at-st.mtime > w && at-st.ctime > w
}

// trusted reports whether a file at rel whose stamp is now st is still the
// version snap was read from: the same path, an equal stamp, and a
// version that was settled when it was read.
func (s fileSnap) trusted(rel string, st fileStamp) bool {
	return s.settled && s.rel == rel && s.stamp == st
}

// NewConfigFile returns the configuration file at path inside root, marked
// as boot configuration (Reboot set).
func NewConfigFile(root *Root, path string) *ConfigFile {
	name, err := cleanPath(path)
	return &ConfigFile{root: root, path: path, name: name, nameErr: err, Reboot: true}
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
	k.remember()
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
	c.anyPending.Store(true)
}

// rebootPending reports whether the item id changed boot configuration in
// this process.
func (c *ConfigFile) rebootPending(k *ConfigKey) bool {
	if !c.anyPending.Load() {
		return false
	}
	id := k.ID()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending[id]
}

// Path returns the file's canonical path.
func (c *ConfigFile) Path() string {
	if c.nameErr != nil {
		return c.path
	}
	return c.name
}

// parsed returns the document for content, reusing the last parse when
// the bytes did not change. The result must not be modified.
func (c *ConfigFile) parsed(content []byte) *ConfigDoc {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parsedLocked(content)
}

func (c *ConfigFile) parsedLocked(content []byte) *ConfigDoc {
	if c.doc != nil && bytes.Equal(c.raw, content) {
		return c.doc
	}
	c.raw = append([]byte(nil), content...)
	c.doc = ParseConfig(c.raw)
	c.index = nil
	return c.doc
}

// docIndex holds the values of the entries of a document by section and
// key, in the order of the file. It is never modified once built, so its
// address stands for the version of the document it indexes.
type docIndex struct {
	values map[[2]string][]string
}

// newDocIndex indexes the entries of doc.
func newDocIndex(doc *ConfigDoc) *docIndex {
	idx := &docIndex{values: map[[2]string][]string{}}
	for _, l := range doc.lines {
		if l.kind == lineEntry {
			k := [2]string{l.section, l.key}
			idx.values[k] = append(idx.values[k], l.value)
		}
	}
	return idx
}

// indexLocked returns the index of c.doc, building it when needed.
func (c *ConfigFile) indexLocked() *docIndex {
	if c.index == nil {
		c.index = newDocIndex(c.doc)
	}
	return c.index
}

// current returns the entries of the file by section and key for
// StateCurrent, with the file's canonical name and the number of leftover
// temporary files next to it. When a stat of the file shows the very
// version read last (see fileSnap.trusted), the shared document is used
// without reading the file again: so the items of one file read it about
// once per change, and otherwise cost one stat each. The index must not
// be modified.
func (c *ConfigFile) current(ctx context.Context) (name string, idx *docIndex, leftovers int, err error) {
	if c.nameErr != nil {
		return "", nil, 0, c.nameErr
	}
	name = c.name
	if c.root == nil || c.root.r == nil {
		return "", nil, 0, &ItemError{Item: name, Reason: "Root is nil"}
	}
	walk, inWalk := converge.CurrentWalk(ctx)
	if inWalk {
		if idx, leftovers, ok := c.seenIn(walk); ok {
			return name, idx, leftovers, nil
		}
		// One item of a walk looks at the file; the others of the same
		// walk wait for it and take what it saw.
		c.lookMu.Lock()
		defer c.lookMu.Unlock()
		if idx, leftovers, ok := c.seenIn(walk); ok {
			return name, idx, leftovers, nil
		}
	}
	writes := c.writes.Load()
	c.mu.Lock()
	snap, cached := c.snap, c.doc != nil
	c.mu.Unlock()
	defer func() {
		if err == nil && inWalk {
			c.seen.Store(&fileLook{walk: walk, writes: writes, idx: idx, leftovers: leftovers})
		}
	}()
	if cached && snap.settled {
		// Fast path: the version read came straight from the item path;
		// one confined stat of that path tells whether it is still there.
		if snap.direct {
			if st, ok := c.root.stampBeneath(snap.rel); ok {
				c.root.hookStamp(&st)
				if idx = c.trustedIndex(snap.rel, st); idx != nil {
					return name, idx, c.root.leftoverCount(snap.rel), nil
				}
			}
		} else {
			rel, seen, err := c.root.resolveInfo(name, true)
			if err != nil {
				return "", nil, 0, err
			}
			if seen != nil && seen.Mode().IsRegular() {
				if st, ok := stampOf(seen); ok {
					c.root.hookStamp(&st)
					if idx = c.trustedIndex(rel, st); idx != nil {
						return name, idx, c.root.leftoverCount(rel), nil
					}
				}
			}
		}
	}
	readAt := timeNow()
	name, rel, fi, err := c.root.readResolved(c.path)
	if err != nil {
		return "", nil, 0, err
	}
	c.mu.Lock()
	c.parsedLocked(fi.content)
	idx = c.indexLocked()
	c.snap = fileSnap{}
	if fi.exists && fi.stat != nil {
		if st, ok := stampOf(fi.stat); ok {
			c.root.hookStamp(&st)
			c.snap = fileSnap{rel: rel, stamp: st, direct: rel == name[1:] && !strings.Contains(name, "/.."), settled: settled(st, readAt)}
		}
	}
	c.mu.Unlock()
	return name, idx, c.root.leftoverCount(rel), nil
}

// hookStamp passes st through the test hook of the root, if any.
func (r *Root) hookStamp(st *fileStamp) {
	if r.stampHook != nil {
		r.stampHook(st)
	}
}

// trustedIndex returns the index of the cached document when the snapshot
// still stands for the file at rel whose stamp is st, nil otherwise.
func (c *ConfigFile) trustedIndex(rel string, st fileStamp) *docIndex {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.doc == nil || !c.snap.trusted(rel, st) {
		return nil
	}
	return c.indexLocked()
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

// forget makes the next look at the file, in this walk or the next, check
// it again, and drops the looks in flight: the caller is about to write
// it, or has just written it.
func (c *ConfigFile) forget() {
	c.writes.Add(1)
	c.seen.Store(nil)
}

// seenIn returns what an item of walk saw of the file, if one looked.
func (c *ConfigFile) seenIn(walk converge.WalkID) (idx *docIndex, leftovers int, ok bool) {
	l := c.seen.Load()
	if l == nil || l.walk != walk || l.writes != c.writes.Load() {
		return nil, 0, false
	}
	return l.idx, l.leftovers, true
}
