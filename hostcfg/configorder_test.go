package hostcfg

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/convergekit/converge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// configAt writes content to /config.txt of a new root and returns the
// ConfigFile and the host path.
func configAt(t *testing.T, content string) (*ConfigFile, string) {
	t.Helper()
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "config.txt")
	writeFile(t, p, content)
	return NewConfigFile(r, "/config.txt"), p
}

// applyItem runs one ConfigKey's Apply towards Present (or Absent) directly,
// so that a test chooses the order items apply in.
func applyItem(t *testing.T, k *ConfigKey, present bool) {
	t.Helper()
	ctx := context.Background()
	target, err := k.StateGoal(ctx, nil)
	if !present {
		target, err = k.StateClean(ctx, nil)
	}
	require.NoError(t, err)
	_, err = k.Apply(ctx, ConfigKeyState{}, target)
	require.NoError(t, err, k.ID())
}

func TestConfigKeyRefusesKeyHeldTwice(t *testing.T) {
	const content = "arm_boost=1\n# keep\narm_boost=0\n[pi4]\narm_boost=1\n"
	for _, tc := range []struct {
		name     string
		presence converge.Presence
	}{{"present", converge.Present}, {"absent", converge.Absent}} {
		t.Run(tc.name, func(t *testing.T) {
			r, dir, _ := newRoot(t)
			p := filepath.Join(dir, "boot/config.txt")
			writeFile(t, p, content)
			cf := NewConfigFile(r, "/boot/config.txt")
			g := converge.NewGraph()
			g.Add(cf.Key("", "arm_boost", "2").Node(), tc.presence)
			_, err := converge.Apply(context.Background(), g)
			require.ErrorIs(t, err, ErrRepeatedKey)
			var rk *RepeatedKeyError
			require.ErrorAs(t, err, &rk)
			assert.Equal(t, []int{1, 3}, rk.Lines)
			assert.Equal(t, "arm_boost", rk.Key)
			assert.Equal(t, "/boot/config.txt", rk.Path)
			assert.Contains(t, err.Error(), `"arm_boost"`)
			assert.Contains(t, err.Error(), "lines 1, 3")
			assert.Equal(t, content, readFile(t, p), "nothing is touched")
		})
	}
	t.Run("a key held once in its section is edited in its one line", func(t *testing.T) {
		r, dir, _ := newRoot(t)
		p := filepath.Join(dir, "boot/config.txt")
		writeFile(t, p, content)
		g := converge.NewGraph()
		g.Add(NewConfigFile(r, "/boot/config.txt").Key("pi4", "arm_boost", "").Node(), converge.Absent)
		mustApply(t, g)
		assert.Equal(t, "arm_boost=1\n# keep\narm_boost=0\n[pi4]\n", readFile(t, p))
	})
}

func TestConfigKeyRefusesRepeatableKey(t *testing.T) {
	r, dir, _ := newRoot(t)
	p := filepath.Join(dir, "boot/config.txt")
	writeFile(t, p, "dtoverlay=a\n")
	cf := NewConfigFile(r, "/boot/config.txt")
	for _, key := range []string{"dtoverlay", "dtparam", "gpio"} {
		for _, presence := range []converge.Presence{converge.Present, converge.Absent} {
			g := converge.NewGraph()
			g.Add(cf.Key("", key, "b").Node(), presence)
			_, err := converge.Apply(context.Background(), g)
			require.ErrorIs(t, err, ErrInvalidItem, key)
			assert.Contains(t, err.Error(), "ConfigFile.Entry")
		}
	}
	assert.Equal(t, "dtoverlay=a\n", readFile(t, p))
}

