package hostcfg

import "strings"

// ConfigDoc is a parsed key=value configuration file such as a Raspberry Pi
// config.txt or a sysctl.d file. It keeps every byte of the file: Bytes
// returns the input unchanged until an edit, and an edit rewrites only the
// lines it concerns.
//
// The format: one entry per line, "key=value" (spaces around "=" allowed and
// kept); lines starting with "#" or ";" are comments; "[filter]" lines open
// a conditional section that lasts until the next one ("[pi4]", "[all]",
// "[HDMI:0]"). Lines before the first filter and lines under "[all]" are
// unconditional and belong to section "" (asking for "all" means ""). Any
// other line (such as "initramfs initrd.img followkernel") is kept as it is.
// Keys may repeat (dtoverlay, dtparam, gpio): later entries come after
// earlier ones, and for a single-valued key the last one wins. A UTF-8
// byte-order mark at the start of the file is kept, and the first line
// behind it is read like any other.
//
// The zero value is an empty document. A ConfigDoc is not safe for
// concurrent use.
type ConfigDoc struct {
	lines []docLine
	nl    string // line terminator for new lines
	bom   bool   // the file starts with a UTF-8 byte-order mark
}

// utf8BOM is the UTF-8 byte-order mark.
const utf8BOM = "\ufeff"

type lineKind uint8

const (
	lineOther lineKind = iota
	lineBlank
	lineComment
	lineSection
	lineEntry
)

// docLine is one line with its terminator, as read.
type docLine struct {
	raw     string
	kind    lineKind
	section string // section the line belongs to ("" for unconditional)
	key     string
	value   string
	// vs and ve delimit the value inside raw, for entries.
	vs, ve int
}

// ConfigEntry is one key=value line of a configuration file.
type ConfigEntry struct {
	// Section is the filter the entry is under, "" for unconditional.
	Section string
	Key     string
	Value   string
	// Repeated is true when the key is meant to appear several times
	// (dtoverlay, dtparam, gpio; see IsRepeatable) or when the section
	// holds it more than once (its last value wins): such an entry is kept
	// with ConfigFile.Entry, not Key.
	Repeated bool
}

// ParseConfig parses a key=value configuration file. It never fails: lines
// it does not understand are kept verbatim.
func ParseConfig(data []byte) *ConfigDoc {
	d := &ConfigDoc{nl: "\n"}
	s := string(data)
	if rest, ok := strings.CutPrefix(s, utf8BOM); ok {
		d.bom, s = true, rest
	}
	if i := strings.IndexByte(s, '\n'); i > 0 && s[i-1] == '\r' {
		d.nl = "\r\n"
	}
	// One line per terminator, and one more unless the text ends with
	// one: the lines are allocated once.
	d.lines = make([]docLine, 0, strings.Count(s, "\n")+1)
	section := ""
	for len(s) > 0 {
		end := strings.IndexByte(s, '\n') + 1
		if end == 0 {
			end = len(s)
		}
		l := parseLine(s[:end], section)
		if l.kind == lineSection {
			section = l.section
		}
		d.lines = append(d.lines, l)
		s = s[end:]
	}
	return d
}

// normSection maps "all" to "" (both mean unconditional).
func normSection(s string) string {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "all") {
		return ""
	}
	return s
}

func parseLine(raw, section string) docLine {
	l := docLine{raw: raw, section: section}
	body := strings.TrimRight(raw, "\r\n")
	t := strings.TrimSpace(body)
	switch {
	case t == "":
		l.kind = lineBlank
	case t[0] == '#' || t[0] == ';':
		l.kind = lineComment
	case t[0] == '[' && t[len(t)-1] == ']':
		l.kind = lineSection
		l.section = normSection(t[1 : len(t)-1])
	default:
		eq := strings.IndexByte(body, '=')
		key := ""
		if eq > 0 {
			key = strings.TrimSpace(body[:eq])
		}
		if key == "" {
			l.kind = lineOther
			return l
		}
		l.kind = lineEntry
		l.key = key
		vs := eq + 1
		for vs < len(body) && isBlank(body[vs]) {
			vs++
		}
		ve := len(body)
		for ve > vs && isBlank(body[ve-1]) {
			ve--
		}
		l.vs, l.ve = vs, ve
		l.value = body[vs:ve]
	}
	return l
}

// isBlank reports whether c is a space, a tab or a carriage return: the
// bytes around a value that are not part of it.
func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

