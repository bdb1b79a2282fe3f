package plan_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/plan"
)

// TestPlansStoredByV010 reads plans that converge v0.1.0 stored, record
// by record as its runner wrote them to a Store (testdata/
// v0.1.0-stored-plans.json: a k0s update whose worker failed, one whose
// worker's platform had no payload, one whose workers were excluded), and
// checks that the old state names read as the k0s states that replaced
// them: Failed and SignalFailed as ApplyFailed and SignalApplyFailed,
// MissingPlatform as IncompleteTargets, Restricted with the restricted
// targets left SignalPending, in the documents and in the history.
func TestPlansStoredByV010(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile("testdata/v0.1.0-stored-plans.json")
	require.NoError(t, err)
	var records []struct {
		Key     string                  `json:"key"`
		Value   string                  `json:"value"`
		History []converge.HistoryEntry `json:"history"`
	}
	require.NoError(t, json.Unmarshal(raw, &records))
	store := converge.NewMemStore()
	for _, rec := range records {
		_, err := store.Put(ctx, converge.StoreRecord{Key: rec.Key, Value: json.RawMessage(rec.Value)}, rec.History...)
		require.NoError(t, err, rec.Key)
	}
	r, err := plan.NewRunner(store, plan.RunnerConfig{})
	require.NoError(t, err)

	tests := []struct {
		id      string
		state   plan.State
		targets map[string]plan.TargetState
		reason  string
	}{
		{"failed", plan.StateApplyFailed,
			map[string]plan.TargetState{"c0": plan.TargetCompleted, "w0": plan.TargetApplyFailed}, `node "w0" failed: disk full`},
		{"missing-platform", plan.StateIncompleteTargets,
			map[string]plan.TargetState{"c0": plan.TargetPending, "w1": plan.TargetMissingPlatform}, `no payload for platform "linux-arm64" of node "w1"`},
		{"restricted", plan.StateRestricted,
			map[string]plan.TargetState{"c0": plan.TargetPending, "w0": plan.TargetPending}, `node "w0" is a worker, and worker nodes are excluded from plans`},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			doc, _, err := r.Get(ctx, tc.id)
			require.NoError(t, err)
			assert.Equal(t, tc.state, doc.Status.State)
			cs := doc.Status.Commands[0]
			assert.Equal(t, tc.state, cs.State)
			assert.Equal(t, tc.reason, cs.Reason, "v0.1.0 wrote the reason as reason")
			got := map[string]plan.TargetState{}
			for _, ts := range cs.Targets {
				for _, tg := range ts {
					got[tg.Name] = tg.State
				}
			}
			assert.Equal(t, tc.targets, got)

			hist, err := r.History(ctx, tc.id)
			require.NoError(t, err)
			require.NotEmpty(t, hist)
			last := hist[len(hist)-1]
			assert.Equal(t, string(tc.state), last.To)
			for _, h := range hist {
				for _, old := range []string{"Failed", "MissingPlatform", "MissingSignalNode", "SignalFailed", "SignalRestricted"} {
					assert.NotEqual(t, old, h.From)
					assert.NotEqual(t, old, h.To)
				}
			}
			stored, err := store.History(ctx, plan.KeyPrefix+tc.id)
			require.NoError(t, err)
			if tc.id == "failed" {
				assert.Equal(t, "Failed", stored[len(stored)-1].To, "the store keeps what v0.1.0 wrote; History reads it anew")
			}

			// The migrated plan encodes in today's names and reads back the same.
			b, err := json.Marshal(doc)
			require.NoError(t, err)
			for _, old := range []string{`"Failed"`, `"MissingPlatform"`, `"SignalFailed"`, `"SignalRestricted"`} {
				assert.NotContains(t, string(b), old)
			}
			assert.Contains(t, string(b), `"description":`, "the command's reason is written as k0s's description")
			var again plan.Document
			require.NoError(t, json.Unmarshal(b, &again))
			assert.Equal(t, doc.Status, again.Status)
		})
	}
}
