package strictjson_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/internal/strictjson"
)

func TestCheck(t *testing.T) {
	tests := []struct {
		name, in string
		path     string // path of the duplicate; "" with dup false
		dup      bool
		trailing bool
		syntax   bool
	}{
		{name: "object", in: `{"a":1,"b":{"c":[1,{"d":2}]}}`},
		{name: "scalar", in: `"x"`},
		{name: "same key in sibling objects", in: `{"a":{"k":1},"b":{"k":2},"c":[{"k":1},{"k":2}]}`},
		{name: "string values equal to keys", in: `{"a":"a","b":"a"}`},
		{name: "top-level duplicate", in: `{"a":1,"a":2}`, path: "a", dup: true},
		{name: "nested duplicate", in: `{"spec":{"commands":[{"k0supdate":{"version":"1","version":"2"}}]}}`, path: "spec.commands[0].k0supdate.version", dup: true},
		{name: "duplicate in second element", in: `{"x":[{"a":1},{"b":1,"b":2}]}`, path: "x[1].b", dup: true},
		{name: "duplicate after nested value", in: `{"a":{"b":[1,2]},"a":3}`, path: "a", dup: true},
		{name: "trailing data", in: `{"a":1} {}`, trailing: true},
		{name: "syntax error", in: `{"a":}`, syntax: true},
		{name: "empty", in: ``, syntax: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := strictjson.Check([]byte(tt.in))
			switch {
			case tt.dup:
				require.ErrorIs(t, err, strictjson.ErrDuplicateKey)
				var e *strictjson.Error
				require.ErrorAs(t, err, &e)
				assert.Equal(t, tt.path, e.Path)
				assert.Contains(t, err.Error(), tt.path)
			case tt.trailing:
				require.ErrorIs(t, err, strictjson.ErrTrailingData)
			case tt.syntax:
				require.Error(t, err)
				assert.NotErrorIs(t, err, strictjson.ErrDuplicateKey)
			default:
				require.NoError(t, err)
			}
		})
	}
}

// FuzzCheck checks that Check never panics and accepts every single JSON
// value encoding/json accepts once it has no repeated keys (re-encoding
// through a map removes repeats).
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,{"b":[]}]`, `{"a":1,"a":2}`, `"x"`, `{"a":{"a":{"a":1}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		_ = strictjson.Check(in)
		var v any
		if json.Unmarshal(in, &v) != nil {
			return
		}
		clean, err := json.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, strictjson.Check(clean))
	})
}
