package autopilot_test

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planFieldErr checks that err is a *plan.FieldError matching
// plan.ErrInvalid about field.
func planFieldErr(t *testing.T, err error, field string) {
	t.Helper()
	require.ErrorIs(t, err, plan.ErrInvalid)
	var fe *plan.FieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, field, fe.Field)
	assert.Contains(t, err.Error(), field)
}

// TestPlanRejectsEmptyTargets checks that a command with no target group,
// or a group with an empty static node list, is a validation error naming
// the field, in Go and in documents, and that such a plan is not stored.
func TestPlanRejectsEmptyTargets(t *testing.T) {
	empty := plan.CommandTargets{Group: "workers", Discovery: plan.CommandDiscovery{Static: []string{}}}
	tests := []struct {
		name  string
		cmd   plan.Command
		field string
	}{
		{name: "no groups", cmd: planCmd("update"), field: "spec.commands[0].update.targets"},
		{name: "empty static list", cmd: planCmd("update", empty), field: "spec.commands[0].update.targets.workers.discovery.static.nodes"},
		{name: "empty inline static list", cmd: func() plan.Command {
			c := planCmd("airgapupdate", empty)
			c.Spec["version"] = json.RawMessage(`"v1.30.4+k0s.0"`)
			c.InlineTargets = true
			return c
		}(), field: "spec.commands[0].airgapupdate.workers.discovery.static.nodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := planOf(tc.cmd)
			planFieldErr(t, doc.Spec.Validate(), tc.field)
			store := converge.NewMemStore()
			r := planRunner(t, store, autopilot.NewBus(), plan.RunnerConfig{})
			planFieldErr(t, r.Create(context.Background(), doc), tc.field)
			_, _, err := r.Get(context.Background(), "p1")
			require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing stored")
		})
	}
	docs := []struct {
		name, in, field string
	}{
		{name: "no targets", in: "spec:\n  id: p\n  commands:\n  - k0supdate: {version: v1.30.4+k0s.0}\n",
			field: "spec.commands[0].k0supdate.targets"},
		{name: "empty node list", in: "spec:\n  id: p\n  commands:\n  - k0supdate: {version: v1.30.4+k0s.0, targets: {workers: {discovery: {static: {nodes: []}}}}}\n",
			field: "spec.commands[0].k0supdate.targets.workers.discovery.static.nodes"},
		{name: "static without nodes", in: "spec:\n  id: p\n  commands:\n  - k0supdate: {version: v1.30.4+k0s.0, targets: {workers: {discovery: {static: {}}}}}\n",
			field: "spec.commands[0].k0supdate.targets.workers.discovery.static.nodes"},
		{name: "empty inline node list", in: "spec:\n  id: p\n  commands:\n  - airgapupdate: {version: v1.30.4+k0s.0, workers: {discovery: {static: {nodes: []}}}}\n",
			field: "spec.commands[0].airgapupdate.workers.discovery.static.nodes"},
	}
	for _, tc := range docs {
		t.Run("document/"+tc.name, func(t *testing.T) {
			_, err := autopilot.Decode([]byte(tc.in))
			planFieldErr(t, err, tc.field)
		})
	}
}

// TestPlanRejectsUnknownK0sVersion checks that a k0s command (k0supdate,
// airgapupdate) without a version, or with one that is not a k0s version
// of Kubernetes, is a validation error naming the field, both when a
// document is decoded and when a plan built in Go is created.
func TestPlanRejectsUnknownK0sVersion(t *testing.T) {
	const tail = ", targets: {workers: {discovery: {static: {nodes: [w0]}}}}}\n"
	tests := []struct {
		name, version string
		ok            bool
	}{
		{name: "release", version: "v1.30.4+k0s.0", ok: true},
		{name: "release candidate", version: "v1.31.1-rc.0+k0s.0", ok: true},
		{name: "missing", version: ""},
		{name: "not a version", version: "latest"},
		{name: "no v", version: "1.30.4+k0s.0"},
		{name: "no k0s build", version: "v1.30.4"},
		{name: "not Kubernetes 1", version: "v2.0.0+k0s.0"},
		{name: "two parts", version: "v1.30+k0s.0"},
		{name: "leading zero", version: "v1.030.4+k0s.0"},
		{name: "a number", version: "42"},
	}
	for _, kind := range []string{"k0supdate", "airgapupdate"} {
		for _, tc := range tests {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				field := "spec.commands[0]." + kind + ".version"
				v := "version: '" + tc.version + "'"
				switch tc.version {
				case "":
					v = "platforms: {linux-amd64: {url: https://example.invalid/k0s}}"
				case "42":
					v = "version: 42"
				}
				_, err := autopilot.Decode([]byte("spec:\n  id: p\n  commands:\n  - " + kind + ": {" + v + tail))
				cmd := planCmd(kind, planGroup("workers", 1, "w0"))
				cmd.Spec["version"] = json.RawMessage(`"` + tc.version + `"`)
				if tc.version == "" {
					delete(cmd.Spec, "version")
				}
				r := planRunner(t, converge.NewMemStore(), autopilot.NewBus(), plan.RunnerConfig{})
				cerr := r.Create(context.Background(), planOf(cmd))
				if tc.ok {
					require.NoError(t, err)
					require.NoError(t, cerr)
					return
				}
				if tc.version == "42" {
					require.ErrorIs(t, err, plan.ErrInvalid)
				} else {
					planFieldErr(t, err, field)
				}
				planFieldErr(t, cerr, field)
			})
		}
	}
	// Other kinds carry what version they like.
	_, err := autopilot.Decode([]byte("spec:\n  id: p\n  commands:\n  - update: {version: '2.0'" + tail))
	require.NoError(t, err)
}

// TestPlanWithNoDiscoveredTargetsFails checks that a command whose
// discovery finds no target at all stops the plan (IncompleteTargets)
// instead of completing without doing anything.
func TestPlanWithNoDiscoveredTargetsFails(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		bus := autopilot.NewBus(planWrk("w0"))
		h := &autopilot.CommandHandler{Sender: bus, Discover: map[string]plan.CommandDiscoverFunc{
			"none": func(context.Context) ([]string, error) { return nil, nil },
		}}
		r := planRunner(t, converge.NewMemStore(), bus, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"update": h}})
		planCreate(t, r, planOf(planCmd("update", plan.CommandTargets{Group: "workers", Discovery: plan.CommandDiscovery{Function: "none"}})))
		st, err := r.Run(context.Background(), "p1")
		var pe *plan.Error
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, plan.StateIncompleteTargets, pe.State)
		assert.Equal(t, plan.StateIncompleteTargets, st.Commands[0].State)
		assert.Contains(t, st.Commands[0].Reason, "no target")
		assert.Empty(t, bus.Sent())
	})
}