// TestConfigEditsLandInDeclarationOrder applies independent items in
// opposite orders: the file ends the same, in the order the items were
// declared.
func TestConfigEditsLandInDeclarationOrder(t *testing.T) {
	const start = "# top\narm_boost=1\n[pi4]\nx=1\n"
	run := func(reverse bool) string {
		cf, p := configAt(t, start)
		items := []*ConfigKey{
			cf.Key("", "gpu_mem", "128"),
			cf.Entry("", "dtoverlay", "a"),
			cf.Entry("", "dtparam", "a_param=1"),
			cf.Key("pi4", "y", "2"),
			cf.Key("pi5", "z", "3"),
			cf.Key("cm4", "w", "4"),
			cf.Entry("", "dtoverlay", "b"),
		}
		for i := range items {
			if reverse {
				i = len(items) - 1 - i
			}
			applyItem(t, items[i], true)
		}
		return readFile(t, p)
	}
	fwd, rev := run(false), run(true)
	assert.Equal(t, fwd, rev)
	assert.Equal(t, "# top\narm_boost=1\ngpu_mem=128\ndtoverlay=a\ndtparam=a_param=1\ndtoverlay=b\n[pi4]\nx=1\ny=2\n\n[pi5]\nz=3\n\n[cm4]\nw=4\n", fwd)
}

// TestConfigRebuildKeepsDtparamAfterItsOverlay loses a config.txt and
// rebuilds it from its imported items, applied in the worst order: every
// dtparam stays behind the dtoverlay it configures.
func TestConfigRebuildKeepsDtparamAfterItsOverlay(t *testing.T) {
	const content = "dtparam=audio=on\ndtoverlay=a\ndtparam=a_speed=1\ndtoverlay=b\ndtparam=b_speed=2\narm_boost=1\n[pi4]\ndtoverlay=c\ndtparam=c_x=1\n"
	cf, p := configAt(t, content)
	items, err := cf.Import(context.Background())
	require.NoError(t, err)
	require.NoError(t, os.Remove(p))
	// Overlays first, then the parameters: the order a walk may take.
	for _, key := range []string{"dtoverlay", "arm_boost", "dtparam"} {
		for i := len(items) - 1; i >= 0; i-- {
			if items[i].Key == key {
				applyItem(t, items[i], true)
			}
		}
	}
	assert.Equal(t, content, readFile(t, p))

	// Half lost: the missing lines go back between the ones still there.
	writeFile(t, p, "dtoverlay=a\ndtoverlay=b\n[pi4]\ndtoverlay=c\n")
	for i := len(items) - 1; i >= 0; i-- {
		applyItem(t, items[i], true)
	}
	assert.Equal(t, content, readFile(t, p))
}

// TestImportReapplyIsNoOp imports files with a byte-order mark, CRLF,
// filters, repeated and oddly spelled keys, and applies the items: not a
// byte changes and every item is unchanged.
func TestImportReapplyIsNoOp(t *testing.T) {
	for _, content := range []string{
		realConfig + "arm_boost=0\n",
		utf8BOM + "arm_boost=1\r\n[pi4]\r\ndtoverlay=a\r\ndtparam=x=1\r\n[all]\r\ngpu_mem=16",
		"a#b=1\na[b=2\n[a]b]\nk=v\n[ all ]\nk = v\nk=w\n; c\n",
		utf8BOM,
		"[pi4]\n",
	} {
		cf, p := configAt(t, content)
		items, err := cf.Import(context.Background())
		require.NoError(t, err)
		g := converge.NewGraph()
		AddConfigKeys(g, items)
		rep, err := converge.Apply(context.Background(), g)
		require.NoError(t, err, content)
		assert.Equal(t, len(items), rep.Count(converge.OutcomeUnchanged), content)
		assert.Equal(t, content, readFile(t, p))
	}
}

func TestConfigKeyKeepsBOM(t *testing.T) {
	cf, p := configAt(t, utf8BOM+"arm_boost=1\r\ngpu_mem=16\r\n")
	mustApply(t, graph(cf.Key("", "arm_boost", "0").Node(), cf.Key("", "hdmi_group", "1").Node()))
	assert.Equal(t, utf8BOM+"arm_boost=0\r\ngpu_mem=16\r\nhdmi_group=1\r\n", readFile(t, p))
	v, ok := ParseConfig([]byte(readFile(t, p))).Get("", "arm_boost")
	assert.True(t, ok)
	assert.Equal(t, "0", v)
}

