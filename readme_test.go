package converge_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// between returns the text of s after the line holding begin, up to the
// line holding end.
func between(t *testing.T, s, begin, end string) string {
	t.Helper()
	i := strings.Index(s, begin)
	require.NotEqual(t, -1, i, "%q not found", begin)
	i += strings.Index(s[i:], "\n") + 1
	j := strings.Index(s[i:], end)
	require.NotEqual(t, -1, j, "%q not found after %q", end, begin)
	return s[i : i+strings.LastIndex(s[i:i+j], "\n")+1]
}

// TestReadmeFirstProgramIsTheExample checks that the Go block of README's
// section "A first program" is the code Example_firstProgram runs, line
// for line (the example's is indented once more), so that the README's
// first program compiles and does what the example's output shows.
func TestReadmeFirstProgramIsTheExample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	require.NoError(t, err)
	section := between(t, string(readme), "## A first program", "\n## ")
	block := between(t, section, "```go", "```")

	example, err := os.ReadFile("example_firstprogram_test.go")
	require.NoError(t, err)
	code := between(t, string(example), "// README: A first program (begin)", "// README: A first program (end)")
	var lines []string
	for _, l := range strings.SplitAfter(code, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	require.NotEmpty(t, strings.TrimSpace(block))
	assert.Equal(t, strings.Join(lines, ""), block, "README's first program differs from Example_firstProgram's code")
}
