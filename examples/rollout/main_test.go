package main

import (
	"bytes"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/convergekit/converge/examples/internal/stores"
	"github.com/convergekit/converge/pgstore/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Wrap(m)) }

func TestRolloutRetriesOnlyWhatFailed(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, stores.Options{}))
	s := out.String()
	assert.Contains(t, s, "command 1 workers worker4: SignalApplyFailed (disk full)")
	assert.Contains(t, s, "plan finished: Completed")
	// Controllers were updated one at a time, before any worker.
	assert.Regexp(t, regexp.MustCompile(`controllers 1/3 workers 0/6[\s\S]*controllers 2/3 workers 0/6[\s\S]*controllers 3/3 workers 0/6`), s)
	// The operator aborted the plan once the controllers were done: no
	// worker was signalled, each kept the reason, and a retry went on.
	assert.Regexp(t, regexp.MustCompile(`k0supdate +Aborted +controllers 3/3 workers 0/6\nplan stopped in Aborted:`), s)
	assert.Contains(t, s, "command 1 workers worker0: SignalAborted (operator pause: check the controllers before the workers)")
	assert.Contains(t, s, "retrying the aborted plan")
	// Every node got the airgap bundle (workers) and one update; the
	// retry signalled worker4 alone.
	for node, want := range map[string]string{"controller0": "1", "worker0": "2", "worker5": "2", "worker4": "3"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^  `+node+` +`+want+`$`), s)
	}
}

func TestRolloutResumesStoredPlanWithoutSignallingAgain(t *testing.T) {
	opts := stores.Options{Path: filepath.Join(t.TempDir(), "rollout.db")}
	var first, second bytes.Buffer
	require.NoError(t, run(t.Context(), &first, opts))
	require.NoError(t, run(t.Context(), &second, opts))
	s := second.String()
	assert.Contains(t, s, "plan rollout-v1.30.4 is stored already: resuming it")
	assert.Contains(t, s, "plan finished: Completed")
	for _, node := range []string{"controller0", "worker0", "worker4"} {
		assert.Regexp(t, regexp.MustCompile(`(?m)^  `+node+` +0$`), s, "a completed plan signals nobody again")
	}
}

func TestRolloutOnPostgres(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(t.Context(), &out, stores.Options{DSN: pgtest.DSN(t)}))
	s := out.String()
	assert.Contains(t, s, "plan kept in PostgreSQL")
	assert.Contains(t, s, "plan finished: Completed")
	assert.Regexp(t, regexp.MustCompile(`(?m)^  worker4 +3$`), s)
}
