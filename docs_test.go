package converge_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// userPages returns the pages a user reads, relative to the repository's
// root: README.md, CHANGELOG.md and every Markdown file under docs/.
func userPages(t *testing.T) []string {
	t.Helper()
	pages := []string{"README.md", "CHANGELOG.md"}
	docs, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	return append(pages, docs...)
}

// goSources returns every Go file of the repository (every module) that is
// not a test and not test data: the files godoc shows.
func goSources(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != "." && (name == "testdata" || strings.HasPrefix(name, ".") || name == "results") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			files = append(files, path)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

// issueNumber matches a reference to a tracker's issue by number ("issue
// 18", "issue #18", "issues 18 and 31"), which means nothing to a reader.
var issueNumber = regexp.MustCompile(`(?i)\bissues?[\s#-]*\d+`)

// TestNoIssueNumbersOnUserPages checks that no page a user reads (README,
// CHANGELOG, docs/ and the comments godoc shows of every module) refers to
// an internal issue by its number.
func TestNoIssueNumbersOnUserPages(t *testing.T) {
	for _, page := range userPages(t) {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		for i, line := range strings.Split(string(b), "\n") {
			if m := issueNumber.FindString(line); m != "" {
				assert.Failf(t, "issue number on a user page", "%s:%d: %q", page, i+1, m)
			}
		}
	}
	fset := token.NewFileSet()
	for _, file := range goSources(t) {
		f, err := parser.ParseFile(fset, file, nil, parser.ParseComments|parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, cg := range f.Comments {
			for _, c := range cg.List {
				if m := issueNumber.FindString(c.Text); m != "" {
					assert.Failf(t, "issue number in a comment", "%s: %q", fset.Position(c.Pos()), m)
				}
			}
		}
	}
}

// TestIssueNumberPattern pins what the sweep above finds and what it
// leaves alone.
func TestIssueNumberPattern(t *testing.T) {
	for _, tc := range []struct {
		text string
		hit  bool
	}{
		{"the goal of issue 18", true},
		{"as Issue #31 restated", true},
		{"issues 18 and 31", true},
		{"see issue-47", true},
		{"srv.Enrol issues a device's credential", false},
		{"balena-supervisor#2193", false},
		{"no issue here", false},
	} {
		t.Run(tc.text, func(t *testing.T) {
			assert.Equal(t, tc.hit, issueNumber.MatchString(tc.text))
		})
	}
}

// codeMarker names the source of the fenced block that follows it on a
// page: `<!-- code: FILE -->` (the whole file), `<!-- code: FILE FUNC -->`
// (the declaration of the function or method FUNC, as written) or
// `<!-- code: FILE FUNC body -->` (its body, one tab less, up to its
// "// Output:" comment: an Example's code).
var codeMarker = regexp.MustCompile(`^<!-- code: (\S+)(?: (\S+))?(?: (body))? -->$`)

// codeBlock is one fenced block of a page, with the marker before it.
type codeBlock struct {
	page   string
	line   int    // of the opening fence
	lang   string // after the fence: go, sh, yaml, ...
	marker []string
	text   string
}

// codeBlocks returns the fenced blocks of a page. A marker applies to the
// block that starts on the next line.
func codeBlocks(t *testing.T, page string) []codeBlock {
	t.Helper()
	b, err := os.ReadFile(page)
	require.NoError(t, err)
	lines := strings.SplitAfter(string(b), "\n")
	var blocks []codeBlock
	for i := 0; i < len(lines); i++ {
		l := strings.TrimRight(lines[i], "\n")
		if !strings.HasPrefix(l, "```") {
			continue
		}
		cb := codeBlock{page: page, line: i + 1, lang: strings.TrimPrefix(l, "```")}
		if i > 0 {
			cb.marker = codeMarker.FindStringSubmatch(strings.TrimSpace(lines[i-1]))
		}
		j := i + 1
		for ; j < len(lines) && !strings.HasPrefix(lines[j], "```"); j++ {
			cb.text += lines[j]
		}
		require.Less(t, j, len(lines), "%s:%d: a code block that does not end", page, i+1)
		blocks = append(blocks, cb)
		i = j
	}
	return blocks
}

// sourceOf returns the text a marker names, read from the repository.
func sourceOf(t *testing.T, marker []string) string {
	t.Helper()
	file, fn, body := marker[1], marker[2], marker[3] != ""
	src, err := os.ReadFile(filepath.FromSlash(file))
	require.NoError(t, err, "the marker names %s", file)
	if fn == "" {
		return string(src)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.ParseComments|parser.SkipObjectResolution)
	require.NoError(t, err)
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Name.Name != fn {
			continue
		}
		if !body {
			start := fset.Position(fd.Pos()).Offset
			return string(src[start:fset.Position(fd.End()).Offset]) + "\n"
		}
		open := fset.Position(fd.Body.Lbrace).Offset
		end := fset.Position(fd.Body.Rbrace).Offset
		code := string(src[open+strings.Index(string(src[open:]), "\n")+1 : end])
		var out strings.Builder
		for _, l := range strings.SplitAfter(code, "\n") {
			if s := strings.TrimSpace(l); strings.HasPrefix(s, "// Output:") || strings.HasPrefix(s, "// Unordered output:") {
				break
			}
			out.WriteString(strings.TrimPrefix(l, "\t"))
		}
		return out.String()
	}
	require.Failf(t, "no such function", "%s has no function %s", file, fn)
	return ""
}

// TestGuideCodeIsTested checks that every Go block of docs/*.md is a
// tested Example or example program: it carries a marker naming its
// source, and equals that source. README's Go blocks are its first
// program, which TestReadmeFirstProgramIsTheExample holds.
func TestGuideCodeIsTested(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages, "docs/ has its guides")
	goBlocks := 0
	for _, page := range pages {
		for _, cb := range codeBlocks(t, page) {
			if cb.marker == nil {
				assert.NotEqual(t, "go", cb.lang, "%s:%d: a Go block without a <!-- code: FILE [FUNC [body]] --> marker", cb.page, cb.line)
				continue
			}
			goBlocks++
			assert.Equal(t, sourceOf(t, cb.marker), cb.text, "%s:%d: the block differs from %s", cb.page, cb.line, strings.Join(cb.marker[1:], " "))
		}
	}
	assert.Positive(t, goBlocks, "the guides show code")
	readme := codeBlocks(t, "README.md")
	n := 0
	for _, cb := range readme {
		if cb.lang == "go" {
			n++
		}
	}
	assert.Equal(t, 1, n, "README's one Go block is its first program")
}

