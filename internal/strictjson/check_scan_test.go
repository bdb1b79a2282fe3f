package strictjson

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCheckFindsRepeatsTheTokenWalkFinds(t *testing.T) {
	many := func(dup string) string {
		var b strings.Builder
		b.WriteString(`{"list":[{},{"deep":{`)
		for i := range 40 {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		b.WriteString(dup + `}}]}`)
		return b.String()
	}
	tests := []struct{ name, in, path string }{
		{"escaped repeat", `{"a":1,"\u0061":2}`, "a"},
		{"repeat among many keys", many(`"k7":0`), "list[1].deep.k7"},
		{"no repeat among many keys", many(`"k40":0`), ""},
		{"frames reused at the same depth", `[{"a":1},{"b":{"c":1}},{"b":{"c":1,"c":2}}]`, "[2].b.c"},
		{"quote escaped inside a key", `{"a\"b":1,"a\"b":2}`, `a"b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Check([]byte(tt.in))
			if tt.path == "" {
				require.NoError(t, err)
				require.NoError(t, checkTokens([]byte(tt.in)))
				return
			}
			var e *Error
			require.ErrorAs(t, err, &e)
			assert.Equal(t, tt.path, e.Path)
			require.ErrorAs(t, checkTokens([]byte(tt.in)), &e)
			assert.Equal(t, tt.path, e.Path, "both walks name the same key")
		})
	}
}

// FuzzCheckAgreesWithTheTokenWalk checks the byte scanner against the walk
// over encoding/json's tokens: both accept the same documents and name the
// same repeated key.
func FuzzCheckAgreesWithTheTokenWalk(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `[1,{"b":[]}]`, `{"a":1,"a":2}`, `"x"`, `{"a":{"a":{"a":1}}}`,
		`{"\u0061":1,"a":2}`, `[{"a":[{"b":1,"b":2}]}]`, `{"a":null} `, `{"a":1} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var sc scanner
		_ = sc.scan(in) // never panics, even on what is not JSON
		fast := Check(in)
		slow := checkTokens(in)
		if (fast == nil) != (slow == nil) {
			t.Fatalf("scan: %v, token walk: %v", fast, slow)
		}
		var fe, se *Error
		if errors.As(fast, &fe) && errors.Is(fast, ErrDuplicateKey) {
			require.ErrorAs(t, slow, &se)
			assert.Equal(t, se.Path, fe.Path)
		}
	})
}
