package converge

import (
	"errors"
	"fmt"
)

// ErrUnknownName means a text or JSON value is not the name of any value of
// an enum (Presence, Change, Phase, Outcome, Mode, Action, Interrupt,
// EventKind, TargetEventKind), or a value to encode has no name. See *NameError.
var ErrUnknownName = errors.New("converge: unknown name")

// NameError reports a name that is none of an enum's names, or (when
// encoding) a value that has no name, written as its String form. It
// matches ErrUnknownName.
type NameError struct {
	// Type is the enum, for example "presence".
	Type string
	// Name is the text that was decoded, or the String form of the value
	// that was encoded.
	Name string
}

// Error describes the problem, naming its culprit.
func (e *NameError) Error() string {
	return fmt.Sprintf("converge: unknown %s %q", e.Type, e.Name)
}

// Is makes NameError match ErrUnknownName.
func (e *NameError) Is(target error) bool { return target == ErrUnknownName }

// enumName returns the name of value v of the enum typ with names, or "" when
// it has none (an empty entry in names declares no value).
func enumName(names []string, v int) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return ""
}

// enumString is String for an enum: its name, or typ(v) when it has none.
func enumString(typ string, names []string, v uint8) string {
	if n := enumName(names, int(v)); n != "" {
		return n
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// enumMarshal is MarshalText for an enum: its name, or a *NameError.
func enumMarshal(typ string, names []string, v uint8) ([]byte, error) {
	if n := enumName(names, int(v)); n != "" {
		return []byte(n), nil
	}
	return nil, &NameError{Type: typ, Name: enumString(typ, names, v)}
}

// enumUnmarshal is UnmarshalText for an enum: it sets *p to the value named
// b, or returns a *NameError and leaves *p alone.
func enumUnmarshal[E ~uint8](p *E, typ string, names []string, b []byte) error {
	if s := string(b); s != "" {
		for i, n := range names {
			if n == s {
				*p = E(i)
				return nil
			}
		}
	}
	return &NameError{Type: typ, Name: string(b)}
}

var (
	presenceNames = [...]string{"present", "absent"}
	execNames     = [...]string{"not-required", "required"}
	actionNames   = [...]string{"", "reboot", "shutdown"}
	modeNames     = [...]string{"apply", "clean"}
)

// MarshalText encodes p as "present" or "absent"; an undeclared value is a
// *NameError.
func (p Presence) MarshalText() ([]byte, error) {
	return enumMarshal("presence", presenceNames[:], uint8(p))
}

// UnmarshalText decodes "present" or "absent"; any other text is a
// *NameError.
func (p *Presence) UnmarshalText(b []byte) error {
	return enumUnmarshal(p, "presence", presenceNames[:], b)
}

// MarshalText encodes e as "not-required" or "required"; an undeclared
// value is a *NameError.
func (e Change) MarshalText() ([]byte, error) { return enumMarshal("exec", execNames[:], uint8(e)) }

// UnmarshalText decodes "not-required" or "required"; any other text is a
// *NameError.
func (e *Change) UnmarshalText(b []byte) error {
	return enumUnmarshal(e, "exec", execNames[:], b)
}

// MarshalText encodes p by its name (see String); an undeclared value is a
// *NameError.
func (p Phase) MarshalText() ([]byte, error) { return enumMarshal("phase", phaseNames[:], uint8(p)) }

// UnmarshalText decodes a phase name ("none", "discover", "goal", "check",
// "apply", "verify", "refresh"); any other text is a *NameError.
func (p *Phase) UnmarshalText(b []byte) error {
	return enumUnmarshal(p, "phase", phaseNames[:], b)
}

// MarshalText encodes a by its name, "reboot" or "shutdown"; the zero value
// and undeclared values are a *NameError.
func (a Action) MarshalText() ([]byte, error) { return enumMarshal("action", actionNames[:], uint8(a)) }

// UnmarshalText decodes "reboot" or "shutdown"; any other text is a
// *NameError.
func (a *Action) UnmarshalText(b []byte) error {
	return enumUnmarshal(a, "action", actionNames[:], b)
}

// MarshalText encodes m as "apply" or "clean"; an undeclared value is a
// *NameError.
func (m Mode) MarshalText() ([]byte, error) { return enumMarshal("mode", modeNames[:], uint8(m)) }

// UnmarshalText decodes "apply" or "clean"; any other text is a
// *NameError.
func (m *Mode) UnmarshalText(b []byte) error {
	return enumUnmarshal(m, "mode", modeNames[:], b)
}

// MarshalText encodes o by its name (see String; the zero value of a result
// not yet decided is "pending"); an undeclared value is a *NameError.
func (o Outcome) MarshalText() ([]byte, error) {
	return enumMarshal("outcome", outcomeNames[:], uint8(o))
}

// UnmarshalText decodes an outcome name; any other text is a *NameError.
func (o *Outcome) UnmarshalText(b []byte) error {
	return enumUnmarshal(o, "outcome", outcomeNames[:], b)
}

// MarshalText encodes k by its name (see String); the zero value and
// undeclared values are a *NameError.
func (k EventKind) MarshalText() ([]byte, error) {
	return enumMarshal("event", eventNames[:], uint8(k))
}

// UnmarshalText decodes an event kind name; any other text is a
// *NameError.
func (k *EventKind) UnmarshalText(b []byte) error {
	return enumUnmarshal(k, "event", eventNames[:], b)
}

// MarshalText encodes i as "none", "graceful" or "immediate"; an
// undeclared value is a *NameError.
func (i Interrupt) MarshalText() ([]byte, error) {
	return enumMarshal("interrupt", interruptNames[:], uint8(i))
}

// UnmarshalText decodes "none", "graceful" or "immediate"; any other text is
// a *NameError.
func (i *Interrupt) UnmarshalText(b []byte) error {
	return enumUnmarshal(i, "interrupt", interruptNames[:], b)
}

// MarshalText encodes k by its name (see String); the zero value and
// undeclared values are a *NameError.
func (k TargetEventKind) MarshalText() ([]byte, error) {
	return enumMarshal("target-event", targetEventNames[:], uint8(k))
}

// UnmarshalText decodes a target event kind name; any other text is a
// *NameError.
func (k *TargetEventKind) UnmarshalText(b []byte) error {
	return enumUnmarshal(k, "target-event", targetEventNames[:], b)
}
