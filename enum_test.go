package converge_test

import (
	"encoding"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

// enumCase is one enum value with its name, and a fresh pointer to decode
// into.
type enumCase struct {
	value encoding.TextMarshaler
	name  string
	fresh func() encoding.TextUnmarshaler
}

func enumCases() []enumCase {
	var out []enumCase
	add := func(v encoding.TextMarshaler, name string, fresh func() encoding.TextUnmarshaler) {
		out = append(out, enumCase{v, name, fresh})
	}
	for v, n := range map[converge.Presence]string{converge.Present: "present", converge.Absent: "absent"} {
		add(v, n, func() encoding.TextUnmarshaler { return new(converge.Presence) })
	}
	for v, n := range map[converge.Change]string{converge.ChangeNotRequired: "not-required", converge.ChangeRequired: "required"} {
		add(v, n, func() encoding.TextUnmarshaler { return new(converge.Change) })
	}
	for v, n := range map[converge.Phase]string{converge.PhaseNone: "none", converge.PhaseDiscover: "discover", converge.PhaseGoal: "goal",
		converge.PhaseCheck: "check", converge.PhaseApply: "apply", converge.PhaseVerify: "verify", converge.PhaseRefresh: "refresh"} {
		add(v, n, func() encoding.TextUnmarshaler { return new(converge.Phase) })
	}
	for v, n := range map[converge.Outcome]string{converge.OutcomeUnchanged: "unchanged", converge.OutcomeChanged: "changed",
		converge.OutcomeWouldChange: "would-change", converge.OutcomeFailed: "failed", converge.OutcomeWaiting: "waiting",
		converge.OutcomeNotRun: "not-run"} {
		add(v, n, func() encoding.TextUnmarshaler { return new(converge.Outcome) })
	}
	for v, n := range map[converge.Mode]string{converge.ModeApply: "apply", converge.ModeClean: "clean"} {
		add(v, n, func() encoding.TextUnmarshaler { return new(converge.Mode) })
	}
	for v, n := range map[converge.Action]string{converge.ActionReboot: "reboot", converge.ActionShutdown: "shutdown"} {
		add(v, n, func() encoding.TextUnmarshaler { return new(converge.Action) })
	}
	for v, n := range map[converge.EventKind]string{converge.EventQueued: "queued", converge.EventChecking: "checking",
		converge.EventApplying: "applying", converge.EventDone: "done", converge.EventFailed: "failed", converge.EventSkipped: "skipped"} {
		add(v, n, func() encoding.TextUnmarshaler { return new(converge.EventKind) })
	}
	for v, n := range map[converge.TargetEventKind]string{converge.TargetStateChanged: "state-changed",
		converge.TargetPassFinished: "pass-finished", converge.TargetPassFailed: "pass-failed",
		converge.TargetActionRequired: "action-required", converge.TargetPassPreempted: "pass-preempted"} {
		add(v, n, func() encoding.TextUnmarshaler { return new(converge.TargetEventKind) })
	}
	for v, n := range map[converge.Interrupt]string{converge.InterruptNone: "none", converge.InterruptGraceful: "graceful",
		converge.InterruptImmediate: "immediate"} {
		add(v, n, func() encoding.TextUnmarshaler { return new(converge.Interrupt) })
	}
	return out
}

// TestEnumsRoundTripByName checks that every enum of reports, results and
// events encodes to its name in text and JSON and decodes back from it.
func TestEnumsRoundTripByName(t *testing.T) {
	for _, tc := range enumCases() {
		t.Run(fmt.Sprintf("%T/%s", tc.value, tc.name), func(t *testing.T) {
			b, err := tc.value.MarshalText()
			require.NoError(t, err)
			assert.Equal(t, tc.name, string(b))
			got := tc.fresh()
			require.NoError(t, got.UnmarshalText(b))
			assert.Equal(t, tc.value, deref(got))

			j, err := json.Marshal(tc.value)
			require.NoError(t, err)
			assert.JSONEq(t, fmt.Sprintf("%q", tc.name), string(j))
			got = tc.fresh()
			require.NoError(t, json.Unmarshal(j, got))
			assert.Equal(t, tc.value, deref(got))
		})
	}
}

// TestEnumsRejectUnknownNames checks that a name no value has, and a value
// no name has, are errors matching ErrUnknownName.
func TestEnumsRejectUnknownNames(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range enumCases() {
		typ := fmt.Sprintf("%T", tc.value)
		if seen[typ] {
			continue
		}
		seen[typ] = true
		t.Run(typ, func(t *testing.T) {
			for _, name := range []string{"", "bogus", "Present ", "PRESENT", "7"} {
				err := tc.fresh().UnmarshalText([]byte(name))
				require.ErrorIs(t, err, converge.ErrUnknownName, "%q", name)
				var ne *converge.NameError
				require.ErrorAs(t, err, &ne)
				assert.Equal(t, name, ne.Name)
				assert.Error(t, json.Unmarshal([]byte(fmt.Sprintf("%q", name)), tc.fresh()))
			}
		})
	}
	for _, v := range []encoding.TextMarshaler{converge.Presence(9), converge.Change(9), converge.Phase(99), converge.Outcome(99),
		converge.Mode(9), converge.Action(0), converge.Action(9), converge.EventKind(0), converge.TargetEventKind(0), converge.Interrupt(9)} {
		_, err := v.MarshalText()
		require.ErrorIs(t, err, converge.ErrUnknownName, "%T(%v)", v, v)
		_, err = json.Marshal(v)
		require.Error(t, err)
	}
}

// TestItemResultMarshalsEnumsByName checks a whole result: its enums are
// written by name.
func TestItemResultMarshalsEnumsByName(t *testing.T) {
	res := converge.ItemResult{ID: "a", Presence: converge.Absent, Decision: converge.Required(2),
		Outcome: converge.OutcomeFailed, Phase: converge.PhaseVerify}
	b, err := json.Marshal(res)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Equal(t, "absent", m["Presence"])
	assert.Equal(t, "failed", m["Outcome"])
	assert.Equal(t, "verify", m["Phase"])
	assert.Equal(t, map[string]any{"Change": "required", "WorkUnits": 2.0}, m["Decision"])
}

func deref(v encoding.TextUnmarshaler) any {
	switch p := v.(type) {
	case *converge.Presence:
		return *p
	case *converge.Change:
		return *p
	case *converge.Phase:
		return *p
	case *converge.Outcome:
		return *p
	case *converge.Mode:
		return *p
	case *converge.Action:
		return *p
	case *converge.EventKind:
		return *p
	case *converge.TargetEventKind:
		return *p
	case *converge.Interrupt:
		return *p
	}
	panic(fmt.Sprintf("deref %T", v))
}