func TestLineOrientedFilesKeepBOM(t *testing.T) {
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "etc/hosts"), utf8BOM+"127.0.0.1 localhost\n")
	writeFile(t, filepath.Join(dir, "etc/sysctl.d/99.conf"), utf8BOM+"net.ipv4.ip_forward = 0\n")
	writeFile(t, filepath.Join(dir, "proc/sys/net/ipv4/ip_forward"), "0\n")
	writeFile(t, filepath.Join(dir, "etc/hostname"), utf8BOM+"edge\n")
	mustApply(t, graph(
		(&Line{Root: r, Path: "/etc/hosts", Line: "127.0.0.1 localhost"}).Node(),
		(&Line{Root: r, Path: "/etc/hosts", Line: "10.0.0.1 gw"}).Node(),
		(&Sysctl{Root: r, Key: "net.ipv4.ip_forward", Value: "1", Persist: "/etc/sysctl.d/99.conf"}).Node(),
	))
	assert.Equal(t, utf8BOM+"127.0.0.1 localhost\n10.0.0.1 gw\n", readFile(t, filepath.Join(dir, "etc/hosts")))
	assert.Equal(t, utf8BOM+"net.ipv4.ip_forward = 1\n", readFile(t, filepath.Join(dir, "etc/sysctl.d/99.conf")))

	// The host name behind a mark is read as the name, and a new name keeps
	// the mark.
	h := &Hostname{Root: r, Name: "edge"}
	st, err := h.StateCurrent(context.Background(), nil)
	require.NoError(t, err)
	assert.Equal(t, "edge", st.Name)
	mustApply(t, graph((&Hostname{Root: r, Name: "edge2"}).Node()))
	assert.Equal(t, utf8BOM+"edge2\n", readFile(t, filepath.Join(dir, "etc/hostname")))

	// Removing the first line keeps the mark.
	mustApply(t, func() *converge.Graph {
		g := converge.NewGraph()
		g.Add((&Line{Root: r, Path: "/etc/hosts", Line: "127.0.0.1 localhost"}).Node(), converge.Absent)
		return g
	}())
	assert.Equal(t, utf8BOM+"10.0.0.1 gw\n", readFile(t, filepath.Join(dir, "etc/hosts")))
}

func TestRebootRequiredInAppliedResult(t *testing.T) {
	ctx := context.Background()
	r, dir, _ := newRoot(t)
	writeFile(t, filepath.Join(dir, "config.txt"), "arm_boost=1\n")
	cf := NewConfigFile(r, "/config.txt")
	g := graph(cf.Key("", "arm_boost", "0").Node(), cf.Entry("", "dtoverlay", "x").Node(), cf.Key("", "gpu_mem", "16").Node())
	g.Add(cf.Key("", "absent_key", "").Node(), converge.Absent)
	dry, err := converge.ApplyDry(ctx, g)
	require.NoError(t, err)
	rep := mustApply(t, g)
	require.Len(t, rep.Items, len(dry.Items))
	for i, it := range rep.Items {
		want := dry.Items[i].After.(ConfigKeyState).RebootRequired
		assert.Equal(t, want, it.After.(ConfigKeyState).RebootRequired, it.ID)
		assert.Equal(t, it.ID != "configkey:/config.txt:absent_key", want, it.ID)
	}
}

// configEdit is one independent edit for the order property.
type configEdit struct {
	section, key, value string
	entry, present      bool
}

// randomConfig returns a config.txt made of random lines: entries of a few
// keys (repeatable ones among them), comments, blanks, filters, CRLF or
// LF, with or without a byte-order mark and a final terminator.
func randomConfig(rng *rand.Rand) string {
	keys := []string{"a", "b", "c", "dtoverlay", "dtparam", "gpio"}
	var b strings.Builder
	if rng.Intn(4) == 0 {
		b.WriteString(utf8BOM)
	}
	nl := "\n"
	if rng.Intn(3) == 0 {
		nl = "\r\n"
	}
	used := map[string]bool{}
	section := ""
	for range rng.Intn(12) {
		switch rng.Intn(6) {
		case 0:
			b.WriteString("# comment" + nl)
		case 1:
			b.WriteString(nl)
		case 2:
			section = []string{"pi4", "all", "cm4"}[rng.Intn(3)]
			b.WriteString("[" + section + "]" + nl)
		default:
			k := keys[rng.Intn(len(keys))]
			if !IsRepeatable(k) && used[normSection(section)+"/"+k] {
				continue // single-valued keys appear once, so Key items may edit them
			}
			used[normSection(section)+"/"+k] = true
			fmt.Fprintf(&b, "%s=%d%s", k, rng.Intn(3), nl)
		}
	}
	s := b.String()
	if rng.Intn(3) == 0 {
		s = strings.TrimSuffix(s, nl)
	}
	return s
}

