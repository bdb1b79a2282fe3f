package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/zip"
)

// writeProxy writes, under dir, a module proxy in the layout that
// GOPROXY=file://dir reads: for every published module of the repository
// at root, its go.mod, its zip (made with golang.org/x/mod/zip from the
// working tree, the files a tag would publish, a command's go.mod without
// its replace lines) and its info, at version v.
// It returns the module paths written.
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
