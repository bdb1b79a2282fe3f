package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

// writeProxy writes, under dir, a module proxy in the layout that
// GOPROXY=file://dir reads, enough for a machine that reaches nothing
// else: for every published module of the repository at root, its go.mod,
// its zip (made with golang.org/x/mod/zip from the working tree, the files
// a tag would publish, a command's go.mod without its replace lines) and
// its info, at version v; every module they need from outside
// (writeDependencies); and dir/go.sum, the checksums of all of them
// (writeSums). It returns the repository's module paths written.
func writeProxy(root, dir, v string, when time.Time) ([]string, error) {
	mods, err := readModules(root)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, m := range mods {
		if !m.Published {
			continue
		}
		if err := writeProxyModule(root, dir, m, v, when); err != nil {
			return nil, err
		}
		paths = append(paths, m.Path)
	}
	if _, err := writeDependencies(root, dir, mods); err != nil {
		return nil, err
	}
	if err := writeSums(dir); err != nil {
		return nil, err
	}
	return paths, nil
}

func writeProxyModule(root, dir string, m workModule, v string, when time.Time) error {
	ep, err := module.EscapePath(m.Path)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	ev, err := module.EscapeVersion(v)
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	vdir := filepath.Join(dir, filepath.FromSlash(ep), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return fmt.Errorf("release: %w", err)
	}

	zf, err := os.Create(filepath.Join(vdir, ev+".zip"))
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	mv := module.Version{Path: m.Path, Version: v}
	gomod, err := taggedGoMod(m, m.raw)
	if err != nil {
		zf.Close()
		return err
	}
	src := filepath.Join(root, m.Dir)
	if m.Command {
		// The tree as tagged: go.mod without its replace lines.
		tmp, err := os.MkdirTemp("", "release-proxy-")
		if err != nil {
			zf.Close()
			return fmt.Errorf("release: %w", err)
		}
		defer os.RemoveAll(tmp)
		src = filepath.Join(tmp, "m")
		if err := os.CopyFS(src, os.DirFS(filepath.Join(root, m.Dir))); err != nil {
			zf.Close()
			return fmt.Errorf("release: %w", err)
		}
		if err := os.WriteFile(filepath.Join(src, "go.mod"), gomod, 0o644); err != nil {
			zf.Close()
			return fmt.Errorf("release: %w", err)
		}
	}
	if err := zip.CreateFromDir(zf, mv, src); err != nil {
		zf.Close()
		return fmt.Errorf("release: module %s: %w", m.Path, err)
	}
	if err := zf.Close(); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if err := os.WriteFile(filepath.Join(vdir, ev+".mod"), gomod, 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, when.UTC()})
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	if err := os.WriteFile(filepath.Join(vdir, ev+".info"), info, 0o644); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return os.WriteFile(filepath.Join(vdir, "list"), []byte(v+"\n"), 0o644)
}

// goListed is what `go mod download -json` prints of one module.
type goListed struct {
	Path, Version string
	Error         string
	Info, GoMod   string // files in the module cache
	Zip           string
}

