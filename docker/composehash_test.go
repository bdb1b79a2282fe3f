package docker_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/compose-spec/compose-go/v2/dotenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/docker"
)

// TestComposeHashIsCompose: the hash the loader writes is the one compose
// itself computes ("docker compose config --hash"), service by service, on
// every file of the corpus (and the golden project) it loads strictly; a
// service given no hash is counted apart.
func TestComposeHashIsCompose(t *testing.T) {
	if testing.Short() {
		t.Skip("runs compose's CLI on the corpus; skipped in -short mode")
	}
	bin := composeCLI(t)
	name := regexp.MustCompile(`^(docker-)?compose[\w.-]*\.ya?ml$`)
	var files []string
	for _, root := range []string{"testdata/corpus", "testdata/v0.1.0"} {
		require.NoError(t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && name.MatchString(d.Name()) {
				files = append(files, p)
			}
			return err
		}))
	}
	sort.Strings(files)
	var (
		mu                 sync.Mutex
		same, differ, none int
		wg                 sync.WaitGroup
	)
	sem := make(chan struct{}, 4) // compose's CLI, a few at a time
	for i, f := range files {
		env := map[string]string{}
		if _, err := os.Stat(filepath.Join(filepath.Dir(f), ".env")); err == nil {
			env, err = dotenv.GetEnvFromFile(map[string]string{}, []string{filepath.Join(filepath.Dir(f), ".env")})
			require.NoError(t, err, f)
		}
		project := fmt.Sprintf("hash%d", i)
		p, err := docker.LoadComposeFile(context.Background(), f, docker.LoadOptions{ProjectName: project, Env: env})
		if err != nil {
			continue
		}
		abs, err := filepath.Abs(f)
		require.NoError(t, err)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cmd := exec.Command(bin, "-p", project, "-f", abs, "config", "--hash", "*")
			cmd.Dir = filepath.Dir(abs)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
			out, err := cmd.Output()
			if err != nil {
				t.Logf("compose refuses %s: %v", f, err)
				return
			}
			theirs := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if svc, h, ok := strings.Cut(line, " "); ok {
					theirs[svc] = h
				}
			}
			mu.Lock()
			defer mu.Unlock()
			for _, c := range p.Containers {
				switch {
				case c.ComposeHash == "":
					none++
				case c.ComposeHash == theirs[c.Service]:
					same++
				default:
					differ++
					t.Errorf("%s: service %s: compose's hash %s, ours %s", f, c.Service, theirs[c.Service], c.ComposeHash)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("services: %d with compose's hash, %d with another, %d given none", same, differ, none)
	assert.Positive(t, same)
}
