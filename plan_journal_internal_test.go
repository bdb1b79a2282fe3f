package converge

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
	doc := &PlanDocument{APIVersion: "autopilot.k0sproject.io/v1beta2", Kind: "Plan",
		Metadata: &PlanMetadata{Name: "a<b>&\"c\"", Labels: map[string]string{"k": "v\n"}},
		Spec: Plan{ID: "p/1", Commands: []Command{
			{Kind: "update", Spec: map[string]json.RawMessage{"version": json.RawMessage(`"v1"`)},
				Targets: []CommandTargets{{Group: "controllers", Discovery: CommandDiscovery{Static: []string{"c0"}}},
					{Group: "workers", Concurrent: 2, Discovery: CommandDiscovery{Static: []string{"w0", "wé"}}}}},
			{Kind: "other", Targets: []CommandTargets{{Group: "g", Discovery: CommandDiscovery{Function: "all"}}}},
		}}}
	doc.Status = &PlanStatus{State: PlanFailed, Reason: "node \"w0\" failed: \\ \u2028 \x01", Abort: "stop <now>",
		Commands: []CommandStatus{
			{ID: 0, Kind: "update", State: PlanFailed, Reason: "bad & worse", Started: at, Targets: map[string][]PlanTargetStatus{
				"controllers": {{Name: "c0", State: HostCompleted, LastUpdatedTimestamp: at}},
				"workers": {{Name: "w0", State: HostFailed, Reason: "disk\tfull", Attempt: 2, LastUpdatedTimestamp: at.Add(time.Second)},
					{Name: "wé", State: HostPending}},
			}},
			{ID: 1, Kind: "other", State: PlanSchedulableWait, Targets: map[string][]PlanTargetStatus{"g": {}}},
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
