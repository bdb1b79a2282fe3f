package boltstore

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// The page layout of a bbolt file (format version 2 of bbolt, in the
// machine's byte order), as far as checkFile needs it. bbolt reads its
// pages through a memory map without bounds checks, and rebuilds its free
// list at open in a goroutine of its own, where a damaged page panics or
// faults beyond any recover. checkFile reads the file with plain reads
// first and refuses what bbolt could not read safely.
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	pageHeaderSize   = 16 // id u64, flags u16, count u16, overflow u32
	elementSize      = 16 // branch: pos u32, ksize u32, pgid u64; leaf: flags u32, pos u32, ksize u32, vsize u32
	bucketHeaderSize = 16 // root pgid u64, sequence u64
	metaChecked      = 56 // the meta bytes its checksum covers
	metaSize         = metaChecked + 8

	pageBranch   = 0x01
	pageLeaf     = 0x02
	pageFreelist = 0x10
	leafBucket   = 0x01

	noFreelist = ^uint64(0)
)

var ne = binary.NativeEndian

// errDamaged is the detail of an ErrCorrupt found in the file's pages.
type errDamaged struct{ msg string }

func (e *errDamaged) Error() string { return e.msg }

func damaged(format string, args ...any) error {
	return &errDamaged{msg: fmt.Sprintf(format, args...)}
}

// fileMeta is one of the two meta pages.
type fileMeta struct {
	magic, version, pageSize uint32
	root, freelist, hwm      uint64
	txid                     uint64
	valid                    bool
}

func parseMeta(b []byte) fileMeta {
	if len(b) < pageHeaderSize+metaSize {
		return fileMeta{}
	}
	d := b[pageHeaderSize:]
	m := fileMeta{
		magic:    ne.Uint32(d[0:]),
		version:  ne.Uint32(d[4:]),
		pageSize: ne.Uint32(d[8:]),
		root:     ne.Uint64(d[16:]),
		freelist: ne.Uint64(d[32:]),
		hwm:      ne.Uint64(d[40:]),
		txid:     ne.Uint64(d[48:]),
	}
	h := fnv.New64a()
	_, _ = h.Write(d[:metaChecked])
	m.valid = m.magic == boltMagic && m.version == boltVersion && h.Sum64() == ne.Uint64(d[metaChecked:])
	return m
}

// checkFile checks the bbolt file f of size bytes (more than zero) the way
// bbolt will read it at open: the meta page bbolt will pick, every page
// reachable from it (in the file, below the high water mark, of the right
// kind, referenced once, its elements inside it, its keys in order), the
// bucket headers, and the free list page. It returns an error matching
// ErrNotStore when no meta page is a bbolt one, and an *errDamaged for a
// bbolt file that bbolt cannot read safely. It never panics: every read is
// a bounds-checked read of a copy.
func checkFile(f io.ReaderAt, size int64) error {
	head := make([]byte, 0x1000)
	n, _ := f.ReadAt(head, 0)
	head = head[:n]
	m0 := parseMeta(head)
	ps := int64(0)
	if m0.valid {
		ps = int64(m0.pageSize)
	} else {
		// As bbolt does: look for the second meta page at every page size.
		for i := 0; i <= 14 && ps == 0; i++ {
			pos := int64(1024) << i
			if pos >= size-1024 {
				break
			}
			buf := make([]byte, 0x1000)
			n, _ := f.ReadAt(buf, pos)
			if m := parseMeta(buf[:n]); m.valid {
				ps = int64(m.pageSize)
			}
		}
	}
	if ps == 0 {
		if m0.magic == boltMagic {
			return damaged("both meta pages are damaged")
		}
		if ps, id, ok := boltPagesFollow(f, size); ok {
			return damaged("both meta pages are damaged (page %d is a bbolt page of %d bytes)", id, ps)
		}
		return fmt.Errorf("%w: no bbolt meta page", ErrNotStore)
	}
	if ps < 1024 || ps > 1<<24 || ps&(ps-1) != 0 {
		return damaged("page size %d", ps)
	}
	if size < 2*ps {
		return damaged("file of %d bytes is shorter than its two meta pages (page size %d)", size, ps)
	}
	c := &checker{f: f, size: size, ps: ps}
	metas := [2]fileMeta{}
	for i := range metas {
		b, err := c.read(int64(i)*ps, pageHeaderSize+metaSize)
		if err != nil {
			return err
		}
		// Valid as bbolt judges it (magic, version, checksum), or bbolt
		// and this check would pick different pages.
		metas[i] = parseMeta(b)
	}
	// bbolt uses the meta page with the higher transaction ID when it is
	// valid, and the other one otherwise.
	a, b := metas[0], metas[1]
	if b.txid > a.txid {
		a, b = b, a
	}
	m := a
	if !m.valid {
		m = b
	}
	if !m.valid {
		return damaged("both meta pages are damaged")
	}
	if int64(m.pageSize) != ps {
		return damaged("meta pages disagree on the page size (%d, %d)", ps, m.pageSize)
	}
	if m.hwm < 3 || uint64(size)/uint64(ps) < m.hwm {
		return damaged("file of %d bytes is shorter than its %d pages of %d bytes (truncated)", size, m.hwm, ps)
	}
	c.hwm = m.hwm
	c.seen = make([]uint64, (m.hwm+63)/64)
	c.seen[0] |= 3 // the meta pages
	if m.freelist != noFreelist {
		if m.freelist < 2 || m.freelist >= m.hwm {
			return damaged("free list page %d out of range", m.freelist)
		}
	}
	if _, err := c.tree(m.root, nil, nil, 0); err != nil {
		return err
	}
	if m.freelist != noFreelist {
		return c.freelist(m.freelist)
	}
	return nil
}

