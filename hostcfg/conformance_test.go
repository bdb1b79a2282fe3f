package hostcfg

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// conformCase builds one item over a fresh root, starting away from its goal.
type conformCase struct {
	name  string
	setup func(t *testing.T, dir string)
	// item returns the node for walks and a function running
	// convergetest.Conform on the typed item.
	item func(r *Root) (converge.Node, func(ctx context.Context, opts convergetest.ConformOptions) error)
	// clean is false for items without a clean state.
	clean bool
}

func conformCases() []conformCase {
	const cfg = "# boot\ndtparam=audio=on\n\n[pi4]\narm_boost=1\n\n[all]\nenable_uart=0\n"
	return []conformCase{
		{name: "file", clean: true, setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "etc/keep"), "") },
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := &File{Root: r, Path: "/etc/motd", Content: []byte("hello\n"), Mode: 0o600}
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[FileState](ctx, it, o)
				}
			}},
		{name: "file-replaces-content", clean: true, setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "etc/motd"), "old\n") },
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := &File{Root: r, Path: "etc/motd", Content: []byte("new\n")}
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[FileState](ctx, it, o)
				}
			}},
		{name: "dir", clean: true,
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := &Dir{Root: r, Path: "/srv/app/data", Mode: 0o750}
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[DirState](ctx, it, o)
				}
			}},
		{name: "symlink", clean: true, setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "etc/real.conf"), "x=1\n") },
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := &Symlink{Root: r, Path: "/etc/link.conf", Target: "real.conf"}
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[SymlinkState](ctx, it, o)
				}
			}},
		{name: "line", clean: true, setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "etc/hosts"), "127.0.0.1 localhost\n") },
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := &Line{Root: r, Path: "/etc/hosts", Line: "10.0.0.2 db"}
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[LineState](ctx, it, o)
				}
			}},
		{name: "line-replace", clean: true, setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "etc/hosts"), "127.0.0.1 localhost\n127.0.1.1 old\n")
		},
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := &Line{Root: r, Path: "/etc/hosts", Line: "127.0.1.1 new", Replace: regexp.MustCompile(`^127\.0\.1\.1\s`)}
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[LineState](ctx, it, o)
				}
			}},
		{name: "configkey-set", clean: true, setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "boot/config.txt"), cfg) },
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := NewConfigFile(r, "/boot/config.txt").Key("pi4", "arm_boost", "0")
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[ConfigKeyState](ctx, it, o)
				}
			}},
		{name: "configkey-new", clean: true, setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "boot/config.txt"), cfg) },
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := NewConfigFile(r, "/boot/config.txt").Key("", "gpu_mem", "128")
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[ConfigKeyState](ctx, it, o)
				}
			}},
		{name: "configkey-entry", clean: true, setup: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "boot/config.txt"), cfg) },
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := NewConfigFile(r, "/boot/config.txt").Entry("", "dtoverlay", "vc4-kms-v3d")
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[ConfigKeyState](ctx, it, o)
				}
			}},
		{name: "sysctl", clean: true, setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "proc/sys/net/ipv4/ip_forward"), "0\n")
			writeFile(t, filepath.Join(dir, "etc/sysctl.d/README"), "")
		},
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := &Sysctl{Root: r, Key: "net.ipv4.ip_forward", Value: "1", Persist: "/etc/sysctl.d/99-converge.conf"}
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[SysctlState](ctx, it, o)
				}
			}},
		{name: "hostname", setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, "etc/hostname"), "raspberrypi\n")
			writeFile(t, filepath.Join(dir, "proc/sys/kernel/hostname"), "raspberrypi\n")
		},
			item: func(r *Root) (converge.Node, func(context.Context, convergetest.ConformOptions) error) {
				it := &Hostname{Root: r, Name: "edge-01"}
				return it.Node(), func(ctx context.Context, o convergetest.ConformOptions) error {
					return convergetest.Conform[HostnameState](ctx, it, o)
				}
			}},
	}
}

// TestConformance runs convergetest.Conform, with a snapshot of the whole
// tree, on every item.
func TestConformance(t *testing.T) {
	for _, tc := range conformCases() {
		t.Run(tc.name, func(t *testing.T) {
			r, dir, _ := newRoot(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			_, conform := tc.item(r)
			snap := func(context.Context) (any, error) { return snapshot(t, dir), nil }
			require.NoError(t, conform(context.Background(), convergetest.ConformOptions{Snapshot: snap}))
		})
	}
}

// TestWalkConformance drives every item through real walks: a dry run
// writes nothing and shows a diff, apply converges, a second apply and a
// dry run find nothing to do, and clean then apply round-trips.
func TestWalkConformance(t *testing.T) {
	ctx := context.Background()
	for _, tc := range conformCases() {
		t.Run(tc.name, func(t *testing.T) {
			r, dir, _ := newRoot(t)
			if tc.setup != nil {
				tc.setup(t, dir)
			}
			node, _ := tc.item(r)
			g := graph(node)
			id := node.ID()

			before := snapshot(t, dir)
			rep, err := converge.ApplyDry(ctx, g)
			require.NoError(t, err)
			assert.Equal(t, converge.OutcomeWouldChange, mustItem(t, rep, id).Outcome)
			assert.Equal(t, before, snapshot(t, dir), "a dry run wrote something")
			diffs := Diffs(rep)
			require.Len(t, diffs, 1)
			assert.NotEmpty(t, diffs[0].Diff)

			rep = mustApply(t, g)
			assert.Equal(t, converge.OutcomeChanged, mustItem(t, rep, id).Outcome)
			applied := snapshot(t, dir)
			assert.NotEqual(t, before, applied)

			rep = mustApply(t, g)
			assert.Equal(t, converge.OutcomeUnchanged, mustItem(t, rep, id).Outcome, "second apply")
			rep, err = converge.ApplyDry(ctx, g)
			require.NoError(t, err)
			assert.Equal(t, converge.OutcomeUnchanged, mustItem(t, rep, id).Outcome, "dry run after apply")
			assert.Empty(t, Diffs(rep))
			assert.Equal(t, applied, snapshot(t, dir))

			if !tc.clean {
				_, err := converge.Clean(ctx, g)
				require.ErrorIs(t, err, converge.ErrNoClean)
				return
			}
			w, err := converge.NewWalker(converge.DefaultWalkerConfig())
			require.NoError(t, err)
			rep, err = w.CleanDry(ctx, g)
			require.NoError(t, err)
			assert.Equal(t, converge.OutcomeWouldChange, mustItem(t, rep, id).Outcome, "clean dry run")
			assert.Equal(t, applied, snapshot(t, dir), "a clean dry run wrote something")
			assert.Len(t, Diffs(rep), 1)
			rep, err = converge.Clean(ctx, g)
			require.NoError(t, err)
			assert.Equal(t, converge.OutcomeChanged, mustItem(t, rep, id).Outcome, "clean")
			rep, err = converge.Clean(ctx, g)
			require.NoError(t, err)
			assert.Equal(t, converge.OutcomeUnchanged, mustItem(t, rep, id).Outcome, "second clean")
			rep = mustApply(t, g)
			assert.Equal(t, converge.OutcomeChanged, mustItem(t, rep, id).Outcome, "apply after clean")
			assert.Equal(t, applied, snapshot(t, dir), "clean then apply did not round-trip")
		})
	}
}

func mustItem(t testing.TB, rep *converge.Report, id converge.ID) converge.ItemResult {
	t.Helper()
	res, ok := rep.Item(id)
	require.True(t, ok, "no result for %s", id)
	return res
}
