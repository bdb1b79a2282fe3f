package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// unpublished names the workspace modules that are tools of this
// repository, not libraries for others: they get no tag and may require
// anything.
var unpublished = map[string]bool{
	"bench":   true,
	"release": true,
}

// commands names the workspace modules that are commands, installed with
// `go install <module>@<version>`. go install refuses a module whose
// go.mod has replace directives, so such a module is tagged with a go.mod
// without them (see taggedGoMod); the replace lines, which serve building
// it alone inside the repository, come back in a commit after the tags.
var commands = map[string]bool{
	"convergectl": true,
}

// workModule is one module of the workspace.
type workModule struct {
	Dir       string // relative to the repository root, "." for the core
	Path      string // module path
	Published bool   // tagged at every release
	Command   bool   // installed with go install: tagged without replace lines
	file      *modfile.File
	raw       []byte
}

// Tag is the git tag that names version v of this module, following Go's
// rule for modules in subdirectories: the directory, a slash, the version.
func (m workModule) Tag(v string) string {
	if m.Dir == "." {
		return v
	}
	return m.Dir + "/" + v
}

// readModules reads go.work under root and every module it uses, the core
// first and the rest in directory order.
func readModules(root string) ([]workModule, error) {
	workPath := filepath.Join(root, "go.work")
	data, err := os.ReadFile(workPath)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	wf, err := modfile.ParseWork(workPath, data, nil)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	var mods []workModule
	for _, u := range wf.Use {
		dir := filepath.ToSlash(filepath.Clean(u.Path))
		gomod := filepath.Join(root, dir, "go.mod")
		raw, err := os.ReadFile(gomod)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		f, err := modfile.Parse(gomod, raw, nil)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		if f.Module == nil {
			return nil, fmt.Errorf("release: %s has no module line", gomod)
		}
		mods = append(mods, workModule{
			Dir:       dir,
			Path:      f.Module.Mod.Path,
			Published: !unpublished[dir],
			Command:   commands[dir],
			file:      f,
			raw:       raw,
		})
	}
	sort.SliceStable(mods, func(i, j int) bool {
		if (mods[i].Dir == ".") != (mods[j].Dir == ".") {
			return mods[i].Dir == "."
		}
		return mods[i].Dir < mods[j].Dir
	})
	if len(mods) == 0 || mods[0].Dir != "." {
		return nil, errors.New("release: go.work does not use the core module (.)")
	}
	return mods, nil
}

// siblings maps the path of every module of the workspace to its module.
func siblings(mods []workModule) map[string]workModule {
	byPath := make(map[string]workModule, len(mods))
	for _, m := range mods {
		byPath[m.Path] = m
	}
	return byPath
}

// A SkewError says that the modules do not require each other at one
// version: the lockstep rule is broken.
type SkewError struct {
	Versions map[string][]string // version -> "module requires sibling"
}

// Error lists each version with the requirements that name it.
func (e *SkewError) Error() string {
	var vs []string
	for v := range e.Versions {
		vs = append(vs, v)
	}
	sort.Strings(vs)
	var b strings.Builder
	b.WriteString("release: sibling modules are required at more than one version:")
	for _, v := range vs {
		fmt.Fprintf(&b, " %s (%s);", v, strings.Join(e.Versions[v], ", "))
	}
	return strings.TrimSuffix(b.String(), ";")
}

// lockstepVersion returns the one version at which the modules require
// their published siblings, or a *SkewError when there is more than one,
// or an error when a module requires an unpublished sibling.
func lockstepVersion(mods []workModule) (string, error) {
	byPath := siblings(mods)
	seen := map[string][]string{}
	for _, m := range mods {
		for _, r := range m.file.Require {
			sib, ok := byPath[r.Mod.Path]
			if !ok {
				continue
			}
			if !sib.Published {
				return "", fmt.Errorf("release: %s requires %s, which is not published", m.Path, r.Mod.Path)
			}
			seen[r.Mod.Version] = append(seen[r.Mod.Version], m.Dir+" requires "+r.Mod.Path)
		}
	}
	switch len(seen) {
	case 0:
		return "", errors.New("release: no module requires a sibling")
	case 1:
		for v := range seen {
			if !semver.IsValid(v) || v == "v0.0.0" {
				return "", fmt.Errorf("release: sibling requirement %q is not a release version", v)
			}
			return v, nil
		}
	}
	return "", &SkewError{Versions: seen}
}

// setVersion rewrites, in memory, every requirement of a sibling module to
// version v and returns the go.mod files that changed, by directory.
func setVersion(mods []workModule, v string) (map[string][]byte, error) {
	byPath := siblings(mods)
	changed := map[string][]byte{}
	for _, m := range mods {
		f, err := modfile.Parse(m.Dir+"/go.mod", m.raw, nil)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		touched := false
		for _, r := range f.Require {
			if _, ok := byPath[r.Mod.Path]; !ok || r.Mod.Version == v {
				continue
			}
			if err := f.AddRequire(r.Mod.Path, v); err != nil {
				return nil, fmt.Errorf("release: %s: %w", m.Dir, err)
			}
			touched = true
		}
		if !touched {
			continue
		}
		out, err := f.Format()
		if err != nil {
			return nil, fmt.Errorf("release: %s: %w", m.Dir, err)
		}
		changed[m.Dir] = out
	}
	return changed, nil
}

// taggedGoMod returns the go.mod data of module m as it is tagged: data
// itself, or for a command (m.Command) data without its replace
// directives, which go install refuses.
func taggedGoMod(m workModule, data []byte) ([]byte, error) {
	if !m.Command {
		return data, nil
	}
	f, err := modfile.Parse(m.Dir+"/go.mod", data, nil)
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	for _, r := range append([]*modfile.Replace(nil), f.Replace...) {
		if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
			return nil, fmt.Errorf("release: %s: %w", m.Dir, err)
		}
	}
	f.Cleanup()
	out, err := f.Format()
	if err != nil {
		return nil, fmt.Errorf("release: %s: %w", m.Dir, err)
	}
	return out, nil
}