// scanPages bounds the pages boltPagesFollow looks at, per page size.
const scanPages = 64

// boltPagesFollow tells a bbolt file whose two meta pages are destroyed
// (zeroed, overwritten) from a file that never was one. It reports the
// first page size ps (a power of two from 1 KiB to 64 KiB that divides
// the file's size, which is at least four pages) at which one of the
// first scanPages pages after the meta pages starts with a bbolt page
// header: its own page number as the page ID, no overflow past the end
// of the file, and a kind bbolt writes (branch, leaf or free list). bbolt
// writes every page whole at the offset of its ID, so a store file that
// lost only its first pages still shows such headers; another program's
// file would need eight bytes holding their own offset divided by a
// power of two, followed by one of three small flag values, at a page
// boundary. The rule errs towards "not a store": a file this returns
// false for is left alone even with Options.OnCorrupt.
func boltPagesFollow(f io.ReaderAt, size int64) (ps int64, id uint64, ok bool) {
	hdr := make([]byte, pageHeaderSize)
	for ps = 1024; ps <= 64<<10; ps <<= 1 {
		if size%ps != 0 || size < 4*ps {
			continue
		}
		pages := uint64(size / ps)
		for id = 2; id < pages && id < 2+scanPages; id++ {
			if n, _ := f.ReadAt(hdr, int64(id)*ps); n < len(hdr) {
				break
			}
			flags := ne.Uint16(hdr[8:])
			overflow := uint64(ne.Uint32(hdr[12:]))
			kindOK := flags == pageBranch || flags == pageLeaf || flags == pageFreelist
			if ne.Uint64(hdr) == id && kindOK && id+overflow < pages {
				return ps, id, true
			}
		}
	}
	return 0, 0, false
}

// checker walks the pages of one file.
type checker struct {
	f    io.ReaderAt
	size int64
	ps   int64
	hwm  uint64
	seen []uint64 // bit per page: reached once already
}

// maxDepth bounds the nesting of pages and buckets; a real tree of 4 KiB
// pages is a handful of levels deep.
const maxDepth = 64

func (c *checker) read(off, n int64) ([]byte, error) {
	if off < 0 || n < 0 || off+n > c.size {
		return nil, damaged("%d bytes at offset %d are past the end of the file (%d bytes)", n, off, c.size)
	}
	b := make([]byte, n)
	if _, err := c.f.ReadAt(b, off); err != nil {
		return nil, fmt.Errorf("read %d bytes at offset %d: %w", n, off, err)
	}
	return b, nil
}

