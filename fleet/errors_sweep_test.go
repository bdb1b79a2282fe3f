package fleet_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
	"github.com/convergekit/converge/internal/errtext"
)

// TestErrorMessagesReadOnce sweeps the package's sentinels, typed errors
// and the errors its calls return: one "fleet: " prefix, first, no
// "converge: " inside, and the right articles.
func TestErrorMessagesReadOnce(t *testing.T) {
	prefixes := []string{"fleet: ", "converge: "}
	ctx := context.Background()
	s, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore()})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Enrol(ctx, "d", nil)
	require.NoError(t, err)
	_, enrolTwice := s.Enrol(ctx, "d", nil)
	_, noDevice := s.DeviceStatus(ctx, "nobody")
	_, badReport := s.StoreReport(ctx, "d", []byte(`{"revision":0,"items":[]}`))
	_, tooLarge := s.StoreReport(ctx, "d", make([]byte, fleet.DefaultMaxBody+1))
	_, outOfOrder := s.StoreReport(ctx, "d", report(1, "present"))
	_, badItems := s.SetTarget(ctx, "d", fleet.Target{Desired: converge.Desired{Items: []converge.DesiredItem{{ID: "a"}, {ID: "a"}}}})
	_, badTarget := fleet.DecodeTarget([]byte(`{"format":1,"x":1}`), converge.DecodeLimits{})
	_, badLabels := s.Enrol(ctx, "e", map[string]string{"a b": "c"})
	_, badSelector := fleet.ParseSelector("role=a b")
	_, noRollout := s.Rollout(ctx, "nope")
	_, badRollout := s.CreateRollout(ctx, fleet.RolloutSpec{ID: "r", Waves: []fleet.Wave{{Percent: 200}}})
	_, err = s.CreateRollout(ctx, fleet.RolloutSpec{ID: "r", Waves: []fleet.Wave{{}}})
	require.NoError(t, err)
	_, rolloutTwice := s.CreateRollout(ctx, fleet.RolloutSpec{ID: "r", Waves: []fleet.Wave{{}}})
	resumeRunning := s.ResumeRollout(ctx, "r")
	errs := []error{
		fleet.ErrUnauthorized, fleet.ErrForbidden, fleet.ErrDeviceNotFound, fleet.ErrDeviceExists,
		fleet.ErrNoTarget, fleet.ErrRateLimited, fleet.ErrInvalid, fleet.ErrStaleReport, fleet.ErrOlderTarget,
		&fleet.AuthError{Device: "d", Reason: fleet.AuthRevoked},
		&fleet.RequestError{Field: "wait", Reason: "negative"},
		&fleet.ReportError{Device: "d", Revision: 3, Stored: 4, Target: 4},
		&fleet.FormatError{Key: "fleet/devices/d", Err: errors.New("format 2, want 1")},
		&fleet.StatusError{Code: 401, Message: "fleet: unauthorized"},
		fleet.CheckDeviceID("a/b"),
		enrolTwice, noDevice, badReport, tooLarge, outOfOrder, badItems, badTarget,
		fleet.ErrRolloutExists, fleet.ErrRolloutNotFound, fleet.ErrRolloutState,
		&fleet.RolloutError{Rollout: "r", State: fleet.RolloutPaused, Action: "pause"},
		badLabels, badSelector, noRollout, badRollout, rolloutTwice, resumeRunning,
	}
	for _, err := range errs {
		require.Error(t, err)
		assert.Empty(t, errtext.Problems("fleet", err.Error(), prefixes), "%q", err.Error())
	}
}
