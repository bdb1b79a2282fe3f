package converge_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/plan"
)

func TestIsInternalKind(t *testing.T) {
	tests := []struct {
		kind     string
		internal bool
	}{
		{strings.TrimSuffix(converge.TargetRefreshKeyPrefix, "/"), true},
		{"converge.actions", true},
		{"converge.anything", true},
		{strings.TrimSuffix(plan.KeyPrefix, "/"), true},
		{"plan-base", true},
		{"docker-hash-key", true},
		{"host", false},
		{"plans", false},
		{"converge", false},
		{"docker-hash-keys", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			assert.Equal(t, tt.internal, converge.IsInternalKind(tt.kind))
		})
	}
}