// Bytes returns the document as file content (never nil).
func (d *ConfigDoc) Bytes() []byte {
	n := len(utf8BOM)
	for _, l := range d.lines {
		n += len(l.raw)
	}
	b := make([]byte, 0, n)
	if d.bom {
		b = append(b, utf8BOM...)
	}
	for _, l := range d.lines {
		b = append(b, l.raw...)
	}
	return b
}

// Clone returns an independent copy of d.
func (d *ConfigDoc) Clone() *ConfigDoc {
	return &ConfigDoc{lines: append([]docLine(nil), d.lines...), nl: d.nl, bom: d.bom}
}

func (d *ConfigDoc) newline() string {
	if d.nl == "" {
		return "\n"
	}
	return d.nl
}

// Get returns the value of the last entry of key in section (the one that
// wins) and whether there is one.
func (d *ConfigDoc) Get(section, key string) (string, bool) {
	section = normSection(section)
	for i := len(d.lines) - 1; i >= 0; i-- {
		l := d.lines[i]
		if l.kind == lineEntry && l.section == section && l.key == key {
			return l.value, true
		}
	}
	return "", false
}

// Values returns the values of every entry of key in section, in order.
func (d *ConfigDoc) Values(section, key string) []string {
	section = normSection(section)
	var out []string
	for _, l := range d.lines {
		if l.kind == lineEntry && l.section == section && l.key == key {
			out = append(out, l.value)
		}
	}
	return out
}

// Has reports whether section holds an entry key=value.
func (d *ConfigDoc) Has(section, key, value string) bool {
	for _, v := range d.Values(section, key) {
		if v == value {
			return true
		}
	}
	return false
}

// Set gives key the value in section: the last entry of key there is
// rewritten in place (only its value changes; spacing is kept), or, when
// there is none, a new line is added (see Add). It reports whether the
// document changed.
func (d *ConfigDoc) Set(section, key, value string) bool {
	return d.set(normSection(section), key, value, nil)
}

func (d *ConfigDoc) set(section, key, value string, o *lineOrder) bool {
	for i := len(d.lines) - 1; i >= 0; i-- {
		l := &d.lines[i]
		if l.kind == lineEntry && l.section == section && l.key == key {
			if l.value == value {
				return false
			}
			body := strings.TrimRight(l.raw, "\r\n")
			term := l.raw[len(body):]
			*l = parseLine(body[:l.vs]+value+body[l.ve:]+term, section)
			return true
		}
	}
	d.insert(section, key+"="+value, o)
	return true
}

// Add appends an entry key=value to section unless the section already
// has it, and reports whether the document changed. The line goes after
// the last entry of the last block of that section (before the comments
// and blank lines that close it); a section that does not exist yet is
// opened at the end of the file ("[all]" for section "").
func (d *ConfigDoc) Add(section, key, value string) bool {
	return d.add(normSection(section), key, value, nil)
}

func (d *ConfigDoc) add(section, key, value string, o *lineOrder) bool {
	if d.Has(section, key, value) {
		return false
	}
	d.insert(section, key+"="+value, o)
	return true
}

// insert adds text as a new line at the end of section, or, with an
// order, where insertOrdered puts it.
func (d *ConfigDoc) insert(section, text string, o *lineOrder) {
	if o != nil {
		d.insertOrdered(section, text, o)
		return
	}
	nl := d.newline()
	l := parseLine(text+nl, section)
	at := d.insertPoint(section)
	if at < 0 {
		// No block of this section: open one at the end of the file.
		d.appendBlock(l, nil)
		return
	}
	d.insertAt(at, l)
}

// appendBlock opens a block for the line l at the end of the file, after
// a blank line unless the file ends with one or holds nothing else than
// lines that o manages (which may come and go).
func (d *ConfigDoc) appendBlock(l docLine, o *lineOrder) {
	nl := d.newline()
	d.terminateLast()
	if !d.endsBlank(len(d.lines), o) {
		d.lines = append(d.lines, parseLine(nl, d.lines[len(d.lines)-1].section))
	}
	d.lines = append(d.lines, parseLine(sectionHeader(l.section)+nl, l.section), l)
}

// sectionHeader returns the filter line that opens section.
func sectionHeader(section string) string {
	if section == "" {
		return "[all]"
	}
	return "[" + section + "]"
}

// insertAt inserts l as line at.
func (d *ConfigDoc) insertAt(at int, l docLine) {
	if at > 0 && !strings.HasSuffix(d.lines[at-1].raw, "\n") {
		d.lines[at-1].raw += d.newline() // the last line had no terminator
	}
	d.lines = append(d.lines, docLine{})
	copy(d.lines[at+1:], d.lines[at:])
	d.lines[at] = l
}

