package sysclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestIs(t *testing.T) {
	fixed := time.Unix(1_800_000_000, 0)
	tests := []struct {
		name string
		now  func() time.Time
		want bool
	}{
		{"nil", nil, true},
		{"time.Now", time.Now, true},
		{"a closure", func() time.Time { return fixed }, false},
		{"a wrapper of time.Now", func() time.Time { return time.Now() }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, Is(tc.now))
		})
	}
}