// writeDependencies writes under dir, in the same layout, every module
// from outside the repository that the published modules need: the
// go.mod (and info) of every module version of their module graphs that
// go read to select versions (a version pruned from the graph is left
// out), and the zip of every module they select. It takes them from the module cache, downloading
// into it what it lacks (`go mod graph` and `go mod download -json all`
// in each published module, outside the workspace), so it needs the
// network only for modules this machine never fetched. It returns the
// module versions written.
func writeDependencies(root, dir string, mods []workModule) ([]module.Version, error) {
	ours := map[string]bool{}
	for _, m := range mods {
		ours[m.Path] = true
	}
	cache, err := goOutput(root, "env", "GOMODCACHE")
	if err != nil {
		return nil, err
	}
	cache = filepath.Join(strings.TrimSpace(cache), "cache", "download")
	mentioned := map[module.Version]bool{}
	selected := map[module.Version]goListed{}
	scratch, err := os.MkdirTemp("", "release-deps-")
	if err != nil {
		return nil, fmt.Errorf("release: %w", err)
	}
	defer os.RemoveAll(scratch)
	for _, m := range mods {
		if !m.Published {
			continue
		}
		mdir := filepath.Join(root, m.Dir)
		// go reads and writes a copy of the module's go.mod and go.sum
		// (-modfile), so the tree is left as it was.
		modfile := filepath.Join(scratch, strings.ReplaceAll(m.Dir, "/", "_")+".mod")
		if err := copyFile(filepath.Join(mdir, "go.mod"), modfile); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		if err := copyFile(filepath.Join(mdir, "go.sum"), strings.TrimSuffix(modfile, ".mod")+".sum"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("release: %w", err)
		}
		graph, err := goOutput(mdir, "mod", "graph", "-modfile="+modfile)
		if err != nil {
			return nil, err
		}
		for _, field := range strings.Fields(graph) {
			p, v, ok := strings.Cut(field, "@")
			if ok && !ours[p] && p != "go" && p != "toolchain" {
				mentioned[module.Version{Path: p, Version: v}] = true
			}
		}
		out, err := goOutput(mdir, "mod", "download", "-modfile="+modfile, "-json", "all")
		if err != nil {
			return nil, err
		}
		dec := json.NewDecoder(strings.NewReader(out))
		for dec.More() {
			var l goListed
			if err := dec.Decode(&l); err != nil {
				return nil, fmt.Errorf("release: go mod download in %s: %w", m.Dir, err)
			}
			if ours[l.Path] || l.Zip == "" {
				continue // a sibling, replaced by its directory
			}
			if l.Error != "" {
				return nil, fmt.Errorf("release: go mod download in %s: %s@%s: %s", m.Dir, l.Path, l.Version, l.Error)
			}
			mv := module.Version{Path: l.Path, Version: l.Version}
			selected[mv] = l
			mentioned[mv] = true
		}
	}
	versions := map[string][]string{}
	var written []module.Version
	for mv := range mentioned {
		ep, err := module.EscapePath(mv.Path)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		ev, err := module.EscapeVersion(mv.Version)
		if err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		from := filepath.Join(cache, filepath.FromSlash(ep), "@v", ev)
		to := filepath.Join(dir, filepath.FromSlash(ep), "@v", ev)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
		_, sel := selected[mv]
		if _, err := os.Stat(from + ".mod"); !sel && errors.Is(err, os.ErrNotExist) {
			// Named by a go.mod of the graph, but pruned from it: go
			// never read it, and a consumer's go does not either.
			continue
		}
		exts := []string{".mod", ".info"}
		if sel {
			exts = append(exts, ".zip")
		}
		for _, ext := range exts {
			if err := linkFile(from+ext, to+ext); err != nil {
				if ext == ".info" && errors.Is(err, os.ErrNotExist) {
					continue // go reads a version's info only to resolve a query
				}
				return nil, fmt.Errorf("release: %s@%s: %w", mv.Path, mv.Version, err)
			}
		}
		versions[mv.Path] = append(versions[mv.Path], mv.Version)
		written = append(written, mv)
	}
	for p, vs := range versions {
		ep, _ := module.EscapePath(p)
		semver.Sort(vs)
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(ep), "@v", "list"), []byte(strings.Join(vs, "\n")+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("release: %w", err)
		}
	}
	return written, nil
}

// writeSums writes dir/go.sum: the checksum lines (go.mod and, where the
// proxy holds it, the zip) of every module version under dir, as go
// computes them. A consumer that starts from this go.sum never asks the
// checksum database about a module the proxy serves.
func writeSums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Ext(path) != ".mod" {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		epath, ever, ok := strings.Cut(filepath.ToSlash(rel), "/@v/")
		if !ok {
			return nil
		}
		p, err := module.UnescapePath(epath)
		if err != nil {
			return err
		}
		v, err := module.UnescapeVersion(strings.TrimSuffix(ever, ".mod"))
		if err != nil {
			return err
		}
		gomod, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h, err := dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(gomod)), nil
		})
		if err != nil {
			return err
		}
		lines = append(lines, fmt.Sprintf("%s %s/go.mod %s", p, v, h))
		zipPath := strings.TrimSuffix(path, ".mod") + ".zip"
		if _, err := os.Stat(zipPath); err == nil {
			h, err := dirhash.HashZip(zipPath, dirhash.Hash1)
			if err != nil {
				return fmt.Errorf("%s: %w", zipPath, err)
			}
			lines = append(lines, fmt.Sprintf("%s %s %s", p, v, h))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("release: %w", err)
	}
	sort.Strings(lines)
	return os.WriteFile(filepath.Join(dir, "go.sum"), []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// goOutput runs go with args in dir, outside the workspace, and returns
// its standard output.
func goOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("release: go %s in %s: %w: %s", strings.Join(args, " "), dir, err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// linkFile copies a file of the module cache, which never changes, as a
// hard link when it can.
func linkFile(from, to string) error {
	if err := os.Link(from, to); err == nil || errors.Is(err, os.ErrExist) {
		return nil
	}
	return copyFile(from, to)
}

// copyFile copies a file.
func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}
