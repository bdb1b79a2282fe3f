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

// ExampleConfigFile_Import keeps what a config.txt has: the imported items
// change nothing, and when the file is lost they write it again in its
// order (each dtparam after the dtoverlay it configures), although the
// walk applies them concurrently.
func ExampleConfigFile_Import() {
	dir, _ := os.MkdirTemp("", "hostcfg-example-*")
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "config.txt")
	_ = os.WriteFile(p, []byte("dtoverlay=i2c-rtc,ds3231\ndtparam=wakeup-source\ndtoverlay=gpio-fan\ndtparam=temp=60000\narm_boost=1\n[pi4]\narm_boost=0\n"), 0o644)
	root, _ := hostcfg.OpenRoot(dir)
	defer root.Close()
	boot := hostcfg.NewConfigFile(root, "/config.txt")
	items, err := boot.Import(context.Background())
	if err != nil {
		fmt.Println(err)
		return
	}
	g := converge.NewGraph()
	hostcfg.AddConfigKeys(g, items)
	rep, _ := converge.Apply(context.Background(), g)
	fmt.Println("unchanged:", rep.Count(converge.OutcomeUnchanged) == len(items))

	_ = os.Remove(p)
	_, _ = converge.Apply(context.Background(), g)
	b, _ := os.ReadFile(p)
	fmt.Print(string(b))
	// Output:
	// unchanged: true
	// dtoverlay=i2c-rtc,ds3231
	// dtparam=wakeup-source
	// dtoverlay=gpio-fan
	// dtparam=temp=60000
	// arm_boost=1
	// [pi4]
	// arm_boost=0
}

// ExampleOwnership names an owner: names resolve in the root's own
// /etc/passwd, and one that is not there is an error naming it and the
// file looked in.
func ExampleOwnership() {
	dir, _ := os.MkdirTemp("", "hostcfg-example-*")
	defer os.RemoveAll(dir)
	_ = os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	root, _ := hostcfg.OpenRoot(dir)
	defer root.Close()

	f := &hostcfg.File{Root: root, Path: "/etc/app.conf", Content: []byte("x\n"), Owner: &hostcfg.Ownership{User: "app", Group: "app"}}
	g := converge.NewGraph()
	g.Add(f.Node(), converge.Present)
	_, err := converge.Apply(context.Background(), g)
	var oe *hostcfg.OwnerError
	fmt.Println(errors.Is(err, hostcfg.ErrUnknownOwner), errors.As(err, &oe) && oe.Kind == "user" && oe.Name == "app")
	// Output:
	// true true
}