// page reads page id with its overflow pages, checking that it is a
// branch or leaf page, in range, not reached before.
func (c *checker) page(id uint64) ([]byte, error) {
	if id < 2 || id >= c.hwm {
		return nil, damaged("page %d is out of range [2, %d)", id, c.hwm)
	}
	b, err := c.read(int64(id)*c.ps, c.ps)
	if err != nil {
		return nil, err
	}
	if got := ne.Uint64(b); got != id {
		return nil, damaged("page %d says it is page %d", id, got)
	}
	flags := ne.Uint16(b[8:])
	if flags != pageBranch && flags != pageLeaf {
		return nil, damaged("page %d has type %#x, not a branch or leaf page", id, flags)
	}
	over := uint64(ne.Uint32(b[12:]))
	if id+over >= c.hwm {
		return nil, damaged("page %d overflows past the high water mark %d", id, c.hwm)
	}
	for p := id; p <= id+over; p++ {
		if c.seen[p/64]&(1<<(p%64)) != 0 {
			return nil, damaged("page %d is referenced twice", p)
		}
		c.seen[p/64] |= 1 << (p % 64)
	}
	if over > 0 {
		full, err := c.read(int64(id)*c.ps, int64(over+1)*c.ps)
		if err != nil {
			return nil, err
		}
		b = full
	}
	return b, nil
}

// element returns the key (and value, for a leaf) of element i of page p,
// checking that they lie inside p.
func element(p []byte, i int, leaf bool) (flags uint32, key, value []byte, child uint64, err error) {
	at := pageHeaderSize + i*elementSize
	e := p[at : at+elementSize]
	var pos, ksize, vsize uint64
	if leaf {
		flags = ne.Uint32(e[0:])
		pos, ksize, vsize = uint64(ne.Uint32(e[4:])), uint64(ne.Uint32(e[8:])), uint64(ne.Uint32(e[12:]))
	} else {
		pos, ksize = uint64(ne.Uint32(e[0:])), uint64(ne.Uint32(e[4:]))
		child = ne.Uint64(e[8:])
	}
	start := uint64(at) + pos
	end := start + ksize + vsize
	if pos < elementSize || end > uint64(len(p)) {
		return 0, nil, nil, 0, damaged("element %d reaches past its page", i)
	}
	if ksize == 0 {
		return 0, nil, nil, 0, damaged("element %d has an empty key", i)
	}
	return flags, p[start : start+ksize : len(p)], p[start+ksize : end : end], child, nil
}

// tree checks the subtree rooted at page id, whose keys must lie in
// [lo, hi) (nil: unbounded), and returns its greatest key (nil when it
// has none). Its key order rules are bbolt's own (tx_check.go), which
// bbolt enforces at open by panicking.
func (c *checker) tree(id uint64, lo, hi []byte, depth int) ([]byte, error) {
	if depth > maxDepth {
		return nil, damaged("pages nested deeper than %d", maxDepth)
	}
	p, err := c.page(id)
	if err != nil {
		return nil, err
	}
	return c.elements(id, p, lo, hi, depth)
}

// elements checks the elements of page p (its id for messages; 0 for an
// inline bucket's page).
func (c *checker) elements(id uint64, p []byte, lo, hi []byte, depth int) ([]byte, error) {
	flags, count := ne.Uint16(p[8:]), int(ne.Uint16(p[10:]))
	leaf := flags == pageLeaf
	if pageHeaderSize+count*elementSize > len(p) {
		return nil, damaged("page %d: %d elements do not fit", id, count)
	}
	if !leaf && count == 0 {
		return nil, damaged("page %d: branch page without elements", id)
	}
	if count == 0 {
		// bbolt writes an empty leaf from a zeroed buffer (an inline one
		// as a bare header): anything after the header means entries
		// whose count was lost.
		if id == 0 && len(p) != pageHeaderSize {
			return nil, damaged("inline bucket: %d bytes after a header of no elements", len(p)-pageHeaderSize)
		}
		if bytes.IndexFunc(p[pageHeaderSize:], func(r rune) bool { return r != 0 }) >= 0 {
			return nil, damaged("page %d: data after a header of no elements", id)
		}
	}
	var maxKey []byte
	running := lo
	// bbolt writes the keys and values of a page one after the other,
	// right after the element headers: a count, position or size that
	// changed on the disk breaks that chain, even where what it now
	// points at would be in bounds and in order.
	next := pageHeaderSize + count*elementSize
	for i := range count {
		eflags, key, value, child, err := element(p, i, leaf)
		if err != nil {
			return nil, damaged("page %d: %v", id, err)
		}
		if start := len(p) - cap(key); start != next {
			return nil, damaged("page %d: element %d starts at %d, not right after the one before (%d)", id, i, start, next)
		}
		next += len(key) + len(value)
		if (i == 0 && running != nil && bytes.Compare(running, key) > 0) ||
			(i > 0 && bytes.Compare(running, key) >= 0) ||
			(hi != nil && bytes.Compare(key, hi) >= 0) {
			return nil, damaged("page %d: key %d out of order", id, i)
		}
		if !leaf {
			next := hi
			if i < count-1 {
				_, nk, _, _, err := element(p, i+1, false)
				if err != nil {
					return nil, damaged("page %d: %v", id, err)
				}
				next = nk
			}
			sub, err := c.tree(child, key, next, depth+1)
			if err != nil {
				return nil, err
			}
			maxKey = sub
			running = sub
			continue
		}
		if eflags&^leafBucket != 0 {
			return nil, damaged("page %d: element %d has flags %#x", id, i, eflags)
		}
		if eflags&leafBucket != 0 {
			if err := c.bucket(value, depth+1); err != nil {
				return nil, err
			}
		}
		running, maxKey = key, key
	}
	return maxKey, nil
}