// lineOrder places the new line of an item among the lines of the other
// items of its file, so that lines added independently land in the order
// the items were made, whatever order they are added in.
type lineOrder struct {
	// seq is the number of the item adding a line.
	seq int
	// line returns the number of the item that manages an entry line.
	line func(docLine) (int, bool)
	// section returns the smallest number of the items of a section.
	section func(string) (int, bool)
}

// manages reports whether l is an entry that an item manages; a nil order
// manages none.
func (o *lineOrder) manages(l docLine) bool {
	if o == nil || l.kind != lineEntry {
		return false
	}
	_, ok := o.line(l)
	return ok
}

// insertOrdered adds text as a new line of section, placed by o:
//
//   - In the section's last block, the line goes after the last entry that
//     no item manages (before the comments and blank lines that close the
//     block; after them when there is no such entry), then after the
//     managed entries that follow and belong to earlier items. Lines of
//     items, present or not, never move the spot.
//   - A new block goes at the end of the file, but before the blocks at
//     the end that hold only lines of items and belong to sections whose
//     first item comes later ("[all]" heads the unconditional lines that
//     start the file when a block goes before them; a block of section ""
//     that goes first has no header).
func (d *ConfigDoc) insertOrdered(section, text string, o *lineOrder) {
	nl := d.newline()
	l := parseLine(text+nl, section)
	start, end := d.lastBlock(section)
	if start >= 0 {
		at := d.anchor(start, end, o)
		for at < len(d.lines) && d.lines[at].kind == lineEntry {
			if n, ok := o.line(d.lines[at]); !ok || n > o.seq {
				break
			}
			at++
		}
		d.insertAt(at, l)
		return
	}
	rank, ok := o.section(section)
	if !ok {
		rank = o.seq
	}
	h := d.laterBlocks(rank, o)
	if h < 0 {
		d.appendBlock(l, o)
		return
	}
	if h == 0 && len(d.lines) > 0 && d.lines[0].kind != lineSection {
		// A block goes before the unconditional lines that start the file:
		// they become a block of their own, "[all]", set off from the block
		// after them the way a block opened at the end would be.
		d.lines = append([]docLine{parseLine("[all]"+nl, "")}, d.lines...)
		next := 1
		for next < len(d.lines) && d.lines[next].kind != lineSection {
			next++
		}
		if next < len(d.lines) && !d.endsBlank(next, o) {
			d.insertAt(next, parseLine(nl, ""))
		}
	}
	block := []docLine{parseLine(sectionHeader(section)+nl, section), l, parseLine(nl, section)}
	if h == 0 && section == "" {
		// Lines before the first filter are unconditional; after lines of
		// items only, the next block needs no blank line (as at the end).
		block = block[1:2]
	}
	d.lines = append(d.lines[:h], append(block, d.lines[h:]...)...)
}

// endsBlank reports whether the lines before end, not counting the lines
// that o manages, end with a blank line or are none.
func (d *ConfigDoc) endsBlank(end int, o *lineOrder) bool {
	i := end - 1
	for i >= 0 && o.manages(d.lines[i]) {
		i--
	}
	return i < 0 || d.lines[i].kind == lineBlank
}

// lastBlock returns the lines [start, end) of the last block of section
// (start is its header, or 0 for the unconditional lines before the first
// filter), or -1s when the section has none.
func (d *ConfigDoc) lastBlock(section string) (start, end int) {
	start, end = -1, -1
	if section == "" && (len(d.lines) == 0 || d.lines[0].kind != lineSection) {
		end = len(d.lines)
		for i, l := range d.lines {
			if l.kind == lineSection {
				end = i
				break
			}
		}
		start = 0
	}
	for i, l := range d.lines {
		if l.kind != lineSection || l.section != section {
			continue
		}
		j := i + 1
		for j < len(d.lines) && d.lines[j].kind != lineSection {
			j++
		}
		start, end = i, j
	}
	return start, end
}

// anchor returns where a new entry of the block [start, end) goes, not
// counting the entries that o manages: after the last other entry, else
// after the last comment, else at the block's start (after its header).
func (d *ConfigDoc) anchor(start, end int, o *lineOrder) int {
	lastEntry, lastSolid := -1, -1
	for i := start; i < end; i++ {
		l := d.lines[i]
		switch l.kind {
		case lineEntry:
			if o.manages(l) {
				continue
			}
			lastEntry, lastSolid = i, i
		case lineSection, lineOther:
			lastEntry, lastSolid = i, i
		case lineComment:
			lastSolid = i
		}
	}
	switch {
	case lastEntry >= 0:
		return lastEntry + 1
	case lastSolid >= 0:
		return lastSolid + 1
	default:
		return start
	}
}

