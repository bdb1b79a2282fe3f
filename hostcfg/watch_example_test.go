package hostcfg_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// A device agent watches the files its target manages and feeds the
// reconcile loop's Trigger, so a hand edit is repaired at once; the
// loop's own writes trigger nothing.
func ExampleWatch() {
	dir, _ := os.MkdirTemp("", "watch-example-")
	defer os.RemoveAll(dir)
	_ = os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	root, _ := hostcfg.OpenRoot(dir)
	defer root.Close()
	motd := &hostcfg.File{Root: root, Path: "/etc/motd", Content: []byte("managed by converge\n")}

	// In an agent: stop, err := hostcfg.Watch(ctx, root, paths, rec.Trigger, hostcfg.WatchConfig{})
	triggered := make(chan struct{}, 1)
	stop, err := hostcfg.Watch(context.Background(), root, []string{motd.Path}, func() { triggered <- struct{}{} }, hostcfg.WatchConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stop()

	g := converge.NewGraph()
	g.Add(motd.Node(), converge.Present)
	if _, err := converge.Apply(context.Background(), g); err != nil { // converge's write: no trigger
		fmt.Println(err)
		return
	}
	_ = os.WriteFile(filepath.Join(dir, "etc/motd"), []byte("edited by hand\n"), 0o644)
	select {
	case <-triggered:
		fmt.Println("hand edit: a pass is triggered")
	case <-time.After(10 * time.Second):
		fmt.Println("no trigger")
	}
	// Output: hand edit: a pass is triggered
}
