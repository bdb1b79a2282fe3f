package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// hostcfgFiles writes n small files in 10 directories under a fresh root
// and returns the root's directory and the files' paths inside it with
// their contents.
func hostcfgFiles(b *testing.B, n int) (string, []string, [][]byte) {
	dir := b.TempDir()
	paths := make([]string, n)
	contents := make([][]byte, n)
	for i := range n {
		paths[i] = fmt.Sprintf("/srv/d%d/f%04d.conf", i%10, i)
		contents[i] = fmt.Appendf(nil, "setting_%d = %d\n", i, i)
		full := filepath.Join(dir, paths[i])
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(full, contents[i], 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir, paths, contents
}

// BenchmarkHostcfgNoop1k: one converge.Apply over 1,000 hostcfg.File items
// that are already converged; compare with BenchmarkHostcfgFloor1k.
func BenchmarkHostcfgNoop1k(b *testing.B) {
	const n = 1000
	dir, paths, contents := hostcfgFiles(b, n)
	root, err := hostcfg.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	g := converge.NewGraph()
	for i := range n {
		g.Add((&hostcfg.File{Root: root, Path: paths[i], Content: contents[i], Mode: 0o644}).Node(), converge.Present)
	}
	ctx := context.Background()
	if rep, err := converge.Apply(ctx, g); err != nil || rep.Count(converge.OutcomeUnchanged) != n {
		b.Fatalf("not converged: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if rep, err := converge.Apply(ctx, g); err != nil || rep.Count(converge.OutcomeUnchanged) != n {
			b.Fatalf("not a no-op: %v", err)
		}
	}
}

// BenchmarkHostcfgFloor1k is the floor of BenchmarkHostcfgNoop1k: one loop
// opens, stats, reads and compares the same 1,000 files through an os.Root
// — the system calls any check of file content and mode must make.
func BenchmarkHostcfgFloor1k(b *testing.B) {
	const n = 1000
	dir, paths, contents := hostcfgFiles(b, n)
	root, err := os.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	buf := make([]byte, 4096)
	b.ReportAllocs()
	for b.Loop() {
		for i, p := range paths {
			f, err := root.Open(strings.TrimPrefix(p, "/"))
			if err != nil {
				b.Fatal(err)
			}
			fi, err := f.Stat()
			if err != nil {
				b.Fatal(err)
			}
			k, err := f.Read(buf)
			f.Close()
			if err != nil || fi.Mode().Perm() != 0o644 || !bytes.Equal(buf[:k], contents[i]) {
				b.Fatalf("%s differs: %v", p, err)
			}
		}
	}
}

// configTxt200 writes a Raspberry Pi config.txt with 200 keys in [all],
// [pi4] and [cm4] sections, dated an hour ago as on a device, and returns
// the root's directory, the file's path and each key's section and value.
func configTxt200(b *testing.B) (string, string, [][3]string) {
	dir := b.TempDir()
	var sb strings.Builder
	sb.WriteString("# http://rptl.io/configtxt\ndtparam=audio=on\ncamera_auto_detect=1\ndtoverlay=vc4-kms-v3d\nmax_framebuffers=2\n")
	keys := make([][3]string, 200)
	for i := range keys {
		section := []string{"all", "pi4", "cm4", "all"}[i%4]
		fmt.Fprintf(&sb, "[%s]\n# setting %d\nkey_%03d=%d\n", section, i, i, i)
		keys[i] = [3]string{section, fmt.Sprintf("key_%03d", i), fmt.Sprint(i)}
	}
	const path = "/boot/firmware/config.txt"
	full := filepath.Join(dir, path)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(full, old, old); err != nil {
		b.Fatal(err)
	}
	return dir, path, keys
}

// BenchmarkConfigTxtNoop200: one converge.Apply over 200 ConfigKey items of
// one converged config.txt; compare with BenchmarkConfigTxtFloor200.
func BenchmarkConfigTxtNoop200(b *testing.B) {
	dir, path, keys := configTxt200(b)
	root, err := hostcfg.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	cf := hostcfg.NewConfigFile(root, path)
	g := converge.NewGraph()
	for _, k := range keys {
		g.Add(cf.Key(k[0], k[1], k[2]).Node(), converge.Present)
	}
	ctx := context.Background()
	if rep, err := converge.Apply(ctx, g); err != nil || rep.Count(converge.OutcomeUnchanged) != len(keys) {
		b.Fatalf("not converged: %v", err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if rep, err := converge.Apply(ctx, g); err != nil || rep.Count(converge.OutcomeUnchanged) != len(keys) {
			b.Fatalf("not a no-op: %v", err)
		}
	}
}

// BenchmarkConfigTxtFloor200 is the floor of BenchmarkConfigTxtNoop200: one
// read and parse of the same file.
func BenchmarkConfigTxtFloor200(b *testing.B) {
	dir, path, _ := configTxt200(b)
	full := filepath.Join(dir, path)
	b.ReportAllocs()
	for b.Loop() {
		data, err := os.ReadFile(full)
		if err != nil {
			b.Fatal(err)
		}
		if doc := hostcfg.ParseConfig(data); doc == nil {
			b.Fatal("no document")
		}
	}
}