// laterBlocks returns the index of the first of the blocks at the end of
// the file that hold nothing but blank lines and entries of items, and
// whose section's first item comes after rank; -1 when the last block is
// not such a block. Whether a block is one does not depend on which lines
// of items it holds, so neither does the place of a new block.
func (d *ConfigDoc) laterBlocks(rank int, o *lineOrder) int {
	first := -1
	end := len(d.lines)
	for end > 0 {
		b := end - 1
		for b >= 0 && d.lines[b].kind != lineSection {
			b--
		}
		section, from := "", 0
		if b >= 0 {
			section, from = d.lines[b].section, b+1
		}
		for _, l := range d.lines[from:end] {
			if l.kind != lineBlank && !o.manages(l) {
				return first
			}
		}
		if r, ok := o.section(section); !ok || r <= rank {
			return first
		}
		if b < 0 {
			return 0
		}
		first, end = b, b
	}
	return first
}

// terminateLast makes sure the last line ends with a line terminator.
func (d *ConfigDoc) terminateLast() {
	if n := len(d.lines); n > 0 && !strings.HasSuffix(d.lines[n-1].raw, "\n") {
		d.lines[n-1].raw += d.newline()
	}
}

// insertPoint returns the index at which a new entry of section goes: after
// the last entry of the section's last block, before the comments and blank
// lines that close it. It returns -1 when the section has no block.
func (d *ConfigDoc) insertPoint(section string) int {
	start, end := d.lastBlock(section)
	if start < 0 {
		return -1
	}
	return d.anchor(start, end, nil)
}

// Delete removes every entry of key in section and returns how many.
func (d *ConfigDoc) Delete(section, key string) int {
	return d.deleteWhere(normSection(section), key, func(string) bool { return true })
}

// DeleteEntry removes every entry key=value in section and returns how
// many.
func (d *ConfigDoc) DeleteEntry(section, key, value string) int {
	return d.deleteWhere(normSection(section), key, func(v string) bool { return v == value })
}

func (d *ConfigDoc) deleteWhere(section, key string, match func(string) bool) int {
	n := 0
	out := d.lines[:0]
	for _, l := range d.lines {
		if l.kind == lineEntry && l.section == section && l.key == key && match(l.value) {
			n++
			continue
		}
		out = append(out, l)
	}
	clear(d.lines[len(out):])
	d.lines = out
	return n
}

// LineNumbers returns the 1-based line numbers of the entries of key in
// section, in order.
func (d *ConfigDoc) LineNumbers(section, key string) []int {
	section = normSection(section)
	var out []int
	for i, l := range d.lines {
		if l.kind == lineEntry && l.section == section && l.key == key {
			out = append(out, i+1)
		}
	}
	return out
}

// repeatable lists the config.txt keys that are meant to appear several
// times.
var repeatable = map[string]bool{"dtoverlay": true, "dtparam": true, "gpio": true}

// IsRepeatable reports whether key is one of the config.txt keys meant to
// appear several times: dtoverlay, dtparam and gpio. A dtparam applies to
// the dtoverlay before it (or to the base device tree before any), so
// their order carries meaning. ConfigFile.Key refuses these keys; manage
// each of their entries with ConfigFile.Entry.
func IsRepeatable(key string) bool { return repeatable[key] }

// Entries returns every entry of the document in order, each identical
// entry once. Entries of repeatable keys (see IsRepeatable), and of any key
// that the same section holds more than once, are marked Repeated.
func (d *ConfigDoc) Entries() []ConfigEntry {
	type sk struct{ s, k string }
	count := map[sk]int{}
	for _, l := range d.lines {
		if l.kind == lineEntry {
			count[sk{l.section, l.key}]++
		}
	}
	seen := map[ConfigEntry]bool{}
	var out []ConfigEntry
	for _, l := range d.lines {
		if l.kind != lineEntry {
			continue
		}
		e := ConfigEntry{Section: l.section, Key: l.key, Value: l.value}
		e.Repeated = IsRepeatable(l.key) || count[sk{l.section, l.key}] > 1
		if seen[e] {
			continue
		}
		seen[e] = true
		out = append(out, e)
	}
	return out
}
