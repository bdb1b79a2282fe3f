package converge_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

// TestStoreExistsErrorNamesTheFirstKeys checks that the message of a bulk
// create that found many stored keys names the first few once each, says
// how many more there are, and that Keys holds them all.
func TestStoreExistsErrorNamesTheFirstKeys(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name    string
		stored  int
		named   int
		unnamed int
	}{
		{"one", 1, 1, 0},
		{"five", 5, 5, 0},
		{"twelve", 12, 5, 7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := converge.NewMemStore()
			var recs []converge.NewRecord
			for i := range tt.stored {
				recs = append(recs, converge.NewRecord{Key: fmt.Sprintf("vm/k%02d", i), Value: []byte(`{}`)})
			}
			_, err := s.CreateMany(ctx, recs)
			require.NoError(t, err)
			_, err = s.CreateMany(ctx, append(recs, converge.NewRecord{Key: "vm/new", Value: []byte(`{}`)}))
			var ee *converge.StoreExistsError
			require.ErrorAs(t, err, &ee)
			require.Len(t, ee.Keys, tt.stored)
			var quoted []string
			for _, k := range ee.Keys[:tt.named] {
				quoted = append(quoted, fmt.Sprintf("%q", k))
			}
			assertReadsOnce(t, err.Error(), quoted...)
			for _, k := range ee.Keys[tt.named:] {
				assert.NotContains(t, err.Error(), fmt.Sprintf("%q", k), "only the first keys are named")
			}
			if tt.unnamed > 0 {
				assert.Contains(t, err.Error(), fmt.Sprintf("and %d more", tt.unnamed))
			}
			_, err = s.Get(ctx, "vm/new")
			require.ErrorIs(t, err, converge.ErrStoreNotFound, "nothing created")
		})
	}
}
