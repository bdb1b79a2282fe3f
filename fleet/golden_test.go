package fleet_test

import (
	"context"
	"net/http"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
)

// goldenToken is the credential whose hash testdata/v1/device.json holds.
const goldenToken = "golden.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

// seed stores the golden records of format 1 for device "golden".
func seed(t *testing.T, store converge.Store, files map[string]string) {
	t.Helper()
	for key, file := range files {
		b, err := os.ReadFile(file)
		require.NoError(t, err)
		_, err = store.Put(context.Background(), converge.StoreRecord{Key: key, Value: b})
		require.NoError(t, err)
	}
}

var goldenFiles = map[string]string{
	"fleet/devices/golden": "testdata/v1/device.json",
	"fleet/targets/golden": "testdata/v1/target.json",
	"fleet/reports/golden": "testdata/v1/report.json",
}

func TestGoldenRecordsOfFormat1KeepDecoding(t *testing.T) {
	store := converge.NewMemStore()
	seed(t, store, goldenFiles)
	s, _ := bubbleServer(t, store, nil)
	st, err := s.DeviceStatus(context.Background(), "golden")
	require.NoError(t, err)
	assert.Equal(t, fleet.StateReady, st.State)
	assert.Equal(t, uint64(7), st.Target)
	assert.Equal(t, uint64(7), st.Reported)
	res := get(s, "/v1/devices/golden/target", goldenToken, "")
	require.Equal(t, http.StatusOK, res.Code, "the stored credential's hash still matches")
	tgt, err := fleet.DecodeTarget(res.Body.Bytes(), converge.DecodeLimits{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"version":"v7"}`, string(tgt.Payload))
	rev, err := s.SetTarget(context.Background(), "golden", fleet.Target{})
	require.NoError(t, err)
	assert.Equal(t, uint64(8), rev)
}

func TestDamagedRecordsRefusedNamingTheKey(t *testing.T) {
	tests := []struct {
		name  string
		key   string
		value string
	}{
		{"another format", "fleet/targets/golden", `{"format":2,"desired":{"revision":1,"items":[]},"set":"2026-12-01T10:01:00Z"}`},
		{"unknown field", "fleet/reports/golden", `{"format":1,"received":"2026-12-01T10:02:00Z","report":null,"extra":true}`},
		{"wrong type", "fleet/devices/golden", `{"format":1,"token_sha256":5,"enrolled":"2026-12-01T10:00:00Z"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := converge.NewMemStore()
			files := map[string]string{}
			for k, v := range goldenFiles {
				if k != tt.key {
					files[k] = v
				}
			}
			seed(t, store, files)
			_, err := store.Put(context.Background(), converge.StoreRecord{Key: tt.key, Value: []byte(tt.value)})
			require.NoError(t, err)
			s, _ := bubbleServer(t, store, nil)
			_, err = s.DeviceStatus(context.Background(), "golden")
			var fe *fleet.FormatError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tt.key, fe.Key)
			assert.ErrorIs(t, err, fleet.ErrInvalid)
			_, err = s.Counts(context.Background())
			require.ErrorAs(t, err, &fe)
		})
	}
}
