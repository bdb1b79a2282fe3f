package hostcfg

import (
	"bytes"
	"context"
	"io/fs"
	"regexp"
	"strings"

	"github.com/convergekit/converge"
)

// Line is an Item for one line of a text file: Present makes sure the file
// holds the line, Absent removes every copy of it. Other lines are kept
// byte for byte. When Replace is set and the line is missing, the last line
// matching Replace is rewritten to Line instead of appending (for example
// Replace `^127\.0\.1\.1\s` to change the host name in /etc/hosts). A
// missing file is created with Mode (0644 when 0) when the line must be
// present. Several Line items (and other items) on one file are safe to run
// concurrently: edits are serialised per file.
//
// The zero value has no Root and fails; set Root, Path and Line.
type Line struct {
	Root *Root
	// Path is the file's path inside the root.
	Path string
	// Line is the whole line, without a line terminator.
	Line string
	// Replace, when set, selects the line to rewrite when Line is missing.
	Replace *regexp.Regexp
	// Mode is the mode of a file created to hold the line; 0 means 0644.
	Mode fs.FileMode
}

// LineState is the state of a Line.
type LineState struct {
	Path string
	Line string
	// Present is true when the file holds the line.
	Present bool
	// Leftovers counts temporary files of ours next to the file.
	Leftovers int
	// Diff is set on the state ApplyDry returns: the unified diff of the
	// change it simulated.
	Diff string
}

func (s LineState) diffText() string { return s.Diff }

var (
	_ converge.Item[LineState]    = (*Line)(nil)
	_ converge.Cleaner[LineState] = (*Line)(nil)
)

// ID returns "line:", the canonical path, ":" and the line.
func (l *Line) ID() converge.ID {
	return converge.ID("line:" + canonical(l.Path) + ":" + l.Line)
}

// Node returns the item wrapped for a graph.
func (l *Line) Node() converge.Node { return converge.Wrap[LineState](l) }

func (l *Line) validate() error {
	if strings.ContainsAny(l.Line, "\r\n") {
		return &ItemError{Item: string(l.ID()), Reason: "Line contains a line terminator"}
	}
	if l.Mode&^fs.ModePerm != 0 {
		return &ItemError{Item: string(l.ID()), Reason: "mode " + l.Mode.String() + " has bits other than permissions"}
	}
	return nil
}

// cutBOM splits a UTF-8 byte-order mark off the start of content, so that
// it neither hides the first line nor is lost by a rewrite.
func cutBOM(content []byte) (bom string, rest []byte) {
	if rest, ok := bytes.CutPrefix(content, []byte(utf8BOM)); ok {
		return utf8BOM, rest
	}
	return "", content
}

// hasLine reports whether content holds line as a whole line.
func hasLine(content []byte, line string) bool {
	_, content = cutBOM(content)
	for _, got := range splitLines(string(content)) {
		if strings.TrimRight(got, "\r\n") == line {
			return true
		}
	}
	return false
}

// splitLines splits s after every "\n", keeping the terminators.
func splitLines(s string) []string {
	var out []string
	for len(s) > 0 {
		i := strings.IndexByte(s, '\n') + 1
		if i == 0 {
			i = len(s)
		}
		out = append(out, s[:i])
		s = s[i:]
	}
	return out
}

// StateCurrent reads whether the file holds the line.
func (l *Line) StateCurrent(context.Context, converge.DepStates) (LineState, error) {
	if err := l.validate(); err != nil {
		return LineState{}, err
	}
	name, content, _, leftovers, err := l.Root.peek(l.Path)
	if err != nil {
		return LineState{}, err
	}
	return LineState{Path: name, Line: l.Line, Present: hasLine(content, l.Line), Leftovers: leftovers}, nil
}

// StateGoal is the line present.
func (l *Line) StateGoal(context.Context, converge.DepStates) (LineState, error) {
	if err := l.validate(); err != nil {
		return LineState{}, err
	}
	name, err := cleanPath(l.Path)
	if err != nil {
		return LineState{}, err
	}
	return LineState{Path: name, Line: l.Line, Present: true}, nil
}

// StateClean is the line absent.
func (l *Line) StateClean(context.Context, converge.DepStates) (LineState, error) {
	name, err := cleanPath(l.Path)
	if err != nil {
		return LineState{}, err
	}
	return LineState{Path: name, Line: l.Line}, nil
}

// Check compares presence; leftover temporary files also require Apply.
func (l *Line) Check(_ context.Context, current, target LineState) (converge.Decision, error) {
	if current.Present != target.Present || current.Leftovers > 0 {
		return converge.Required(1), nil
	}
	return converge.NotRequired(), nil
}

// Apply adds, rewrites or removes the line.
func (l *Line) Apply(ctx context.Context, _, target LineState) (LineState, error) {
	return l.converge(ctx, target, true)
}

// ApplyDry returns the state Apply would reach and its diff, writing
// nothing.
func (l *Line) ApplyDry(ctx context.Context, _, target LineState) (LineState, error) {
	return l.converge(ctx, target, false)
}

func (l *Line) converge(ctx context.Context, target LineState, write bool) (LineState, error) {
	if err := l.validate(); err != nil {
		return LineState{}, err
	}
	mode := l.Mode
	if mode == 0 {
		mode = 0o644
	}
	res, err := l.Root.edit(ctx, l.Path, write, mode, func(cur []byte) ([]byte, error) {
		if target.Present {
			return withLine(cur, l.Line, l.Replace), nil
		}
		return withoutLine(cur, l.Line), nil
	})
	if err != nil {
		return LineState{}, err
	}
	return LineState{Path: res.name, Line: l.Line, Present: target.Present, Diff: res.diff}, nil
}

// withLine returns content holding line: unchanged when it does, else with
// the last line matching replace rewritten, else with line appended. nil
// content (a missing file) becomes a file of that one line.
func withLine(content []byte, line string, replace *regexp.Regexp) []byte {
	if hasLine(content, line) {
		return content
	}
	bom, content := cutBOM(content)
	lines := splitLines(string(content))
	nl := "\n"
	if len(lines) > 0 && strings.HasSuffix(lines[0], "\r\n") {
		nl = "\r\n"
	}
	if replace != nil {
		for i := len(lines) - 1; i >= 0; i-- {
			body := strings.TrimRight(lines[i], "\r\n")
			if replace.MatchString(body) {
				lines[i] = line + lines[i][len(body):]
				return []byte(bom + strings.Join(lines, ""))
			}
		}
	}
	if n := len(lines); n > 0 && !strings.HasSuffix(lines[n-1], "\n") {
		lines[n-1] += nl
	}
	return []byte(bom + strings.Join(lines, "") + line + nl)
}

// withoutLine returns content without any copy of line. nil stays nil.
func withoutLine(content []byte, line string) []byte {
	if content == nil || !hasLine(content, line) {
		return content
	}
	bom, content := cutBOM(content)
	var b strings.Builder
	b.WriteString(bom)
	for _, got := range splitLines(string(content)) {
		if strings.TrimRight(got, "\r\n") != line {
			b.WriteString(got)
		}
	}
	return []byte(b.String())
}
