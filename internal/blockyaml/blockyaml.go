// Package blockyaml reads, in one pass and without reflection, the subset of
// YAML that sigs.k8s.io/yaml (go.yaml.in/yaml/v2) writes for JSON-like data:
// block mappings and sequences, plain scalars that YAML 1.1 unambiguously
// resolves to a string or to a decimal integer, single- and double-quoted
// scalars on one line, the empty flow collections [] and {}, comments, and a
// "---" before the document.
//
// Parse refuses (ok is false) anything outside that subset instead of
// guessing: anchors, aliases, tags, flow collections with content, block
// scalars, multi-line scalars, nulls, booleans, floats, timestamps, numbers
// not written as canonical decimals, merge keys, non-string keys, repeated
// keys, tabs, control characters, more than one document, and any
// indentation the subset does not cover. A caller falls back to the full
// YAML reader then. Whatever Parse accepts, yaml.v2 (strict) reads to the
// same value: Doc.Any gives it in the shape sigs.k8s.io/yaml converts to
// JSON.
package blockyaml

import (
	"bytes"
	"encoding/binary"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Kind is the kind of a node.
type Kind uint8

// The kinds of nodes.
const (
	// Mapping is a block mapping (or {}) with string keys.
	Mapping Kind = 1 + iota
	// Sequence is a block sequence (or []).
	Sequence
	// String is a scalar that YAML resolves to a string.
	String
	// Int is a plain scalar written as a canonical decimal integer that
	// fits in 64 bits.
	Int
)

// Node identifies a node of a Doc.
type Node int32

// maxDepth bounds the nesting of collections; deeper documents are refused.
const maxDepth = 64

// maxKey bounds the length of a key: yaml.v2 refuses simple keys of more
// than 1024 characters.
const maxKey = 1000

type node struct {
	kind Kind
	// esc says that the text is in Doc.buf (an escaped quoted scalar)
	// rather than in the source.
	esc bool
	// a and b delimit the text of a scalar, or the children of a
	// collection in Doc.kids (key, value, key, value... for a mapping).
	a, b int32
}

type line struct {
	// begin is the offset of the line, start of its first non-space
	// byte, end just after its last non-space byte (before any CR LF).
	begin, start, end int32
}

// Doc is a parsed document. Its text references the source given to Parse,
// which must not change while the Doc is used.
type Doc struct {
	src   []byte
	buf   []byte
	nodes []node
	kids  []Node
	lines []line
	stack []Node
	root  Node
}

// docs keeps the buffers of released Docs.
var docs = sync.Pool{New: func() any { return new(Doc) }}

// Parse parses src. ok is false when src is not in the subset (see the
// package documentation); the Doc is then nil. Release gives the Doc's
// buffers back when it is no longer used.
func Parse(src []byte) (doc *Doc, ok bool) {
	if len(src) >= math.MaxInt32 {
		return nil, false
	}
	d := docs.Get().(*Doc)
	d.src = src
	if !d.splitLines() || len(d.lines) == 0 {
		d.Release()
		return nil, false
	}
	d.nodes = slices.Grow(d.nodes[:0], len(d.lines)*2+8)
	d.kids = slices.Grow(d.kids[:0], len(d.lines)*2+8)
	d.buf, d.stack = d.buf[:0], d.stack[:0]
	root, next, ok := d.block(0, d.lines[0].start, 0)
	if !ok || next != len(d.lines) {
		d.Release()
		return nil, false
	}
	d.root = root
	return d, true
}

// Release lets a later Parse reuse the Doc's buffers. Neither the Doc nor
// any text it returned may be used afterwards.
func (d *Doc) Release() {
	d.src = nil
	docs.Put(d)
}

// splitLines records the lines that hold content (not blank, not a
// comment), checking every character on the way.
func (d *Doc) splitLines() bool {
	src := d.src
	d.lines = slices.Grow(d.lines[:0], bytes.Count(src, []byte{'\n'})+1)
	first := true
	for begin := 0; begin < len(src); {
		end := bytes.IndexByte(src[begin:], '\n')
		next := len(src)
		if end < 0 {
			end = len(src)
		} else {
			end += begin
			next = end + 1
		}
		if end > begin && src[end-1] == '\r' {
			end--
		}
		if !checkChars(src[begin:end]) {
			return false
		}
		start := begin
		for start < end && src[start] == ' ' {
			start++
		}
		last := end
		for last > start && src[last-1] == ' ' {
			last--
		}
		if start < last && src[start] != '#' {
			if start == begin && isMarker(src[start:last]) {
				// "---" may start the document; any other document marker
				// (a second document, "...") is refused.
				if !first || src[start] != '-' || !restIsComment(src, int32(start+3), int32(last)) {
					return false
				}
			} else {
				d.lines = append(d.lines, line{begin: int32(begin), start: int32(start), end: int32(last)})
			}
			first = false
		}
		begin = next
	}
	return true
}

// isMarker reports whether s starts with a document marker, "---" or "...",
// followed by a blank or the end of the line.
func isMarker(s []byte) bool {
	if len(s) < 3 || (len(s) > 3 && s[3] != ' ') {
		return false
	}
	return string(s[:3]) == "---" || string(s[:3]) == "..."
}

// restIsComment reports whether src[p:end] is empty or blanks then a
// comment; a comment needs a blank before it unless p starts the line.
func restIsComment(src []byte, p, end int32) bool {
	q := p
	for q < end && src[q] == ' ' {
		q++
	}
	return q == end || (src[q] == '#' && q > p)
}

// checkChars reports whether s holds only characters the subset allows: the
// printable ones yaml.v2 accepts, less tabs, CR, NEL, the Unicode line and
// paragraph separators and the byte order mark.
func checkChars(s []byte) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(s); i += 8 {
		// Stop at the first word with a byte < 0x20, 0x7f or >= 0x80.
		x := binary.LittleEndian.Uint64(s[i:])
		del := x ^ 0x7f7f7f7f7f7f7f7f
		if (x|(x-0x20*ones)|(del-ones)&^del)&highs != 0 {
			break
		}
	}
	for i < len(s) {
		c := s[i]
		if c >= 0x20 && c < 0x7f {
			i++
			continue
		}
		if c < 0x80 {
			return false
		}
		r, n := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return false
		}
		switch {
		case r == 0x2028 || r == 0x2029 || r == 0xFEFF:
			return false
		case r >= 0xA0 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
		i += n
	}
	return true
}

