package hostcfg

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realConfig is a config.txt as Raspberry Pi OS ships it, with filters,
// overlays, comments, blank lines and a line without "=".
const realConfig = `# For more options and information see
# http://rptl.io/configtxt
# Some settings may impact device functionality. See link above for details

# Uncomment some or all of these to enable the optional hardware interfaces
#dtparam=i2c_arm=on
#dtparam=i2s=on
#dtparam=spi=on

# Enable audio (loads snd_bcm2835)
dtparam=audio=on

# Additional overlays and parameters are documented
# /boot/firmware/overlays/README

# Automatically load overlays for detected cameras
camera_auto_detect=1

# Automatically load overlays for detected DSI displays
display_auto_detect=1

# Automatically load initramfs files, if found
auto_initramfs=1

# Enable DRM VC4 V3D driver
dtoverlay=vc4-kms-v3d
max_framebuffers=2

# Don't have the firmware create an initial video= setting in cmdline.txt.
# Use the kernel's default instead.
disable_fw_kms_setup=1

# Run in 64-bit mode
arm_64bit=1

# Disable compensation for displays with overscan
disable_overscan=1

# Run as fast as firmware / board allows
arm_boost=1

[cm4]
# Enable host mode on the 2711 built-in XHCI USB controller.
# This line should be removed if the legacy DWC2 controller is required
# (e.g. for USB device mode) or if USB support is not required.
otg_mode=1

[cm5]
dtoverlay=dwc2,dr_mode=host

[pi4]
initramfs initrd.img followkernel
gpio=17=op,dh
gpio = 18=op,dl

[all]
enable_uart = 1
dtoverlay=disable-bt
`

func TestParseConfigRoundTrip(t *testing.T) {
	for _, in := range []string{
		realConfig,
		"",
		"\n",
		"a=1",
		"a=1\r\nb=2\r\n",
		"[pi4]\n",
		"  key  =  spaced value  \t\n# c\n",
		"=novalue\nnoequals\n[broken\n",
		"a=1\n\n\n[all]\n[none]\nb=2",
	} {
		assert.Equal(t, in, string(ParseConfig([]byte(in)).Bytes()))
	}
}

func TestConfigDocRead(t *testing.T) {
	d := ParseConfig([]byte(realConfig))
	v, ok := d.Get("", "arm_boost")
	assert.True(t, ok)
	assert.Equal(t, "1", v)
	v, _ = d.Get("all", "enable_uart")
	assert.Equal(t, "1", v)
	v, _ = d.Get("cm4", "otg_mode")
	assert.Equal(t, "1", v)
	_, ok = d.Get("", "otg_mode")
	assert.False(t, ok, "otg_mode is under [cm4] only")
	assert.Equal(t, []string{"vc4-kms-v3d", "disable-bt"}, d.Values("", "dtoverlay"))
	assert.Equal(t, []string{"dwc2,dr_mode=host"}, d.Values("cm5", "dtoverlay"))
	assert.Equal(t, []string{"17=op,dh", "18=op,dl"}, d.Values("pi4", "gpio"))
	assert.True(t, d.Has("", "dtparam", "audio=on"))
	assert.False(t, d.Has("", "dtparam", "i2c_arm=on"), "commented out")
}

// changedLines returns the lines that differ between a and b when b has
// the same number of lines, or fails.
func changedLines(t *testing.T, a, b string) []string {
	t.Helper()
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	require.Equal(t, len(la), len(lb), "line count changed")
	var out []string
	for i := range la {
		if la[i] != lb[i] {
			out = append(out, la[i]+" -> "+lb[i])
		}
	}
	return out
}

// insertedLines returns the lines of b that are not in a when b is a with
// lines inserted.
func insertedLines(t *testing.T, a, b string) []string {
	t.Helper()
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	i := 0
	for _, l := range lb {
		if i < len(la) && la[i] == l {
			i++
			continue
		}
		out = append(out, l)
	}
	require.Equal(t, len(la), i, "lines of the original were changed, not only inserted")
	return out
}

