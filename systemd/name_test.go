package systemd

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// names are unit names with what systemd makes of them: the kind, or 0
// when systemd refuses the name. inner_internal_test.go asks a real
// systemd about each of them too.
var names = []struct {
	name string
	kind NameKind
}{
	{"app.service", NamePlain},
	{"dbus.socket", NamePlain},
	{"multi-user.target", NamePlain},
	{"dev-sda1.device", NamePlain},
	{"home.mount", NamePlain},
	{"proc-sys-fs-binfmt_misc.automount", NamePlain},
	{"swapfile.swap", NamePlain},
	{"apt-daily.timer", NamePlain},
	{"cups.path", NamePlain},
	{"user.slice", NamePlain},
	{"session-1.scope", NamePlain},
	{"getty@.service", NameTemplate},
	{"getty@tty1.service", NameInstance},
	{"a@b@c.service", NameInstance},
	{"systemd-fsck@dev-disk-by\\x2duuid-1234.service", NameInstance},
	{"host:port_1.2.service", NamePlain},
	{"..service", NamePlain},
	{strings.Repeat("a", MaxNameLen-len(".service")) + ".service", NamePlain},
	{"", 0},
	{"app", 0},
	{".service", 0},
	{"app.", 0},
	{"app.daemon", 0},
	{"app.Service", 0},
	{"app.service.", 0},
	{"@app.service", 0},
	{"@.service", 0},
	{"my app.service", 0},
	{"app/x.service", 0},
	{"../app.service", 0},
	{"app\x00.service", 0},
	{"äpp.service", 0},
	{"app*.service", 0},
	{strings.Repeat("a", MaxNameLen-len(".service")+1) + ".service", 0},
}

func TestValidateName(t *testing.T) {
	for _, tc := range names {
		t.Run(tc.name, func(t *testing.T) {
			kind, err := ValidateName(tc.name)
			if tc.kind == 0 {
				require.ErrorIs(t, err, ErrInvalidName)
				var ne *NameError
				require.ErrorAs(t, err, &ne)
				assert.Equal(t, tc.name, ne.Name)
				assert.NotEmpty(t, ne.Reason)
				assert.Zero(t, kind)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.kind, kind)
		})
	}
}

func TestNameErrorReasons(t *testing.T) {
	for name, reason := range map[string]string{
		"":                                    "empty",
		"app":                                 "no unit type suffix",
		".service":                            "nothing before",
		"app.daemon":                          `unknown unit type "daemon"`,
		"my app.service":                      `character ' ' at byte 2`,
		"@x.service":                          "starts with '@'",
		strings.Repeat("a", 300) + ".service": "308 bytes long",
	} {
		_, err := ValidateName(name)
		require.Error(t, err)
		assert.Contains(t, err.Error(), reason, "%q", name)
	}
}

// nameOracle is systemd's rule written another way: a regular expression
// and the position of the first '@'.
var nameOracle = regexp.MustCompile(`^[A-Za-z0-9:_.\\-][A-Za-z0-9:_.\\@-]*\.(service|socket|target|device|mount|automount|swap|timer|path|slice|scope)$`)

func FuzzValidateName(f *testing.F) {
	for _, tc := range names {
		f.Add(tc.name)
	}
	f.Fuzz(func(t *testing.T, name string) {
		kind, err := ValidateName(name)
		want := len(name) <= MaxNameLen && nameOracle.MatchString(name)
		if !want {
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrInvalidName))
			return
		}
		require.NoError(t, err)
		require.NotContains(t, name, "/")
		dot := strings.LastIndexByte(name, '.')
		at := strings.IndexByte(name[:dot], '@')
		switch {
		case at < 0:
			require.Equal(t, NamePlain, kind)
		case at == dot-1:
			require.Equal(t, NameTemplate, kind)
		default:
			require.Equal(t, NameInstance, kind)
		}
	})
}
