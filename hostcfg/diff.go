package hostcfg

import (
	"fmt"
	"io/fs"

	udiff "github.com/aymanbagabas/go-udiff"
	"github.com/convergekit/converge"
)

// unifiedDiff renders the change of the file name from old to new as a
// unified diff; a side that does not exist is labelled /dev/null. It
// returns "" when nothing changes.
func unifiedDiff(name string, old, new []byte, oldExists, newExists bool) string {
	if oldExists == newExists && string(old) == string(new) {
		return ""
	}
	from, to := "a"+name, "b"+name
	if !oldExists {
		from = "/dev/null"
	}
	if !newExists {
		to = "/dev/null"
	}
	d := udiff.Unified(from, to, string(old), string(new))
	if d == "" {
		// An empty file created or removed: no lines differ, say so.
		d = fmt.Sprintf("--- %s\n+++ %s\n", from, to)
	}
	return d
}

// metaDiff renders a change of mode or owner as a line in the style of git.
func metaDiff(name string, oldMode, newMode fs.FileMode, oldUID, oldGID, newUID, newGID int) string {
	var s string
	if oldMode != newMode {
		s += fmt.Sprintf("mode %s: %04o -> %04o\n", name, uint32(oldMode.Perm()), uint32(newMode.Perm()))
	}
	if oldUID != newUID || oldGID != newGID {
		s += fmt.Sprintf("owner %s: %d:%d -> %d:%d\n", name, oldUID, oldGID, newUID, newGID)
	}
	return s
}

// differ is a state that carries the diff of the change that reached it.
type differ interface{ diffText() string }

// ItemDiff is the diff of one item in a report.
type ItemDiff struct {
	ID   converge.ID
	Diff string
}

// Diffs returns, in report order, the diffs that the hostcfg items of a
// report carry in their After state: every file change a dry run would make
// (or an apply made, as seen from ApplyDry). Items of other packages and
// items without a change are left out.
func Diffs(rep *converge.Report) []ItemDiff {
	if rep == nil {
		return nil
	}
	var out []ItemDiff
	for _, it := range rep.Items {
		if d, ok := it.After.(differ); ok && d.diffText() != "" {
			out = append(out, ItemDiff{ID: it.ID, Diff: d.diffText()})
		}
	}
	return out
}