func (d *Doc) col(li int, p int32) int32 { return p - d.lines[li].begin }

func (d *Doc) indent(li int) int32 { return d.lines[li].start - d.lines[li].begin }

// isEntry reports whether the content at p of line li is a sequence entry
// indicator: "-" then a blank or the end of the line.
func (d *Doc) isEntry(li int, p int32) bool {
	return d.src[p] == '-' && (p+1 == d.lines[li].end || d.src[p+1] == ' ')
}

// block parses the collection whose first content is at p on line li; it
// returns the node and the index of the first line after it.
func (d *Doc) block(li int, p int32, depth int) (Node, int, bool) {
	if depth > maxDepth {
		return 0, 0, false
	}
	if d.isEntry(li, p) {
		return d.sequence(li, p, depth)
	}
	return d.mapping(li, p, depth)
}

func (d *Doc) sequence(li int, p int32, depth int) (Node, int, bool) {
	col := d.col(li, p)
	base := len(d.stack)
	for {
		end := d.lines[li].end
		if p+1 == end {
			return 0, 0, false // a null entry, or one on the next lines
		}
		q := p + 1
		for q < end && d.src[q] == ' ' {
			q++
		}
		if q == end || d.src[q] == '#' {
			return 0, 0, false
		}
		var v Node
		next := li + 1
		var ok bool
		switch {
		case d.isEntry(li, q):
			v, next, ok = d.sequence(li, q, depth+1)
		case bytes.IndexByte(d.src[q:end], ':') >= 0 && d.isKey(li, q):
			v, next, ok = d.mapping(li, q, depth+1)
		default:
			v, ok = d.inline(li, q)
		}
		if !ok {
			return 0, 0, false
		}
		d.stack = append(d.stack, v)
		if next == len(d.lines) {
			return d.collection(Sequence, base), next, true
		}
		ind := d.indent(next)
		switch {
		case ind == col && d.isEntry(next, d.lines[next].start):
			li, p = next, d.lines[next].start
		case ind <= col:
			return d.collection(Sequence, base), next, true
		default:
			return 0, 0, false
		}
	}
}

// isKey reports whether a key (then ": " or ":" at the end of the line)
// starts at p on line li.
func (d *Doc) isKey(li int, p int32) bool {
	_, _, ok := d.key(li, p, false)
	return ok
}

