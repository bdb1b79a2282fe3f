package docker_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/convergekit/converge/docker"
)

// TestLoadComposeCorpus loads, strictly, every Compose file
// (docker-compose*.y*ml, compose*.y*ml) under the directory named by
// CONVERGE_COMPOSE_CORPUS, and logs how many load and why the others do
// not. It measures; it asserts only that every failure is one of the
// package's typed errors. Without the variable it is skipped. The files
// are not part of the repository: see docker/testdata/compose-corpus.txt
// for the public sources used.
func TestLoadComposeCorpus(t *testing.T) {
	root := os.Getenv("CONVERGE_COMPOSE_CORPUS")
	if root == "" {
		t.Skip("CONVERGE_COMPOSE_CORPUS names no directory of Compose files")
	}
	name := regexp.MustCompile(`^(docker-)?compose([.-][\w.-]+)?\.ya?ml$`)
	var files []string
	require := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	require(filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "node_modules" {
			return fs.SkipDir
		}
		if !d.IsDir() && name.MatchString(d.Name()) {
			files = append(files, p)
		}
		return nil
	}))
	sort.Strings(files)
	loaded := 0
	reasons := map[string]int{}
	for i, f := range files {
		_, err := docker.LoadComposeFile(context.Background(), f, docker.LoadOptions{ProjectName: fmt.Sprintf("corpus%d", i)})
		rel, _ := filepath.Rel(root, f)
		if err == nil {
			loaded++
			t.Logf("ok   %s", rel)
			continue
		}
		var ue *docker.UnsupportedError
		switch {
		case errors.As(err, &ue):
			for _, fld := range ue.Fields {
				parts := strings.Split(fld, ".")
				if len(parts) > 2 && parts[0] == "services" {
					parts = append([]string{"services.*"}, parts[2:]...)
				}
				reasons["unsupported "+strings.Join(parts, ".")]++
			}
		case errors.Is(err, docker.ErrInvalidSpec):
			reasons["invalid spec"]++
		case errors.Is(err, docker.ErrInvalidCompose):
			reasons["invalid compose"]++
		default:
			t.Errorf("%s: untyped error: %v", rel, err)
		}
		t.Logf("FAIL %s: %v", rel, err)
	}
	keys := make([]string, 0, len(reasons))
	for k := range reasons {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return reasons[keys[i]] > reasons[keys[j]] || reasons[keys[i]] == reasons[keys[j]] && keys[i] < keys[j]
	})
	for _, k := range keys {
		t.Logf("reason %3d  %s", reasons[k], k)
	}
	t.Logf("CORPUS: %d of %d Compose files load strictly", loaded, len(files))
}