// TestPackageDocsOpenShort checks that the doc of every package of every
// module opens with a paragraph of at most five lines naming the package
// (what it is for and where to start), so that go doc and pkg.go.dev show
// that first; the details and guarantees follow, lower down.
func TestPackageDocsOpenShort(t *testing.T) {
	fset := token.NewFileSet()
	docs := map[string][]string{} // directory -> its package docs
	for _, file := range goSources(t) {
		f, err := parser.ParseFile(fset, file, nil, parser.PackageClauseOnly|parser.ParseComments)
		require.NoError(t, err)
		dir := filepath.Dir(file)
		if _, ok := docs[dir]; !ok {
			docs[dir] = nil
		}
		if f.Doc != nil {
			docs[dir] = append(docs[dir], f.Doc.Text())
		}
	}
	for dir, texts := range docs {
		if !assert.Len(t, texts, 1, "%s: one file holds the package doc (doc.go by convention)", dir) {
			continue
		}
		first, _, _ := strings.Cut(texts[0], "\n\n")
		lines := strings.Count(strings.TrimSpace(first), "\n") + 1
		assert.LessOrEqual(t, lines, 5, "%s: the package doc's first paragraph has %d lines:\n%s", dir, lines, first)
		assert.Regexp(t, `^(Package|Command) \S+ `, first, "%s: the package doc starts with its name", dir)
	}
}

// TestReadmeIsAFrontPage holds README to a front page: at most 300 lines,
// with its sections, the two commands .ci/run relies on, and a link to
// every guide under docs/.
func TestReadmeIsAFrontPage(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	readme := string(b)
	lines := strings.Count(readme, "\n")
	assert.LessOrEqual(t, lines, 300, "README.md has %d lines", lines)
	t.Logf("README.md: %d lines", lines)
	for _, h := range []string{"## Two commands", "## A first program", "## Who it is for", "## What is guaranteed", "## Map of modules", "## Read more"} {
		assert.Contains(t, readme, "\n"+h+"\n")
	}
	commands := between(t, between(t, readme, "## Two commands", "\n## "), "```sh", "```")
	assert.Len(t, strings.Split(strings.TrimSpace(commands), "\n"), 2, "the two commands")
	assert.Contains(t, commands, "go test -race -count=1 -timeout 30m work", "the test command .ci/run runs")
	guides, err := filepath.Glob(filepath.Join("docs", "*.md"))
	require.NoError(t, err)
	for _, g := range guides {
		assert.Contains(t, readme, "("+filepath.ToSlash(g), "README links to %s", g)
	}
}

// mdLink matches a Markdown link's target; codeSpan an inline code span.
var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan = regexp.MustCompile("`[^`]*`")
)

// TestPageLinksResolve checks that every relative link of README, the
// CHANGELOG and docs/ names a file that exists and, with a #fragment, a
// heading of that file (as GitHub derives its anchors).
func TestPageLinksResolve(t *testing.T) {
	anchors := map[string]map[string]bool{}
	headingsOf := func(page string) map[string]bool {
		if a, ok := anchors[page]; ok {
			return a
		}
		a := map[string]bool{}
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		inCode := false
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "```") {
				inCode = !inCode
			}
			if inCode || !strings.HasPrefix(l, "#") {
				continue
			}
			h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(l, "#")))
			var slug strings.Builder
			for _, r := range h {
				switch {
				case r == ' ':
					slug.WriteRune('-')
				case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
					slug.WriteRune(r)
				}
			}
			a[slug.String()] = true
		}
		anchors[page] = a
		return a
	}
	for _, page := range userPages(t) {
		b, err := os.ReadFile(page)
		require.NoError(t, err)
		var prose strings.Builder // the page without code, where a link is no link
		inCode := false
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "```") {
				inCode = !inCode
				continue
			}
			if !inCode {
				prose.WriteString(codeSpan.ReplaceAllString(l, "") + "\n")
			}
		}
		for _, m := range mdLink.FindAllStringSubmatch(prose.String(), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				_, err := os.Stat(path)
				if !assert.NoError(t, err, "%s links to %s", page, target) {
					continue
				}
			}
			if frag != "" && strings.HasSuffix(path, ".md") {
				assert.True(t, headingsOf(path)[frag], "%s links to %s: no such heading", page, target)
			}
		}
	}
}