// randomEdits returns independent edits: no two on the same single-valued
// key of a section, nor on the same entry. The edits whose line the file
// has come in the file's order (as Import makes them, and as they are once
// the items wrote the file); the others anywhere.
func randomEdits(rng *rand.Rand, start string) []configEdit {
	edits := randomEditSet(rng)
	doc := ParseConfig([]byte(start))
	pos := make([]float64, len(edits))
	for i, e := range edits {
		pos[i] = rng.Float64() * float64(len(doc.lines)+1)
		for j, l := range doc.lines {
			if l.kind == lineEntry && l.section == normSection(e.section) && l.key == e.key && (!e.entry || l.value == e.value) {
				pos[i] = float64(j) + 0.5
				break
			}
		}
	}
	idx := rng.Perm(len(edits))
	sort.SliceStable(idx, func(a, b int) bool { return pos[idx[a]] < pos[idx[b]] })
	out := make([]configEdit, len(edits))
	for i, j := range idx {
		out[i] = edits[j]
	}
	return out
}

func randomEditSet(rng *rand.Rand) []configEdit {
	var out []configEdit
	seen := map[string]bool{}
	for range 1 + rng.Intn(8) {
		e := configEdit{section: []string{"", "pi4", "cm4", "pi5"}[rng.Intn(4)], present: rng.Intn(4) != 0}
		if rng.Intn(2) == 0 {
			e.entry = true
			e.key = []string{"dtoverlay", "dtparam", "gpio"}[rng.Intn(3)]
			e.value = fmt.Sprint(rng.Intn(4))
		} else {
			e.key = []string{"a", "b", "c", "d"}[rng.Intn(4)]
			e.value = fmt.Sprint(rng.Intn(4))
		}
		id := e.section + "/" + e.key
		if e.entry {
			id += "=" + e.value
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, e)
	}
	return out
}

// removesWholePreamble reports whether an Absent edit removes a line of
// the unconditional lines that start the file while these hold nothing but
// blank lines and lines of items: whether the file then starts with a
// filter depends on the order (see the ConfigFile doc).
func removesWholePreamble(start string, cf *ConfigFile, edits []configEdit) bool {
	doc := ParseConfig([]byte(start))
	o := cf.order(0)
	for _, l := range doc.lines {
		if l.kind == lineSection {
			break
		}
		if _, managed := o.line(l); l.kind != lineBlank && !(l.kind == lineEntry && managed) {
			return false
		}
	}
	for _, e := range edits {
		if !e.present && normSection(e.section) == "" {
			for _, l := range doc.lines {
				if l.kind == lineSection {
					break
				}
				if l.kind == lineEntry && l.key == e.key && (!e.entry || l.value == e.value) {
					return true
				}
			}
		}
	}
	return false
}

// TestIndependentEditsCommuteInAnyOrder checks, over random files and
// random independent Key and Entry edits, that applying the edits in any
// order gives the same bytes.
func TestIndependentEditsCommuteInAnyOrder(t *testing.T) {
	for seed := int64(1); seed <= 5000; seed++ {
		rng := rand.New(rand.NewSource(seed))
		start := randomConfig(rng)
		edits := randomEdits(rng, start)
		cf := &ConfigFile{root: &Root{}, path: "/config.txt"}
		items := make([]*ConfigKey, len(edits))
		targets := make([]ConfigKeyState, len(edits))
		for i, e := range edits {
			if e.entry {
				items[i] = cf.Entry(e.section, e.key, e.value)
			} else {
				items[i] = cf.Key(e.section, e.key, e.value)
			}
			targets[i] = ConfigKeyState{Present: e.present, Value: e.value}
		}
		if removesWholePreamble(start, cf, edits) {
			continue // the documented exception
		}
		var want string
		for round := range 8 {
			order := rng.Perm(len(items))
			if round == 0 {
				order = order[:0]
				for i := range items {
					order = append(order, i)
				}
			}
			doc := ParseConfig([]byte(start))
			for _, i := range order {
				next, err := items[i].edited(doc, targets[i])
				require.NoError(t, err, "seed %d", seed)
				if next != nil {
					doc = next
				}
			}
			got := string(doc.Bytes())
			if round == 0 {
				want = got
				continue
			}
			require.Equal(t, want, got, "seed %d: start %q, edits %+v, order %v", seed, start, edits, order)
		}
	}
}

