//go:build linux

package hostcfg_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// ExampleCommand runs touch once: the first walk runs it because what it
// Creates is missing, the second finds it and runs nothing. A command that
// fails carries its exit code and the tail of its output, secrets
// redacted.
func ExampleCommand() {
	dir, _ := os.MkdirTemp("", "hostcfg-example-*")
	defer os.RemoveAll(dir)
	_ = os.MkdirAll(filepath.Join(dir, "var/lib/app"), 0o755)
	root, err := hostcfg.OpenRoot(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer root.Close()

	initDB := &hostcfg.Command{
		Root:    root,
		Name:    "init-db",
		Argv:    []string{"touch", filepath.Join(root.Dir(), "var/lib/app/.initialized")},
		Creates: "/var/lib/app/.initialized",
	}
	g := converge.NewGraph()
	g.Add(initDB.Node(), converge.Present)
	ctx := context.Background()
	for range 2 {
		rep, err := converge.Apply(ctx, g)
		if err != nil {
			fmt.Println(err)
			return
		}
		res, _ := rep.Item(initDB.ID())
		fmt.Println(res.Outcome, "-", res.After.(hostcfg.CommandState).Reason)
	}

	migrate := &hostcfg.Command{
		Root:   root,
		Name:   "migrate",
		Shell:  true,
		Argv:   []string{`echo "connecting with $DB_PASSWORD"; exit 2`},
		Env:    []string{"DB_PASSWORD=hunter2"},
		Unless: []string{"false"},
	}
	g = converge.NewGraph()
	g.Add(migrate.Node(), converge.Present)
	_, err = converge.Apply(ctx, g)
	var ce *hostcfg.CommandError
	if errors.As(err, &ce) {
		fmt.Println(ce.ExitCode, ce.Output)
	}
	// Output:
	// changed - /var/lib/app/.initialized exists
	// unchanged - /var/lib/app/.initialized exists
	// 2 connecting with [redacted]
}