func TestConfigDocEditChangesOneLine(t *testing.T) {
	cases := []struct {
		name          string
		edit          func(d *ConfigDoc) bool
		changed       []string
		inserted      []string
		want          string
		unchangedEdit bool
	}{
		{name: "set existing", edit: func(d *ConfigDoc) bool { return d.Set("", "arm_boost", "0") },
			changed: []string{"arm_boost=1 -> arm_boost=0"}},
		{name: "set keeps spacing", edit: func(d *ConfigDoc) bool { return d.Set("all", "enable_uart", "0") },
			changed: []string{"enable_uart = 1 -> enable_uart = 0"}},
		{name: "set in filter", edit: func(d *ConfigDoc) bool { return d.Set("cm4", "otg_mode", "0") },
			changed: []string{"otg_mode=1 -> otg_mode=0"}},
		{name: "set same value", edit: func(d *ConfigDoc) bool { return d.Set("", "arm_64bit", "1") }, unchangedEdit: true},
		{name: "set new key goes to the last unconditional block", edit: func(d *ConfigDoc) bool { return d.Set("", "gpu_mem", "128") },
			inserted: []string{"gpu_mem=128"}},
		{name: "add repeated entry", edit: func(d *ConfigDoc) bool { return d.Add("pi4", "dtoverlay", "i2c-rtc,ds3231") },
			inserted: []string{"dtoverlay=i2c-rtc,ds3231"}},
		{name: "add existing entry", edit: func(d *ConfigDoc) bool { return d.Add("", "dtoverlay", "vc4-kms-v3d") }, unchangedEdit: true},
		{name: "new section", edit: func(d *ConfigDoc) bool { return d.Set("pi5", "usb_max_current_enable", "1") },
			want: realConfig + "\n[pi5]\nusb_max_current_enable=1\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := ParseConfig([]byte(realConfig))
			changed := tc.edit(d)
			out := string(d.Bytes())
			if tc.unchangedEdit {
				assert.False(t, changed)
				assert.Equal(t, realConfig, out)
				return
			}
			assert.True(t, changed)
			if tc.changed != nil {
				assert.Equal(t, tc.changed, changedLines(t, realConfig, out))
			}
			if tc.want != "" {
				assert.Equal(t, tc.want, out)
			}
			if tc.inserted != nil {
				assert.Equal(t, tc.inserted, insertedLines(t, realConfig, out))
			}
			// The edit survives a parse of its own output.
			assert.Equal(t, out, string(ParseConfig([]byte(out)).Bytes()))
		})
	}
}

func TestConfigDocInsertPlacement(t *testing.T) {
	d := ParseConfig([]byte(realConfig))
	d.Add("pi4", "dtoverlay", "x")
	d.Set("", "gpu_mem", "64")
	out := string(d.Bytes())
	assert.Contains(t, out, "gpio = 18=op,dl\ndtoverlay=x\n\n[all]\n", "after the last entry of [pi4], before the blank line")
	assert.True(t, strings.HasSuffix(out, "dtoverlay=disable-bt\ngpu_mem=64\n"))

	// A file without a trailing newline gets one before the new line.
	d = ParseConfig([]byte("a=1"))
	d.Set("", "b", "2")
	assert.Equal(t, "a=1\nb=2\n", string(d.Bytes()))
	// CRLF files get CRLF lines.
	d = ParseConfig([]byte("a=1\r\n"))
	d.Set("", "b", "2")
	d.Set("", "a", "3")
	assert.Equal(t, "a=3\r\nb=2\r\n", string(d.Bytes()))
	// An empty document.
	d = ParseConfig(nil)
	d.Set("", "a", "1")
	d.Set("pi4", "b", "2")
	d.Set("", "c", "3")
	assert.Equal(t, "a=1\nc=3\n\n[pi4]\nb=2\n", string(d.Bytes()), "the preamble is unconditional")
	d = ParseConfig([]byte("[pi4]\nb=2\n"))
	d.Set("", "c", "3")
	assert.Equal(t, "[pi4]\nb=2\n\n[all]\nc=3\n", string(d.Bytes()))
	// A preamble of comments only: the entry goes after the comments.
	d = ParseConfig([]byte("# top\n\n[pi4]\nx=1\n"))
	d.Set("", "a", "1")
	assert.Equal(t, "# top\na=1\n\n[pi4]\nx=1\n", string(d.Bytes()))
}

