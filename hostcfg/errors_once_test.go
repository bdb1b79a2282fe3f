package hostcfg

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// namings counts the times msg names the item id: occurrences of id that
// are not part of a path (the ID "hostname" inside "/etc/hostname" is the
// path of the file, not the item). An ID with special characters counts
// as converge quotes it.
func namings(msg, id string) int {
	q := strconv.Quote(id)
	id = q[1 : len(q)-1]
	n := 0
	for i := 0; ; {
		j := strings.Index(msg[i:], id)
		if j < 0 {
			return n
		}
		if at := i + j; at == 0 || msg[at-1] != '/' {
			n++
		}
		i += j + len(id)
	}
}

// TestItemErrorsNameTheItemOnce runs an item into every error constructor
// of the package, through a walk: the *converge.ItemError the walk returns
// names the item once (the hostcfg error inside it does not repeat the
// ID), carries one "hostcfg: " prefix, and still matches the package's
// typed error and sentinel.
func TestItemErrorsNameTheItemOnce(t *testing.T) {
	type setup struct {
		dir, outside string
		r            *Root
	}
	var nilRoot *Root
	cases := []struct {
		name string
		item func(s setup) converge.Node
		// prepare, when set, changes the file system before the walk.
		prepare func(t *testing.T, s setup)
		is      error
		as      any
	}{
		{name: "configkey invalid key", item: func(s setup) converge.Node {
			return NewConfigFile(s.r, "/config.txt").Key("", "gpu=mem", "1").Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "configkey invalid value", item: func(s setup) converge.Node {
			return NewConfigFile(s.r, "/config.txt").Key("", "gpu_mem", "1\n2").Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "configkey invalid section", item: func(s setup) converge.Node {
			return NewConfigFile(s.r, "/config.txt").Key("pi4\nx", "gpu_mem", "1").Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "configkey key that does not read back", item: func(s setup) converge.Node {
			return NewConfigFile(s.r, "/config.txt").Key("", "#gpu", "1").Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "configkey repeatable as key", item: func(s setup) converge.Node {
			return NewConfigFile(s.r, "/config.txt").Key("", "dtoverlay", "vc4").Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "configkey without file", item: func(setup) converge.Node {
			return (&ConfigKey{Key: "gpu_mem", Value: "1"}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "configkey repeated key", item: func(s setup) converge.Node {
			return NewConfigFile(s.r, "/config.txt").Key("", "gpu_mem", "1").Node()
		}, prepare: func(t *testing.T, s setup) {
			writeFile(t, filepath.Join(s.dir, "config.txt"), "gpu_mem=2\ngpu_mem=3\n")
		}, is: ErrRepeatedKey, as: new(*RepeatedKeyError)},
		{name: "file nil root", item: func(setup) converge.Node {
			return (&File{Root: nilRoot, Path: "/etc/f"}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "file mode", item: func(s setup) converge.Node {
			return (&File{Root: s.r, Path: "/etc/f", Mode: os.ModeDir | 0o644}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "file wrong type", item: func(s setup) converge.Node {
			return (&File{Root: s.r, Path: "/etc/f"}).Node()
		}, prepare: func(t *testing.T, s setup) {
			require.NoError(t, os.MkdirAll(filepath.Join(s.dir, "etc/f"), 0o755))
		}, is: ErrWrongType, as: new(*PathError)},
		{name: "file escape", item: func(s setup) converge.Node {
			return (&File{Root: s.r, Path: "/etc/f"}).Node()
		}, prepare: func(t *testing.T, s setup) {
			require.NoError(t, os.Symlink(s.outside, filepath.Join(s.dir, "etc")))
		}, is: ErrEscape, as: new(*EscapeError)},
		{name: "file invalid path", item: func(s setup) converge.Node {
			return (&File{Root: s.r, Path: "/"}).Node()
		}, is: ErrInvalidPath, as: new(*PathError)},
		{name: "file unknown owner", item: func(s setup) converge.Node {
			return (&File{Root: s.r, Path: "/etc/f", Owner: &Ownership{User: "nobody-here"}}).Node()
		}, is: ErrUnknownOwner, as: new(*OwnerError)},
		{name: "file owner needs root", item: func(s setup) converge.Node {
			return (&File{Root: s.r, Path: "/etc/f", Owner: &Ownership{UID: 4321}}).Node()
		}, is: ErrNeedRoot, as: new(*PathError)},
		{name: "dir mode", item: func(s setup) converge.Node {
			return (&Dir{Root: s.r, Path: "/etc/d", Mode: os.ModeSymlink}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "symlink empty target", item: func(s setup) converge.Node {
			return (&Symlink{Root: s.r, Path: "/etc/l"}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "symlink target escapes", item: func(s setup) converge.Node {
			return (&Symlink{Root: s.r, Path: "/etc/l", Target: "../../x"}).Node()
		}, is: ErrEscape, as: new(*EscapeError)},
		{name: "line terminator", item: func(s setup) converge.Node {
			return (&Line{Root: s.r, Path: "/etc/f", Line: "a\nb"}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "line mode", item: func(s setup) converge.Node {
			return (&Line{Root: s.r, Path: "/etc/f", Line: "a", Mode: os.ModeSetuid | 0o644}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "hostname invalid", item: func(s setup) converge.Node {
			return (&Hostname{Root: s.r, Name: "a b"}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "hostname nil root", item: func(setup) converge.Node {
			return (&Hostname{Name: "h"}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "hostname wrong type", item: func(s setup) converge.Node {
			return (&Hostname{Root: s.r, Name: "h"}).Node()
		}, prepare: func(t *testing.T, s setup) {
			require.NoError(t, os.MkdirAll(filepath.Join(s.dir, "etc/hostname"), 0o755))
		}, is: ErrWrongType, as: new(*PathError)},
		{name: "sysctl invalid key", item: func(s setup) converge.Node {
			return (&Sysctl{Root: s.r, Key: "net..x", Value: "1"}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "sysctl value terminator", item: func(s setup) converge.Node {
			return (&Sysctl{Root: s.r, Key: "net.x", Value: "1\n2"}).Node()
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "sysctl empty value", item: func(s setup) converge.Node {
			return (&Sysctl{Root: s.r, Key: "net.x", Value: " "}).Node()
		}, prepare: func(t *testing.T, s setup) {
			writeFile(t, filepath.Join(s.dir, "proc/sys/net/x"), "0\n")
		}, is: ErrInvalidItem, as: new(*ItemError)},
		{name: "sysctl unknown parameter", item: func(s setup) converge.Node {
			return (&Sysctl{Root: s.r, Key: "net.x", Value: "1"}).Node()
		}, is: os.ErrNotExist, as: new(*PathError)},
	}
	// Not root: owner changes need it (ErrNeedRoot).
	euid := geteuid
	geteuid = func() int { return 4242 }
	t.Cleanup(func() { geteuid = euid })
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.is == ErrNeedRoot && !ownersSupported {
				t.Skip("no owners on this system")
			}
			r, dir, outside := newRoot(t)
			s := setup{dir: dir, outside: outside, r: r}
			if tc.prepare != nil {
				tc.prepare(t, s)
			}
			n := tc.item(s)
			id := string(n.ID())
			_, err := converge.Apply(context.Background(), graph(n))
			require.Error(t, err)
			var ie *converge.ItemError
			require.True(t, errors.As(err, &ie), "%v", err)
			require.ErrorIs(t, ie, tc.is)
			require.ErrorAs(t, ie, tc.as)
			msg := ie.Error()
			assert.Equal(t, 1, namings(msg, id), "the item %s is named once: %s", id, msg)
			assert.Equal(t, 1, strings.Count(msg, "hostcfg: "), "one package prefix: %s", msg)
			assert.NotRegexp(t, regexp.MustCompile(`\b(a|A) [aeiou]`), msg, "articles: %s", msg)
		})
	}
}
