package hostcfg

import (
	"encoding"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestResultEnumsMarshalByName walks the types that hostcfg items put in a
// report: every enumeration of this package among their fields must
// marshal to and from text (and so JSON) by name. Today there is none; the
// test keeps a new one from slipping in as a bare number.
func TestResultEnumsMarshalByName(t *testing.T) {
	textM := reflect.TypeFor[encoding.TextMarshaler]()
	textU := reflect.TypeFor[encoding.TextUnmarshaler]()
	pkg := reflect.TypeFor[FileState]().PkgPath()
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		switch typ.Kind() {
		case reflect.Struct:
			for i := range typ.NumField() {
				walk(typ.Field(i).Type)
			}
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Map:
			walk(typ.Elem())
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			if typ.PkgPath() == pkg {
				assert.True(t, typ.Implements(textM), "%s does not implement encoding.TextMarshaler", typ)
				assert.True(t, reflect.PointerTo(typ).Implements(textU), "%s does not implement encoding.TextUnmarshaler", typ)
			}
		}
	}
	for _, typ := range []reflect.Type{
		reflect.TypeFor[FileState](), reflect.TypeFor[DirState](), reflect.TypeFor[SymlinkState](),
		reflect.TypeFor[LineState](), reflect.TypeFor[ConfigKeyState](), reflect.TypeFor[SysctlState](),
		reflect.TypeFor[HostnameState](), reflect.TypeFor[ItemDiff](), reflect.TypeFor[ConfigEntry](),
	} {
		walk(typ)
	}
	assert.Greater(t, len(seen), 9, "the walk saw the state types and their fields")
}
