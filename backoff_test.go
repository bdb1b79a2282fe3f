package converge_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

func TestBackoffDelay(t *testing.T) {
	b := converge.Backoff{Base: time.Second, Max: 10 * time.Second}
	tests := []struct {
		failures int
		want     time.Duration
	}{
		{0, 0}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{4, 8 * time.Second}, {5, 10 * time.Second}, {60, 10 * time.Second},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, b.Delay(tt.failures, 0.99), "failures=%d", tt.failures)
	}
	j := converge.Backoff{Base: time.Second, Max: 10 * time.Second, Jitter: 0.5}
	assert.Equal(t, 10*time.Second, j.Delay(9, 0), "r=0 gives the full delay")
	assert.Equal(t, 5*time.Second, j.Delay(9, 1), "jitter never goes above the cap, and takes at most half")
	assert.Equal(t, converge.DefaultBackoff.Base, converge.Backoff{}.Delay(1, 0))
}

func TestBackoffValidate(t *testing.T) {
	tests := []struct {
		name  string
		b     converge.Backoff
		field string
	}{
		{"negative base", converge.Backoff{Base: -1}, "Backoff.Base"},
		{"negative max", converge.Backoff{Max: -1}, "Backoff.Max"},
		{"base above max", converge.Backoff{Base: 2 * time.Second, Max: time.Second}, "Backoff.Base"},
		{"jitter above 1", converge.Backoff{Jitter: 1.5}, "Backoff.Jitter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.b.Validate()
			require.ErrorIs(t, err, converge.ErrInvalidConfig)
			var ce *converge.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tt.field, ce.Field)
		})
	}
	require.NoError(t, converge.Backoff{}.Validate())
}
