package docker_test

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// yamlFields lists the YAML names of the fields of struct type t,
// descending into embedded structs.
func yamlFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, yamlFields(f.Type)...)
			continue
		}
		tag := strings.Split(f.Tag.Get("yaml"), ",")[0]
		if tag != "" && tag != "-" && !strings.HasPrefix(tag, "#") {
			out = append(out, tag)
		}
	}
	return out
}

// TestComposeGuideNamesEveryComposeServiceField: the field table of docs/compose.md
// names every service field of compose-go's model in its first column,
// and every build field in the build row, each row saying "yes" (or what
// is carried out) or "refused" with its reason; so a field compose-go
// adds is neither carried out nor refused without the table saying so.
func TestComposeGuideNamesEveryComposeServiceField(t *testing.T) {
	b, err := os.ReadFile("../docs/compose.md")
	require.NoError(t, err)
	text := string(b)
	start, end := strings.Index(text, "<!-- compose-fields -->"), strings.Index(text, "<!-- /compose-fields -->")
	require.True(t, start >= 0 && end > start, "docs/compose.md has the compose-fields table")
	rows := map[string]string{} // field -> its row's second column
	code := regexp.MustCompile("`([a-z_]+)`")
	for _, line := range strings.Split(text[start:end], "\n") {
		cols := strings.Split(line, "|")
		if len(cols) < 4 || !strings.HasPrefix(strings.TrimSpace(cols[1]), "`") {
			continue
		}
		verdict := strings.TrimSpace(cols[2])
		assert.Regexp(t, `^(yes|refused|1 only|`+"`host`"+`)`, verdict, "row %s says neither yes nor refused", cols[1])
		for _, m := range code.FindAllStringSubmatch(cols[1], -1) {
			rows[m[1]] = verdict
		}
	}
	for _, f := range yamlFields(reflect.TypeOf(types.ServiceConfig{})) {
		assert.Contains(t, rows, f, "the guide's field table does not name service field %q", f)
	}
	for _, f := range yamlFields(reflect.TypeOf(types.BuildConfig{})) {
		assert.Contains(t, rows["build"], "`"+f+"`", "the guide's build row does not name build field %q", f)
	}
	for _, f := range yamlFields(reflect.TypeOf(types.DeployConfig{})) {
		assert.Contains(t, rows["deploy"], f, "the guide's deploy row does not name deploy field %q", f)
	}
}
