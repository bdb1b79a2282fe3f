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
// earlier ones, and for a single-valued key the last one wins.
//
// The zero value is an empty document. A ConfigDoc is not safe for
// concurrent use.
type ConfigDoc struct {
	lines []docLine
	nl    string // line terminator for new lines
}

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
	// (dtoverlay, dtparam, gpio; see IsRepeatable). Another key that
	// appears more than once is listed each time, and its last value wins.
	Repeated bool
}

// ParseConfig parses a key=value configuration file. It never fails: lines
// it does not understand are kept verbatim.
func ParseConfig(data []byte) *ConfigDoc {
	d := &ConfigDoc{nl: "\n"}
	s := string(data)
	if i := strings.IndexByte(s, '\n'); i > 0 && s[i-1] == '\r' {
		d.nl = "\r\n"
	}
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
		for vs < len(body) && (body[vs] == ' ' || body[vs] == '\t') {
			vs++
		}
		ve := len(body)
		for ve > vs && (body[ve-1] == ' ' || body[ve-1] == '\t') {
			ve--
		}
		l.vs, l.ve = vs, ve
		l.value = body[vs:ve]
	}
	return l
}

// Bytes returns the document as file content (never nil).
func (d *ConfigDoc) Bytes() []byte {
	n := 0
	for _, l := range d.lines {
		n += len(l.raw)
	}
	b := make([]byte, 0, n)
	for _, l := range d.lines {
		b = append(b, l.raw...)
	}
	return b
}

// Clone returns an independent copy of d.
func (d *ConfigDoc) Clone() *ConfigDoc {
	return &ConfigDoc{lines: append([]docLine(nil), d.lines...), nl: d.nl}
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
	section = normSection(section)
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
	d.insert(section, key+"="+value)
	return true
}

// Add appends an entry key=value to section unless the section already
// has it, and reports whether the document changed. The line goes after
// the last entry of the last block of that section (before the comments
// and blank lines that close it); a section that does not exist yet is
// opened at the end of the file ("[all]" for section "").
func (d *ConfigDoc) Add(section, key, value string) bool {
	section = normSection(section)
	if d.Has(section, key, value) {
		return false
	}
	d.insert(section, key+"="+value)
	return true
}

// insert adds text as a new line at the end of section.
func (d *ConfigDoc) insert(section, text string) {
	nl := d.newline()
	l := parseLine(text+nl, section)
	at := d.insertPoint(section)
	if at < 0 {
		// No block of this section: open one at the end of the file.
		d.terminateLast()
		if n := len(d.lines); n > 0 && d.lines[n-1].kind != lineBlank {
			d.lines = append(d.lines, parseLine(nl, d.lines[n-1].section))
		}
		header := "[" + section + "]"
		if section == "" {
			header = "[all]"
		}
		d.lines = append(d.lines, parseLine(header+nl, section), l)
		return
	}
	if at > 0 && !strings.HasSuffix(d.lines[at-1].raw, "\n") {
		d.lines[at-1].raw += nl // the last line had no terminator
	}
	d.lines = append(d.lines, docLine{})
	copy(d.lines[at+1:], d.lines[at:])
	d.lines[at] = l
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
	start, end := -1, -1
	// The lines before the first filter form an unconditional block, unless
	// the file starts with a filter.
	if len(d.lines) == 0 || d.lines[0].kind != lineSection {
		blockEnd := len(d.lines)
		for i, l := range d.lines {
			if l.kind == lineSection {
				blockEnd = i
				break
			}
		}
		if section == "" {
			start, end = 0, blockEnd
		}
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
	if start < 0 {
		return -1
	}
	lastEntry, lastSolid := -1, -1
	for i := start; i < end; i++ {
		switch d.lines[i].kind {
		case lineEntry, lineSection, lineOther:
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

// repeatable lists the config.txt keys that are meant to appear several
// times.
var repeatable = map[string]bool{"dtoverlay": true, "dtparam": true, "gpio": true}

// IsRepeatable reports whether key is one of the config.txt keys meant to
// appear several times: dtoverlay, dtparam and gpio.
func IsRepeatable(key string) bool { return repeatable[key] }

// Entries returns every entry of the document in order, each identical
// entry once. Entries of repeatable keys are marked Repeated.
func (d *ConfigDoc) Entries() []ConfigEntry {
	seen := map[ConfigEntry]bool{}
	var out []ConfigEntry
	for _, l := range d.lines {
		if l.kind != lineEntry {
			continue
		}
		e := ConfigEntry{Section: l.section, Key: l.key, Value: l.value}
		e.Repeated = IsRepeatable(l.key)
		if seen[e] {
			continue
		}
		seen[e] = true
		out = append(out, e)
	}
	return out
}
