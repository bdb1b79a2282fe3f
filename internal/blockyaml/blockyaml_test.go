package blockyaml_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge/internal/blockyaml"
)

// toJSON parses in and returns its JSON as sigs.k8s.io/yaml would write it.
func toJSON(in []byte) ([]byte, bool) {
	d, ok := blockyaml.Parse(in)
	if !ok {
		return nil, false
	}
	j, err := json.Marshal(d.Any(d.Root()))
	if err != nil {
		panic(err)
	}
	return j, true
}

// TestParseAccepts checks documents of the subset against the JSON that
// sigs.k8s.io/yaml makes of them.
func TestParseAccepts(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"mapping", "a: b\nc: d\n", `{"a":"b","c":"d"}`},
		{"no final newline", "a: b", `{"a":"b"}`},
		{"nested", "a:\n  b:\n    c: d\n  e: f\n", `{"a":{"b":{"c":"d"},"e":"f"}}`},
		{"sequence", "- a\n- b\n", `["a","b"]`},
		{"sequence under a key at its indent", "a:\n- x\n- w\nb: z\n", `{"a":["x","w"],"b":"z"}`},
		{"sequence under a key, indented", "a:\n    - x\n    - w\nb: z\n", `{"a":["x","w"],"b":"z"}`},
		{"mappings in a sequence", "- a: 1\n  b: 2\n- c: 3\n", `[{"a":1,"b":2},{"c":3}]`},
		{"wide entry indicator", "-   a: 1\n    b: 2\n", `[{"a":1,"b":2}]`},
		{"sequence of sequences", "- - a\n  - b\n- - c\n", `[["a","b"],["c"]]`},
		{"indentless sequence in a compact mapping", "- a:\n  - x\n  b: 1\n", `[{"a":["x"],"b":1}]`},
		{"document start", "---\na: b\n", `{"a":"b"}`},
		{"document start with comment", "# head\n--- # c\na: b\n", `{"a":"b"}`},
		{"indented document", "  a: b\n  c: d\n", `{"a":"b","c":"d"}`},
		{"comments", "# c\na: b # c\n  # c\nc: d#e\n", `{"a":"b","c":"d#e"}`},
		{"comment after a key", "a: # c\n  b: c\n", `{"a":{"b":"c"}}`},
		{"blank lines and trailing spaces", "a: b   \n\n   \nc:   d  \n", `{"a":"b","c":"d"}`},
		{"CRLF", "a: b\r\nc:\r\n- d\r\n", `{"a":"b","c":["d"]}`},
		{"key with colons", "a:b: c\nhttp://x: z\n", `{"a:b":"c","http://x":"z"}`},
		{"url value", "url: https://example.invalid/k0s?a=b&c=d\n", `{"url":"https://example.invalid/k0s?a=b\u0026c=d"}`},
		{"inner spaces", "a: b  c\n", `{"a":"b  c"}`},
		{"integers", "a: 0\nb: -0\nc: 42\nd: -17\ne: 123456789012345678\n", `{"a":0,"b":0,"c":42,"d":-17,"e":123456789012345678}`},
		{"words that are strings", "a: yess\nb: nope\nc: Off1\nd: tru\ne: nul\nf: ~x\n", `{"a":"yess","b":"nope","c":"Off1","d":"tru","e":"nul","f":"~x"}`},
		{"digits that are strings", "a: 5m0s\nb: 1.2.3\nc: v1.31.2+k0s.0\nd: -x\ne: 12ab\nf: .x\n", `{"a":"5m0s","b":"1.2.3","c":"v1.31.2+k0s.0","d":"-x","e":"12ab","f":".x"}`},
		{"double quoted", `a: "b: #c"` + "\n", `{"a":"b: #c"}`},
		{"double-quoted escapes", `a: "\t\n\\\"\x41\u00e9\U0001F600\0\/x"` + "\n", ""},
		{"unicode escapes", `a: "\u00e9\x7f\N\_\L\P"` + "\n", "{\"a\":\"é\x7f\u0085\u00a0\\u2028\\u2029\"}"},
		{"single quoted", "a: 'it''s # not: a comment'\n", `{"a":"it's # not: a comment"}`},
		{"single quote with backslash", `a: 'a\b'` + "\n", `{"a":"a\\b"}`},
		{"quoted keys", "'a b': 1\n\"c\\td\": 2\n", `{"a b":1,"c\td":2}`},
		{"quoted timestamp", "t: \"2026-05-11T19:18:02Z\"\n", `{"t":"2026-05-11T19:18:02Z"}`},
		{"quoted words", "a: 'yes'\nb: \"null\"\nc: '1e3'\n", `{"a":"yes","b":"null","c":"1e3"}`},
		{"empty collections", "a: []\nb: {}\nc:\n- []\n- {} # c\n", `{"a":[],"b":{},"c":[[],{}]}`},
		{"unicode text", "name: héllo wörld\nkey: 日本\n", `{"key":"日本","name":"héllo wörld"}`},
		{"unicode in a long line", "name: aaaaaaaaaaaaaaaaaaaaaaaaaaaaé\n", `{"name":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaé"}`},
		{"html characters", "a: x<b>&\n", `{"a":"x\u003cb\u003e\u0026"}`},
		{"dashes inside", "a: b - c\n- x: 1\n", ""},
		{"flow indicators inside", "a: b [c] {d}, e\n", `{"a":"b [c] {d}, e"}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want, werr := yaml.YAMLToJSONStrict([]byte(tc.in))
			got, ok := toJSON([]byte(tc.in))
			if tc.want == "" && werr != nil {
				assert.False(t, ok, "yaml.v2 refuses it: %v", werr)
				return
			}
			require.NoError(t, werr)
			require.True(t, ok, "the subset covers it")
			assert.Equal(t, string(want), string(got))
			if tc.want != "" {
				assert.Equal(t, tc.want, string(got))
			}
		})
	}
}

// TestParseRefuses checks that what the subset does not cover is refused,
// so that callers fall back to the full YAML reader.
func TestParseRefuses(t *testing.T) {
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"only comments", "# a\n\n"},
		{"scalar document", "a\n"},
		{"anchor", "a: &x b\nc: *x\n"},
		{"alias", "a: *x\n"},
		{"tag", "a: !!str b\n"},
		{"flow sequence", "a: [b]\n"},
		{"flow mapping", "a: {b: c}\n"},
		{"literal block scalar", "a: |\n  b\n"},
		{"folded block scalar", "a: >\n  b\n"},
		{"multi-line plain", "a: b\n  c\n"},
		{"multi-line quoted", "a: \"b\n  c\"\n"},
		{"escaped line break", "a: \"b\\\n  c\"\n"},
		{"unknown escape", `a: "\/"` + "\n"},
		{"surrogate escape", `a: "\ud800"` + "\n"},
		{"short escape", `a: "\x4"` + "\n"},
		{"null value", "a:\nb: c\n"},
		{"null at the end", "a:\n"},
		{"null word", "a: null\n"},
		{"tilde", "a: ~\n"},
		{"null entry", "-\n- a\n"},
		{"entry on the next line", "-\n  a: b\n"},
		{"yes", "a: yes\n"}, {"no", "a: No\n"}, {"on", "a: on\n"}, {"off", "a: OFF\n"},
		{"y", "a: y\n"}, {"n", "a: n\n"}, {"true", "a: true\n"}, {"false", "a: False\n"},
		{"float", "a: 1.5\n"}, {"exponent", "a: 1e3\n"}, {"inf", "a: .inf\n"}, {"nan", "a: .NaN\n"}, {"dot float", "a: .5\n"},
		{"hex", "a: 0x1F\n"}, {"octal", "a: 017\n"}, {"binary", "a: 0b101\n"}, {"underscores", "a: 1_000\n"},
		{"plus sign", "a: +1\n"}, {"too long", "a: 1234567890123456789\n"},
		{"timestamp", "a: 2026-05-11T19:18:02Z\n"}, {"date", "a: 2026-05-11\n"},
		{"merge key", "a: b\n<<: c\n"},
		{"integer key", "1: a\n"}, {"bool key", "yes: a\n"},
		{"duplicate key", "a: b\na: c\n"},
		{"duplicate key quoted", "a: b\n'a': c\n"},
		{"tab indentation", "a:\n\tb: c\n"},
		{"tab in value", "a: b\tc\n"},
		{"lone CR", "a: b\rc: d\n"},
		{"control character", "a: b\x01\n"},
		{"control character in a long line", "a: bbbbbbbbbbbbbbbbbbbb\x01bbbbbbbbbbbbbbbbbbbbbbbbbb\n"},
		{"delete in a long line", "a: bbbbbbbbbbbbbbbbbbbbbbbbbbbbb\x7fbbbbbbbbbbbbbbbbbbbb\n"},
		{"tab in a long line", "a: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\tbbbbbbbbbbbbbbbbbbbb\n"},
		{"invalid UTF-8 in a long line", "a: bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\xc3bbbbbbbbbbbbbbb\n"},
		{"invalid UTF-8", "a: \xff\n"},
		{"byte order mark", "\ufeffa: b\n"},
		{"line separator", "a: b\u2028c\n"},
		{"second document", "a: b\n---\nc: d\n"},
		{"document end", "a: b\n...\n"},
		{"content after document start", "--- a: b\n"},
		{"directive", "%YAML 1.1\n---\na: b\n"},
		{"bad indentation", "a:\n    b: c\n  d: e\n"},
		{"more indented key", "a: b\n  c: d\n"},
		{"value and mapping", "a: b: c\n"},
		{"trailing colon", "a: b:\n"},
		{"space before colon", "a : b\n"},
		{"no space after colon", "a:b\n"},
		{"entry after value", "a: b\n- c\n"},
		{"entry as value", "a: - b\n"},
		{"text after quote", "a: 'b' c\n"},
		{"comment without blank after quote", "a: 'b'#c\n"},
		{"complex key", "? a\n: b\n"},
		{"reserved indicator", "a: @b\n"},
		{"backquote", "a: `b`\n"},
		{"sequence then less indented", "- a\n b: c\n"},
		{"deeper after sequence", "a:\n  - b\n    - c\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ok := blockyaml.Parse([]byte(tc.in))
			assert.False(t, ok)
		})
	}
}

// FuzzParseAgreesWithYAML checks that whatever Parse accepts, yaml.v2 reads
// strictly, and sigs.k8s.io/yaml converts to the same JSON as Doc.Any.
func FuzzParseAgreesWithYAML(f *testing.F) {
	files, _ := filepath.Glob("../../autopilot/testdata/plan/*.yaml")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		"a: b\n", "- a: 1\n  b: [] # c\n- - x\n", "a:\n- 'q''s'\n- \"\\u00e9\\x41\"\nb: {}\n",
		"---\nk: -12\nl: 5m0s\nm: yes\nn: 0x1F\no: 1e3\np: 2026-05-11\n", "a: b #c\r\n  # d\nc:\n    d: e\n",
		"x: .inf\ny: ~\nz: <<\n", "a:b: c\n'a': d\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		got, ok := toJSON(in)
		if !ok {
			return
		}
		want, err := yaml.YAMLToJSONStrict(in)
		if err != nil {
			t.Fatalf("Parse accepts %q, yaml.v2 refuses it: %v", in, err)
		}
		if string(got) != string(want) {
			t.Fatalf("%q:\nParse  %s\nyaml.v2 %s", in, got, want)
		}
	})
}
