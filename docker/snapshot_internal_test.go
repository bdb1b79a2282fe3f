package docker

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestObservedStateServesOneRead(t *testing.T) {
	tests := []struct {
		name string
		snap *snapshot
		put  any
		want bool
	}{
		{"recorded", &snapshot{}, ContainerState{Name: "a", Status: "running"}, true},
		{"another type", &snapshot{}, NetworkState{Name: "a"}, false},
		{"no snapshot", nil, ContainerState{Name: "a"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.snap.observe("container:a", tt.put)
			st, ok := takeObserved[ContainerState](tt.snap, "container:a")
			assert.Equal(t, tt.want, ok)
			if tt.want {
				assert.Equal(t, tt.put, st)
			}
			_, again := takeObserved[ContainerState](tt.snap, "container:a")
			assert.False(t, again, "the next read goes to the engine")
			_, other := takeObserved[ContainerState](tt.snap, "container:b")
			assert.False(t, other)
		})
	}
}
