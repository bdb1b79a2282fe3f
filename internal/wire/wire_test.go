package wire

import (
	"testing"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/stretchr/testify/assert"
)

// TestPath: a JSON pointer becomes the field path errors name; a token of
// digits is an index, except a member name at the end.
func TestPath(t *testing.T) {
	tests := []struct {
		ptr  jsontext.Pointer
		name bool
		want string
	}{
		{"", false, ""},
		{"/revision", false, "revision"},
		{"/items/3/state", false, "items[3].state"},
		{"/items/3", false, "items[3]"},
		{"/items/0/7", true, "items[0].7"},
		{"/a~1b/0", false, "a/b[0]"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, Path(tt.ptr, tt.name), "%s", tt.ptr)
	}
}
