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

// Example edits one key of a Raspberry Pi config.txt: a dry run shows the
// diff and writes nothing, the apply changes that one line and asks for a
// reboot.
func Example() {
	dir, _ := os.MkdirTemp("", "hostcfg-example-*")
	defer os.RemoveAll(dir)
	_ = os.MkdirAll(filepath.Join(dir, "boot"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "boot/config.txt"), []byte("# boot\ndtparam=audio=on\n[pi4]\narm_boost=1\n"), 0o644)

	root, err := hostcfg.OpenRoot(dir)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer root.Close()
	boot := hostcfg.NewConfigFile(root, "/boot/config.txt")
	g := converge.NewGraph()
	g.Add(boot.Key("pi4", "arm_boost", "0").Node(), converge.Present)

	ctx := context.Background()
	rep, _ := converge.ApplyDry(ctx, g)
	for _, d := range hostcfg.Diffs(rep) {
		fmt.Print(d.Diff)
	}
	rep, _ = converge.Apply(ctx, g)
	for _, a := range rep.Actions() {
		fmt.Println(a.Action, "-", a.Reason)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "boot/config.txt"))
	fmt.Print(string(b))
	// Output:
	// --- a/boot/config.txt
	// +++ b/boot/config.txt
	// @@ -1,4 +1,4 @@
	//  # boot
	//  dtparam=audio=on
	//  [pi4]
	// -arm_boost=1
	// +arm_boost=0
	// reboot - [pi4] arm_boost=0 set in /boot/config.txt
	// # boot
	// dtparam=audio=on
	// [pi4]
	// arm_boost=0
}

// ExampleParseConfig reads a config.txt and lists its settings, the way
// ConfigFile.Import turns them into items.
func ExampleParseConfig() {
	doc := hostcfg.ParseConfig([]byte("dtoverlay=vc4-kms-v3d\narm_boost=1\n[cm4]\notg_mode=1\n"))
	for _, e := range doc.Entries() {
		fmt.Printf("section=%q %s=%s repeated=%v\n", e.Section, e.Key, e.Value, e.Repeated)
	}
	// Output:
	// section="" dtoverlay=vc4-kms-v3d repeated=true
	// section="" arm_boost=1 repeated=false
	// section="cm4" otg_mode=1 repeated=false
}

// ExampleRoot shows a path that tries to leave the root: it is refused
// before anything is written.
func ExampleRoot() {
	dir, _ := os.MkdirTemp("", "hostcfg-example-*")
	defer os.RemoveAll(dir)
	root, _ := hostcfg.OpenRoot(dir)
	defer root.Close()

	f := &hostcfg.File{Root: root, Path: "/etc/../../escape", Content: []byte("x")}
	g := converge.NewGraph()
	g.Add(f.Node(), converge.Present)
	_, err := converge.Apply(context.Background(), g)
	var esc *hostcfg.EscapeError
	fmt.Println(errors.Is(err, hostcfg.ErrEscape), errors.As(err, &esc) && esc.Path == "/etc/../../escape")
	// Output:
	// true true
}