// FuzzConfigRoundTrip checks that any config.txt (byte-order mark, CRLF,
// filters, repeated keys) parses and renders byte for byte, that its
// imported entries read as present, and that a Set and an Add survive a
// parse of their own output.
func FuzzConfigRoundTrip(f *testing.F) {
	f.Add([]byte(utf8BOM+"dtoverlay=a\r\ndtparam=x=1\r\n[pi4]\r\narm_boost=1\r\narm_boost=2\r\n[all]\r\n"), "pi4", "dtoverlay", "b")
	f.Add([]byte(utf8BOM+realConfig), "", "gpu_mem", "16")
	f.Add([]byte(utf8BOM), "", "a", "1")
	f.Add([]byte("\xef\xbb"), "x", "a", "1")
	f.Add([]byte("[a]b]\n[[x]\na#b=1\n=\n"), "a]b", "k", "v")
	f.Fuzz(func(t *testing.T, data []byte, section, key, value string) {
		d := ParseConfig(data)
		if got := d.Bytes(); string(got) != string(data) {
			t.Fatalf("round trip: %q -> %q", data, got)
		}
		cf := &ConfigFile{root: &Root{}, path: "/c"}
		for _, e := range d.Entries() {
			k := cf.Key(e.Section, e.Key, e.Value)
			if e.Repeated {
				k = cf.Entry(e.Section, e.Key, e.Value)
			}
			if err := k.validate(); err != nil {
				t.Fatalf("imported %+v is refused: %v", e, err)
			}
			next, err := k.edited(d, ConfigKeyState{Present: true, Value: e.Value})
			if err != nil || next != nil {
				t.Fatalf("imported %+v would change the file: %v", e, err)
			}
		}
		k := cf.Entry(section, key, value)
		if k.validate() != nil {
			return
		}
		next, err := k.edited(d, ConfigKeyState{Present: true, Value: value})
		if err != nil {
			t.Fatal(err)
		}
		if next == nil {
			next = d
		}
		out := next.Bytes()
		d2 := ParseConfig(out)
		if !d2.Has(k.Section, key, value) || string(d2.Bytes()) != string(out) {
			t.Fatalf("Add(%q, %q, %q) on %q: output %q does not read back", section, key, value, data, out)
		}
	})
}

// TestConcurrentWalksGiveTheSameBytes runs one graph of independent Key
// and Entry items (which the walk applies concurrently) on fresh copies of
// a file: every run writes the same bytes, in the items' order.
func TestConcurrentWalksGiveTheSameBytes(t *testing.T) {
	var first string
	for run := range 20 {
		cf, p := configAt(t, "# boot\narm_boost=1\n[pi4]\notg_mode=1\n")
		g := converge.NewGraph()
		for i := range 6 {
			g.Add(cf.Entry("", "dtoverlay", fmt.Sprintf("o%d", i)).Node(), converge.Present)
			g.Add(cf.Entry("", "dtparam", fmt.Sprintf("p%d=1", i)).Node(), converge.Present)
			g.Add(cf.Key(fmt.Sprintf("cm%d", i), "k", "1").Node(), converge.Present)
			g.Add(cf.Key("pi4", fmt.Sprintf("k%d", i), "1").Node(), converge.Present)
		}
		g.Add(cf.Key("pi4", "otg_mode", "").Node(), converge.Absent)
		mustApply(t, g)
		got := readFile(t, p)
		if run == 0 {
			first = got
			assert.True(t, strings.HasPrefix(got, "# boot\narm_boost=1\ndtoverlay=o0\ndtparam=p0=1\ndtoverlay=o1\n"), got)
			continue
		}
		require.Equal(t, first, got, "run %d", run)
	}
}