func (d *Doc) mapping(li int, p int32, depth int) (Node, int, bool) {
	col := d.col(li, p)
	base := len(d.stack)
	for {
		end := d.lines[li].end
		k, after, ok := d.key(li, p, true)
		if !ok || !d.unique(base, k) {
			return 0, 0, false
		}
		d.stack = append(d.stack, k)
		var v Node
		next := li + 1
		q := after
		for q < end && d.src[q] == ' ' {
			q++
		}
		if q == end || d.src[q] == '#' {
			// The value is a collection on the next lines: more indented,
			// or a sequence at the key's indentation.
			if next == len(d.lines) {
				return 0, 0, false
			}
			ind := d.indent(next)
			switch {
			case ind > col:
				v, next, ok = d.block(next, d.lines[next].start, depth+1)
			case ind == col && d.isEntry(next, d.lines[next].start):
				v, next, ok = d.sequence(next, d.lines[next].start, depth+1)
			default:
				ok = false // null
			}
		} else {
			if d.isEntry(li, q) {
				return 0, 0, false
			}
			v, ok = d.inline(li, q)
		}
		if !ok {
			return 0, 0, false
		}
		d.stack = append(d.stack, v)
		if next == len(d.lines) {
			return d.collection(Mapping, base), next, true
		}
		switch ind := d.indent(next); {
		case ind == col:
			li, p = next, d.lines[next].start
		case ind < col:
			return d.collection(Mapping, base), next, true
		default:
			return 0, 0, false
		}
	}
}

// unique reports whether key k is not among the keys of the mapping whose
// children start at stack[base].
func (d *Doc) unique(base int, k Node) bool {
	t := d.text(k)
	for i := base; i < len(d.stack); i += 2 {
		if bytes.Equal(d.text(d.stack[i]), t) {
			return false
		}
	}
	return true
}

// collection makes a node of the children on the stack from base.
func (d *Doc) collection(k Kind, base int) Node {
	a := len(d.kids)
	d.kids = append(d.kids, d.stack[base:]...)
	d.stack = d.stack[:base]
	return d.add(node{kind: k, a: int32(a), b: int32(len(d.kids))})
}

func (d *Doc) add(n node) Node {
	d.nodes = append(d.nodes, n)
	return Node(len(d.nodes) - 1)
}

// key parses a mapping key at p on line li; after is the offset just after
// its ':'. With add false it only checks, adding no node.
func (d *Doc) key(li int, p int32, add bool) (k Node, after int32, ok bool) {
	src, end := d.src, d.lines[li].end
	var n node
	var q int32
	switch src[p] {
	case '"', '\'':
		n, q, ok = d.quoted(li, p, add)
		if !ok {
			return 0, 0, false
		}
	default:
		if !plainStart(src, p, end) {
			return 0, 0, false
		}
		q = p
		for {
			if q == end {
				return 0, 0, false
			}
			c := src[q]
			if c == ':' && (q+1 == end || src[q+1] == ' ') {
				break
			}
			if c == '#' && src[q-1] == ' ' {
				return 0, 0, false
			}
			q++
		}
		if src[q-1] == ' ' {
			return 0, 0, false // "key : value"
		}
		if resolve(src[p:q]) != String {
			return 0, 0, false
		}
		n = node{kind: String, a: p, b: q}
	}
	if q-p > maxKey || q == end || src[q] != ':' || (q+1 < end && src[q+1] != ' ') {
		return 0, 0, false
	}
	if add {
		k = d.add(n)
	}
	return k, q + 1, true
}

// inline parses the scalar (or [] or {}) at p, which must end its line but
// for a comment.
func (d *Doc) inline(li int, p int32) (Node, bool) {
	src, end := d.src, d.lines[li].end
	var n node
	var q int32
	switch src[p] {
	case '"', '\'':
		var ok bool
		n, q, ok = d.quoted(li, p, true)
		if !ok {
			return 0, false
		}
	case '[', '{':
		if p+1 == end || src[p+1] != src[p]+2 { // ']' and '}' follow '[' and '{' by 2
			return 0, false
		}
		k := Sequence
		if src[p] == '{' {
			k = Mapping
		}
		n, q = node{kind: k, a: int32(len(d.kids)), b: int32(len(d.kids))}, p+2
	default:
		if !plainStart(src, p, end) {
			return 0, false
		}
		q = end
		s := src[p:end]
		if bytes.IndexByte(s, ':') >= 0 || bytes.IndexByte(s, '#') >= 0 {
			for q = p; q < end; q++ {
				c := src[q]
				if (c == ':' && (q+1 == end || src[q+1] == ' ')) || (c == '#' && src[q-1] == ' ') {
					break
				}
			}
			for src[q-1] == ' ' {
				q--
			}
		}
		k := resolve(src[p:q])
		if k == 0 {
			return 0, false
		}
		n = node{kind: k, a: p, b: q}
	}
	if !restIsComment(src, q, end) {
		return 0, false
	}
	return d.add(n), true
}

