package converge_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// firstProgram is README's first program, as written there (between the
// markers; TestReadmeFirstProgramIsTheExample holds them equal).
func firstProgram(ctx context.Context, rootDir string) error {
	// README: A first program (begin)
	root, err := hostcfg.OpenRoot(rootDir) // "/" on a device: every path stays inside this root
	if err != nil {
		return err
	}
	dir := &hostcfg.Dir{Root: root, Path: "/etc/app", Mode: 0o755}
	conf := &hostcfg.File{Root: root, Path: "/etc/app/app.conf", Content: []byte("listen = :8080\n")}
	boot := hostcfg.NewConfigFile(root, "/boot/firmware/config.txt")

	g := converge.NewGraph()
	g.Add(dir.Node(), converge.Present)            // Node() is converge.Wrap(item)
	g.Add(conf.Node(), converge.Present, dir.ID()) // after its directory
	g.Add(boot.Key("", "gpu_mem", "128").Node(), converge.Present)
	// Add returns nothing: the walk refuses a bad graph (ErrInvalidGraph).

	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 8}) // how a WalkerConfig takes effect
	if err != nil {
		return err
	}
	rep, err := w.ApplyDry(ctx, g) // what would change; writes nothing
	if err != nil {
		return err
	}
	fmt.Println("would change:", rep.IDs(converge.OutcomeWouldChange))
	rep, err = w.Apply(ctx, g) // change what differs, dependencies first, then verify
	if rep != nil {            // nil when the graph is invalid
		fmt.Print(rep.Summary())
	}
	if err != nil {
		var ie *converge.ItemError // which item failed, and in which phase
		if errors.As(err, &ie) {
			log.Printf("%s failed in %s: %v", ie.ID, ie.Phase, ie.Err)
		}
		return err
	}
	// README: A first program (end)
	return nil
}

// The first program of README: two host configuration items and a
// config.txt key, walked dry, then applied. A temporary directory with a
// config.txt stands in for the device's root.
func Example_firstProgram() {
	rootDir, err := os.MkdirTemp("", "first-program-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(rootDir)
	if err := os.MkdirAll(filepath.Join(rootDir, "boot", "firmware"), 0o755); err != nil {
		panic(err)
	}
	if err := os.WriteFile(filepath.Join(rootDir, "boot", "firmware", "config.txt"), []byte("dtparam=audio=on\n"), 0o644); err != nil {
		panic(err)
	}
	if err := firstProgram(context.Background(), rootDir); err != nil {
		fmt.Println(err)
	}
	// Output:
	// would change: [dir:/etc/app file:/etc/app/app.conf configkey:/boot/firmware/config.txt:gpu_mem]
	// apply: 3 items: 3 changed
	//   changed      dir:/etc/app (present)
	//   changed      file:/etc/app/app.conf (present)
	//   changed      configkey:/boot/firmware/config.txt:gpu_mem (present)
	//   reboot       configkey:/boot/firmware/config.txt:gpu_mem: gpu_mem=128 set in /boot/firmware/config.txt
}
