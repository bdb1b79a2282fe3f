package main

import (
	"bytes"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRolloutRetriesOnlyWhatFailed(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out))
	s := out.String()
	assert.Contains(t, s, "command 1 workers worker4: SignalFailed (disk full)")
	assert.Contains(t, s, "plan finished: Completed")
	// Controllers were updated one at a time, before any worker.
	assert.Regexp(t, regexp.MustCompile(`controllers 1/3 workers 0/6[\s\S]*controllers 2/3 workers 0/6[\s\S]*controllers 3/3 workers 0/6`), s)
	// Every node got the airgap bundle (workers) and one update; the
	// retry signalled worker4 alone.
	for node, want := range map[string]string{"controller0": "1", "worker0": "2", "worker5": "2", "worker4": "3"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^  `+node+` +`+want+`$`), s)
	}
}