func TestConfigDocDelete(t *testing.T) {
	d := ParseConfig([]byte(realConfig))
	assert.Equal(t, 1, d.DeleteEntry("", "dtoverlay", "disable-bt"))
	assert.Equal(t, []string{"vc4-kms-v3d"}, d.Values("", "dtoverlay"))
	assert.Equal(t, 0, d.DeleteEntry("", "dtoverlay", "nope"))
	assert.Equal(t, 2, d.Delete("pi4", "gpio"))
	assert.Empty(t, d.Values("pi4", "gpio"))
	out := string(d.Bytes())
	assert.NotContains(t, out, "disable-bt")
	assert.Contains(t, out, "initramfs initrd.img followkernel\n\n[all]")
}

func TestConfigDocEntries(t *testing.T) {
	d := ParseConfig([]byte("a=1\ndtoverlay=x\ndtoverlay=y\nb=1\nb=2\n[pi4]\na=2\ndtoverlay=x\ndtoverlay=x\n"))
	assert.Equal(t, []ConfigEntry{
		{Section: "", Key: "a", Value: "1"},
		{Section: "", Key: "dtoverlay", Value: "x", Repeated: true},
		{Section: "", Key: "dtoverlay", Value: "y", Repeated: true},
		{Section: "", Key: "b", Value: "1", Repeated: true},
		{Section: "", Key: "b", Value: "2", Repeated: true},
		{Section: "pi4", Key: "a", Value: "2"},
		{Section: "pi4", Key: "dtoverlay", Value: "x", Repeated: true},
	}, d.Entries())
	assert.True(t, IsRepeatable("dtparam"))
	assert.False(t, IsRepeatable("arm_boost"))
}

// FuzzParseConfig checks that parse then write is byte-identical, and that
// a Set is seen by Get after a parse of the output and touches at most one
// existing line.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(realConfig), "pi4", "gpu_mem", "16")
	f.Add([]byte("a=1\r\n[x]\nb = 2"), "", "a", "2")
	f.Add([]byte(""), "all", "k", "v")
	f.Add([]byte("=\n[]\n[ all ]\nk=\n"), "", "k", "v")
	f.Fuzz(func(t *testing.T, data []byte, section, key, value string) {
		d := ParseConfig(data)
		if got := d.Bytes(); string(got) != string(data) {
			t.Fatalf("round trip: %q -> %q", data, got)
		}
		// The index StateCurrent reads through says what the document says.
		idx := newDocIndex(d)
		for _, rep := range []bool{false, true} {
			k := &ConfigKey{Section: normSection(section), Key: key, Value: value, Repeated: rep}
			p1, v1 := k.observe(d)
			p2, v2 := k.lookup(idx)
			if p1 != p2 || v1 != v2 {
				t.Fatalf("%+v on %q: document %v %q, index %v %q", k, data, p1, v1, p2, v2)
			}
		}
		k := &ConfigKey{file: &ConfigFile{root: &Root{}}, Section: normSection(section), Key: key, Value: value}
		if k.validate() != nil && !strings.Contains(k.validate().Error(), "no ConfigFile") {
			return
		}
		if key == "" || strings.ContainsAny(key+value+section, "=\r\n#;[]") ||
			strings.TrimSpace(key) != key || strings.TrimSpace(value) != value || strings.TrimSpace(section) != section {
			return
		}
		before := len(d.Values(section, key))
		d.Set(section, key, value)
		out := d.Bytes()
		d2 := ParseConfig(out)
		got, ok := d2.Get(section, key)
		if !ok || got != value {
			t.Fatalf("Set(%q, %q, %q) on %q: Get = %q, %v; output %q", section, key, value, data, got, ok, out)
		}
		if after := len(d2.Values(section, key)); before > 0 && after != before {
			t.Fatalf("Set changed the number of entries: %d -> %d", before, after)
		}
		if string(d2.Bytes()) != string(out) {
			t.Fatalf("second round trip differs")
		}
	})
}