// bucket checks a bucket header and its tree (or inline page).
func (c *checker) bucket(v []byte, depth int) error {
	if depth > maxDepth {
		return damaged("buckets nested deeper than %d", maxDepth)
	}
	if len(v) < bucketHeaderSize {
		return damaged("bucket header of %d bytes", len(v))
	}
	root := ne.Uint64(v)
	if root != 0 {
		if len(v) != bucketHeaderSize {
			return damaged("bucket header of %d bytes", len(v))
		}
		_, err := c.tree(root, nil, nil, depth)
		return err
	}
	p := v[bucketHeaderSize:]
	if len(p) < pageHeaderSize || ne.Uint16(p[8:]) != pageLeaf {
		return damaged("inline bucket without a leaf page")
	}
	// An inline bucket holds no buckets (bbolt inlines only those).
	count := int(ne.Uint16(p[10:]))
	if pageHeaderSize+count*elementSize > len(p) {
		return damaged("inline bucket: %d elements do not fit", count)
	}
	for i := range count {
		f, _, _, _, err := element(p, i, true)
		if err != nil {
			return damaged("inline bucket: %v", err)
		}
		if f != 0 {
			return damaged("inline bucket: element %d has flags %#x", i, f)
		}
	}
	_, err := c.elements(0, p, nil, nil, depth)
	return err
}

// freelist checks the free list page id: its page IDs are in range,
// sorted or not, each once, and none is a page in use.
func (c *checker) freelist(id uint64) error {
	b, err := c.read(int64(id)*c.ps, c.ps)
	if err != nil {
		return err
	}
	if ne.Uint64(b) != id || ne.Uint16(b[8:]) != pageFreelist {
		return damaged("page %d is not a free list page", id)
	}
	over := uint64(ne.Uint32(b[12:]))
	if id+over >= c.hwm {
		return damaged("free list page %d overflows past the high water mark %d", id, c.hwm)
	}
	for p := id; p <= id+over; p++ {
		if c.seen[p/64]&(1<<(p%64)) != 0 {
			return damaged("free list page %d is also in use", p)
		}
	}
	if over > 0 {
		if b, err = c.read(int64(id)*c.ps, int64(over+1)*c.ps); err != nil {
			return err
		}
	}
	idx, count := uint64(0), uint64(ne.Uint16(b[10:]))
	if count == 0xFFFF {
		idx, count = 1, ne.Uint64(b[pageHeaderSize:])
	}
	if count > uint64(len(b)) || pageHeaderSize+(idx+count)*8 > uint64(len(b)) {
		return damaged("free list page %d: %d entries do not fit", id, count)
	}
	free := make(map[uint64]bool, count)
	for i := idx; i < idx+count; i++ {
		p := ne.Uint64(b[pageHeaderSize+i*8:])
		switch {
		case p < 2 || p >= c.hwm:
			return damaged("free list page %d: page %d out of range", id, p)
		case free[p]:
			return damaged("free list page %d: page %d freed twice", id, p)
		case c.seen[p/64]&(1<<(p%64)) != 0 || (p >= id && p <= id+over):
			return damaged("free list page %d: page %d is in use", id, p)
		}
		free[p] = true
	}
	return nil
}

// checkPath runs checkFile on the file at path. A file that does not
// exist or is empty passes: Open makes a new store of it.
func checkPath(path string) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Size() == 0 {
		return nil
	}
	return checkFile(f, fi.Size())
}