// quoted parses the single- or double-quoted scalar at p, which must close on
// line li; q is the offset after the closing quote. With decode false,
// escapes are checked but not written.
func (d *Doc) quoted(li int, p int32, decode bool) (n node, q int32, ok bool) {
	src, end := d.src, d.lines[li].end
	quote := src[p]
	q = p + 1
	for q < end && src[q] != quote && (quote == '\'' || src[q] != '\\') {
		q++
	}
	if q == end {
		return node{}, 0, false
	}
	if src[q] == quote && (quote == '"' || q+1 == end || src[q+1] != '\'') {
		return node{kind: String, a: p + 1, b: q}, q + 1, true
	}
	// Escapes: decode into buf.
	a := len(d.buf)
	buf := append(d.buf, src[p+1:q]...)
	for {
		if q == end {
			return node{}, 0, false
		}
		c := src[q]
		switch {
		case c == quote && quote == '\'':
			if q+1 < end && src[q+1] == '\'' {
				buf = append(buf, '\'')
				q += 2
				continue
			}
		case c == quote:
		case c == '\\' && quote == '"':
			if q+1 == end {
				return node{}, 0, false // escaped line break
			}
			var ok bool
			if buf, q, ok = unescape(buf, src, q+1, end); !ok {
				return node{}, 0, false
			}
			continue
		default:
			buf = append(buf, c)
			q++
			continue
		}
		break
	}
	if !decode {
		return node{}, q + 1, true
	}
	d.buf = buf
	return node{kind: String, esc: true, a: int32(a), b: int32(len(buf))}, q + 1, true
}

// simpleEscapes are the one-letter escapes of double-quoted scalars.
var simpleEscapes = [256]string{
	'0': "\x00", 'a': "\a", 'b': "\b", 't': "\t", 'n': "\n", 'v': "\v", 'f': "\f", 'r': "\r", 'e': "\x1b",
	' ': " ", '"': "\"", '\'': "'", '\\': "\\", 'N': "\u0085", '_': "\u00a0", 'L': "\u2028", 'P': "\u2029",
}

// unescape appends the character of the escape whose letter is at src[p]
// and returns the offset after the escape.
func unescape(buf, src []byte, p, end int32) ([]byte, int32, bool) {
	c := src[p]
	if s := simpleEscapes[c]; s != "" {
		return append(buf, s...), p + 1, true
	}
	var digits int32
	switch c {
	case 'x':
		digits = 2
	case 'u':
		digits = 4
	case 'U':
		digits = 8
	default:
		return nil, 0, false
	}
	if p+1+digits > end {
		return nil, 0, false
	}
	v, err := strconv.ParseUint(string(src[p+1:p+1+digits]), 16, 32)
	if err != nil || (v >= 0xD800 && v <= 0xDFFF) || v > 0x10FFFF {
		return nil, 0, false
	}
	return utf8.AppendRune(buf, rune(v)), p + 1 + digits, true
}

// plainStart reports whether a plain scalar of the subset can start at p:
// no indicator, and "-" only before a non-blank.
func plainStart(src []byte, p, end int32) bool {
	c := src[p]
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c >= 0x80:
		return true
	case c == '-':
		return p+1 < end && src[p+1] != ' '
	}
	return strings.IndexByte("_/.+$(=^~;", c) >= 0
}

// resolveTable holds the first characters after which yaml.v2 tries more
// than a string: 'S' sign, 'D' digit, 'M' in the table of words, '.' float.
var resolveTable = func() (t [256]byte) {
	t['+'], t['-'] = 'S', 'S'
	for c := '0'; c <= '9'; c++ {
		t[c] = 'D'
	}
	for _, c := range "yYnNtTfFoO~" {
		t[c] = 'M'
	}
	t['.'] = '.'
	return t
}()

