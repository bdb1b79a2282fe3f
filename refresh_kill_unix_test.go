//go:build unix

package converge_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/convergetest"
)

// The child of refreshKilledCase reads its files from these variables.
const (
	refreshChildEnv  = "CONVERGE_REFRESH_KILL_CHILD"
	refreshChildDB   = "CONVERGE_REFRESH_KILL_DB"
	refreshChildConf = "CONVERGE_REFRESH_KILL_CONF"
	refreshLogKey    = "refresh/agent"
)

// refreshKillGraph is the agent's graph: a configuration file on disk and
// the service that restarts when it changes.
func refreshKillGraph(conf string, afterWrite func()) (*converge.Graph, *convergetest.RefreshItem, *confFile) {
	file := &confFile{path: conf, content: "listen 8080\n", afterWrite: afterWrite}
	svc := &convergetest.RefreshItem{Item: convergetest.Item{Key: "service:web", Goal: "running", Value: "running"}}
	g := converge.NewGraph()
	g.Add(converge.Wrap[string](file), converge.Present)
	g.Add(svc.Node(), converge.Present, file.ID())
	return g, svc, file
}

func walkWithBolt(t *testing.T, db string, g *converge.Graph) (*converge.Report, error) {
	t.Helper()
	store, err := boltstore.Open(db, boltstore.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, store.Close()) }()
	w, err := converge.NewWalker(converge.WalkerConfig{RefreshLog: converge.NewStoreRefreshLog(store, refreshLogKey)})
	require.NoError(t, err)
	return w.Apply(context.Background(), g)
}

// TestRefreshKilledChild is the agent that refreshKilledCase kills: it
// runs only as that child process. It writes the file, then kills itself
// with SIGKILL before the service's Refresh.
func TestRefreshKilledChild(t *testing.T) {
	if os.Getenv(refreshChildEnv) != "1" {
		t.Skip("the child process of TestRefreshTable")
	}
	g, svc, _ := refreshKillGraph(os.Getenv(refreshChildConf), func() {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // never returns: the process is gone
	})
	_, _ = walkWithBolt(t, os.Getenv(refreshChildDB), g)
	t.Fatalf("still alive after the write; refreshes: %d", svc.Refreshes())
}

// refreshKilledCase runs an agent in a child process that is killed with
// SIGKILL between the file's write and the service's restart, then runs
// the agent again, in this process, on the same bolt file: the service is
// refreshed exactly once and the file is not written again.
func refreshKilledCase(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "agent.db")
	conf := filepath.Join(dir, "web.conf")
	require.NoError(t, writeFile(conf, "listen 80\n"))

	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestRefreshKilledChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), refreshChildEnv+"=1", refreshChildDB+"="+db, refreshChildConf+"="+conf)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the child must die: %s", out)
	status, ok := ee.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, status.Signaled(), "killed by a signal: %s; output: %s", ee, out)
	require.Equal(t, syscall.SIGKILL, status.Signal())

	b, err := os.ReadFile(conf)
	require.NoError(t, err)
	require.Equal(t, "listen 8080\n", string(b), "the child wrote the file before it died")

	g, svc, file := refreshKillGraph(conf, nil)
	rep, err := walkWithBolt(t, db, g)
	require.NoError(t, err)
	res, _ := rep.Item(file.ID())
	assert.Equal(t, converge.OutcomeUnchanged, res.Outcome, "the file was written by the killed run")
	res, _ = rep.Item(svc.Key)
	assert.Equal(t, converge.OutcomeChanged, res.Outcome)
	assert.Equal(t, []converge.ID{file.ID()}, res.Refresh)
	assert.Equal(t, [][]converge.ID{{file.ID()}}, svc.RefreshedFor(), "refreshed exactly once")

	// After a restart, nothing is due any more.
	_, err = walkWithBolt(t, db, g)
	require.NoError(t, err)
	assert.Equal(t, 1, svc.Refreshes())
}
