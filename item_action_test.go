package converge_test

import (
	"bytes"
	"fmt"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge"
)

// TestActionLogForms checks that host actions read as words in a log line,
// not as a Go struct, with both of slog's handlers.
func TestActionLogForms(t *testing.T) {
	req := converge.RequiredAction{ID: "config:arm_freq", Action: converge.ActionReboot, Reason: "boot configuration changed"}
	for _, tc := range []struct {
		name    string
		value   any
		text    string // the line of a TextHandler holds it
		json    string // the line of a JSONHandler holds it
		display string // fmt's %v
	}{
		{name: "required action", value: req,
			text:    `a.action=reboot a.item=config:arm_freq a.reason="boot configuration changed"`,
			json:    `"a":{"action":"reboot","item":"config:arm_freq","reason":"boot configuration changed"}`,
			display: `reboot for "config:arm_freq": boot configuration changed`},
		{name: "required action without reason", value: converge.RequiredAction{ID: "x", Action: converge.ActionShutdown},
			text: `a.action=shutdown a.item=x a.reason=""`, json: `"a":{"action":"shutdown","item":"x","reason":""}`,
			display: `shutdown for "x"`},
		{name: "action", value: converge.ActionReboot, text: `a=reboot`, json: `"a":"reboot"`, display: "reboot"},
		{name: "zero action", value: converge.Action(0), text: `a=action(0)`, json: `"a":"action(0)"`, display: "action(0)"},
		{name: "pending action", value: converge.PendingAction{Action: converge.ActionReboot, ID: "config:arm_freq", Reason: "r", Revision: 4, BootID: "b"},
			text: `a.action=reboot a.item=config:arm_freq a.reason=r a.revision=4`, json: `"a":{"action":"reboot","item":"config:arm_freq","reason":"r","revision":4}`,
			display: `reboot for "config:arm_freq" (revision 4): r`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var text, js bytes.Buffer
			slog.New(slog.NewTextHandler(&text, nil)).Info("m", "a", tc.value)
			slog.New(slog.NewJSONHandler(&js, nil)).Info("m", "a", tc.value)
			assert.Contains(t, text.String(), tc.text)
			assert.Contains(t, js.String(), tc.json)
			assert.Equal(t, tc.display, fmtValue(tc.value))
		})
	}
}

func fmtValue(v any) string { return fmt.Sprint(v) }
