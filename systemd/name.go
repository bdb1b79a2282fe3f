package systemd

import (
	"fmt"
	"strings"
)

// MaxNameLen is the longest unit name systemd accepts, in bytes
// (UNIT_NAME_MAX - 1 in systemd's unit-name.h).
const MaxNameLen = 255

// unitTypes are the suffixes systemd knows, after the last '.' of a name.
var unitTypes = []string{"service", "socket", "target", "device", "mount", "automount", "swap", "timer", "path", "slice", "scope"}

// NameKind says which of systemd's three shapes of unit name a valid name
// has.
type NameKind uint8

const (
	// NamePlain is a name without '@': "app.service".
	NamePlain NameKind = iota + 1
	// NameTemplate is a template: '@' right before the suffix,
	// "getty@.service". A template cannot be started; its instances can.
	NameTemplate
	// NameInstance is an instance of a template: "getty@tty1.service".
	NameInstance
)

var nameKindNames = [...]string{"", "plain", "template", "instance"}

// String returns "plain", "template" or "instance".
func (k NameKind) String() string {
	if int(k) < len(nameKindNames) && k != 0 {
		return nameKindNames[k]
	}
	return fmt.Sprintf("name-kind(%d)", uint8(k))
}

// NameError reports a unit name that systemd would refuse. It matches
// ErrInvalidName.
type NameError struct {
	Name   string
	Reason string
}

// Error names the unit name and what is wrong with it.
func (e *NameError) Error() string {
	return fmt.Sprintf("systemd: invalid unit name %q: %s", e.Name, e.Reason)
}

// Is makes NameError match ErrInvalidName.
func (e *NameError) Is(target error) bool { return target == ErrInvalidName }

// ValidateName checks name by systemd's own rules (unit_name_is_valid in
// systemd's unit-name.c) and returns its kind, or a *NameError saying
// which rule it breaks: at most MaxNameLen bytes; a suffix after the last
// '.' naming a unit type (service, socket, target, device, mount,
// automount, swap, timer, path, slice, scope) with something before it;
// only ASCII letters, digits and ":-_.\" before the suffix, and '@',
// which must not come first: the first '@' makes the name a template
// ("name@.service") or an instance ("name@x.service"). Such a name never
// holds a '/', so it is a single file name in a unit directory.
func ValidateName(name string) (NameKind, error) {
	bad := func(format string, a ...any) (NameKind, error) {
		return 0, &NameError{Name: name, Reason: fmt.Sprintf(format, a...)}
	}
	if name == "" {
		return bad("empty")
	}
	if len(name) > MaxNameLen {
		return bad("%d bytes long, longer than systemd's limit of %d", len(name), MaxNameLen)
	}
	dot := strings.LastIndexByte(name, '.')
	if dot < 0 {
		return bad("no unit type suffix (.service, .socket, .timer, ...)")
	}
	if dot == 0 {
		return bad("nothing before the unit type suffix")
	}
	suffix := name[dot+1:]
	known := false
	for _, t := range unitTypes {
		if suffix == t {
			known = true
			break
		}
	}
	if !known {
		return bad("unknown unit type %q (want one of %s)", suffix, strings.Join(unitTypes, ", "))
	}
	at := -1
	for i := 0; i < dot; i++ {
		c := name[i]
		if c == '@' && at < 0 {
			at = i
		}
		if !validNameByte(c) {
			return bad("character %q at byte %d is not allowed (letters, digits and \":-_.\\@\" are)", rune(c), i)
		}
	}
	switch {
	case at == 0:
		return bad("starts with '@'")
	case at < 0:
		return NamePlain, nil
	case at+1 == dot:
		return NameTemplate, nil
	}
	return NameInstance, nil
}

func validNameByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte(":-_.\\@", c) >= 0
}

// unitType returns the suffix of a valid name: "service" for
// "app.service".
func unitType(name string) string { return name[strings.LastIndexByte(name, '.')+1:] }