// resolveWords are the plain scalars yaml.v2 resolves by name to a bool,
// null, float or merge key.
var resolveWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields("y Y yes Yes YES true True TRUE on On ON n N no No NO false False FALSE off Off OFF ~ null Null NULL .nan .NaN .NAN .inf .Inf .INF +.inf +.Inf +.INF -.inf -.Inf -.INF <<") {
		resolveWords[w] = true
	}
}

// yamlFloat is the float syntax of yaml.v2.
var yamlFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)

// resolve returns String or Int when yaml.v2 resolves the plain scalar s to
// a string or to an int written as a canonical decimal, and 0 otherwise
// (null, bool, float, timestamp, other integer forms).
func resolve(s []byte) Kind {
	if len(s) == 0 {
		return 0
	}
	hint := resolveTable[s[0]]
	if hint == 0 {
		return String
	}
	if len(s) <= 5 && resolveWords[string(s)] { // the longest word is 5 bytes
		return 0
	}
	switch hint {
	case 'M':
		return String
	case '.':
		if _, err := strconv.ParseFloat(string(s), 64); err == nil {
			return 0
		}
		return String
	}
	if canonicalInt(s) {
		return Int
	}
	// Timestamps start with four digits and a dash.
	if len(s) > 4 && s[4] == '-' && allDigits(s[:4]) {
		return 0
	}
	plain := strings.ReplaceAll(string(s), "_", "")
	if _, err := strconv.ParseInt(plain, 0, 64); err == nil {
		return 0
	}
	if _, err := strconv.ParseUint(plain, 0, 64); err == nil {
		return 0
	}
	if yamlFloat.MatchString(plain) || strings.HasPrefix(plain, "0b") || strings.HasPrefix(plain, "-0b") {
		return 0
	}
	return String
}

// canonicalInt reports whether s is -?(0|[1-9][0-9]*) with at most 18
// digits (so that it fits in an int64).
func canonicalInt(s []byte) bool {
	if s[0] == '-' {
		s = s[1:]
	}
	if len(s) == 0 || len(s) > 18 || (s[0] == '0' && len(s) > 1) {
		return false
	}
	return allDigits(s)
}

func allDigits(s []byte) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func (d *Doc) text(n Node) []byte {
	x := d.nodes[n]
	if x.esc {
		return d.buf[x.a:x.b]
	}
	return d.src[x.a:x.b]
}

// Root returns the top node of the document: a Mapping or a Sequence.
func (d *Doc) Root() Node { return d.root }

// Kind returns the kind of n.
func (d *Doc) Kind(n Node) Kind { return d.nodes[n].kind }

// Len returns the number of entries of a Sequence or of pairs of a Mapping,
// and 0 for a scalar.
func (d *Doc) Len(n Node) int {
	x := d.nodes[n]
	switch x.kind {
	case Mapping:
		return int(x.b-x.a) / 2
	case Sequence:
		return int(x.b - x.a)
	}
	return 0
}

// Entry returns entry i of Sequence n.
func (d *Doc) Entry(n Node, i int) Node { return d.kids[int(d.nodes[n].a)+i] }

// Key returns the key of pair i of Mapping n. The bytes must not be
// modified.
func (d *Doc) Key(n Node, i int) []byte { return d.text(d.kids[int(d.nodes[n].a)+2*i]) }

// Value returns the value of pair i of Mapping n.
func (d *Doc) Value(n Node, i int) Node { return d.kids[int(d.nodes[n].a)+2*i+1] }

// Text returns the text of a String (unquoted and unescaped) or of an Int
// (its decimal digits). The bytes must not be modified.
func (d *Doc) Text(n Node) []byte { return d.text(n) }

// Int returns the value of an Int node.
func (d *Doc) Int(n Node) int64 {
	v, _ := strconv.ParseInt(string(d.text(n)), 10, 64)
	return v
}

// Any returns n as sigs.k8s.io/yaml hands it to encoding/json:
// map[string]any, []any, string or int.
func (d *Doc) Any(n Node) any {
	switch d.Kind(n) {
	case Mapping:
		m := make(map[string]any, d.Len(n))
		for i := range d.Len(n) {
			m[string(d.Key(n, i))] = d.Any(d.Value(n, i))
		}
		return m
	case Sequence:
		s := make([]any, d.Len(n))
		for i := range s {
			s[i] = d.Any(d.Entry(n, i))
		}
		return s
	case Int:
		return int(d.Int(n))
	}
	return string(d.Text(n))
}
