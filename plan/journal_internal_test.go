package plan

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPlanBaseEncodingReadsBackAsJSON checks that the status encoder of
// base records writes what encoding/json writes, as decodePlan reads it
// back: escapes, every optional field, several groups and commands, the
// fixed part reused, and a timestamp JSON cannot hold refused.
func TestPlanBaseEncodingReadsBackAsJSON(t *testing.T) {
	at := time.Date(2026, 5, 11, 19, 13, 2, 123456789, time.UTC)
	doc := &Document{APIVersion: "autopilot.k0sproject.io/v1beta2", Kind: "Plan",
		Metadata: &Metadata{Name: "a<b>&\"c\"", Labels: map[string]string{"k": "v\n"}},
		Spec: Plan{ID: "p/1", Commands: []Command{
			{Kind: "update", Spec: map[string]json.RawMessage{"version": json.RawMessage(`"v1"`)},
				Targets: []CommandTargets{{Group: "controllers", Discovery: CommandDiscovery{Static: []string{"c0"}}},
					{Group: "workers", Concurrent: 2, Discovery: CommandDiscovery{Static: []string{"w0", "wé"}}}}},
			{Kind: "other", Targets: []CommandTargets{{Group: "g", Discovery: CommandDiscovery{Function: "all"}}}},
		}}}
	doc.Status = &Status{State: StateApplyFailed, Reason: "node \"w0\" failed: \\ \u2028 \x01", Abort: "stop <now>",
		Commands: []CommandStatus{
			{ID: 0, Kind: "update", State: StateApplyFailed, Reason: "bad & worse", Started: at, Targets: map[string][]TargetStatus{
				"controllers": {{Name: "c0", State: TargetCompleted, LastUpdatedTimestamp: at}},
				"workers": {{Name: "w0", State: TargetApplyFailed, Reason: "disk\tfull", Attempt: 2, LastUpdatedTimestamp: at.Add(time.Second)},
					{Name: "wé", State: TargetPending}},
			}},
			{ID: 1, Kind: "other", State: StateSchedulableWait, Targets: map[string][]TargetStatus{"g": {}}},
		}}
	want, err := json.Marshal(doc)
	require.NoError(t, err)
	wantDoc, err := decodePlan(want)
	require.NoError(t, err)

	got, fixed, err := planEncodeBase(doc, nil)
	require.NoError(t, err)
	require.True(t, json.Valid(got), "%s", got)
	gotDoc, err := decodePlan(got)
	require.NoError(t, err)
	assert.Equal(t, wantDoc, gotDoc)

	again, _, err := planEncodeBase(doc, fixed)
	require.NoError(t, err)
	assert.Equal(t, got, again, "the fixed part is reused as it was")

	doc.Status.Commands[0].Started = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, _, err = planEncodeBase(doc, fixed)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"p/1"`)
}

// FuzzPlanApplyDelta feeds arbitrary stored deltas to a plan's status:
// they apply or fail, never panic, and a delta that applies leaves a
// status that encodes.
func FuzzPlanApplyDelta(f *testing.F) {
	newDoc := func() *Document {
		return &Document{Spec: Plan{ID: "p", Commands: []Command{{Kind: "update",
			Targets: []CommandTargets{{Group: "workers", Discovery: CommandDiscovery{Static: []string{"w0", "w1"}}}}}}},
			Status: &Status{State: StateSchedulableWait, Commands: []CommandStatus{{Kind: "update", State: StateSchedulableWait,
				Targets: map[string][]TargetStatus{"workers": {{Name: "w0"}, {Name: "w1"}}}}}}}
	}
	f.Add([]byte(`{"seq":1,"state":"SchedulableWait","n":1,"commands":[{"i":0,"state":"Schedulable","reason":"x","started":"2026-01-01T00:00:00Z","targets":[{"g":"workers","i":1,"n":"w1","s":"SignalSent","t":"2026-01-01T00:00:00Z"}]}]}`))
	f.Add([]byte(`{"seq":1,"state":"NewPlan","n":1,"commands":[{"i":0,"full":{"id":0,"state":"NewPlan","update":{"workers":[]}}}]}`))
	f.Add([]byte(`{"seq":1,"n":1,"commands":[{"i":0,"targets":[{"g":"workers","i":7,"n":"w7"}]}]}`))
	f.Add([]byte(`{"seq":2,"n":0}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		doc := newDoc()
		if _, err := planApplyDelta(doc, raw, 0); err != nil {
			return
		}
		if _, _, err := planEncodeBase(doc, nil); err != nil {
			var anyYear bool
			for _, cs := range doc.Status.Commands {
				anyYear = anyYear || cs.Started.Year() > 9999 || cs.Started.Year() < 0
				for _, ts := range cs.Targets {
					for _, tg := range ts {
						anyYear = anyYear || tg.LastUpdatedTimestamp.Year() > 9999 || tg.LastUpdatedTimestamp.Year() < 0
					}
				}
			}
			require.True(t, anyYear, "only a timestamp out of range fails to encode: %v", err)
		}
	})
}
