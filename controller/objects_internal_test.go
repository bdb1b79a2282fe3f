package controller

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// addedSince is the time the encoder tests stamp, with nanoseconds and a
// zone, as time.Now has them.
var addedSince = time.Date(2026, 12, 4, 14, 42, 32, 123456789, time.FixedZone("CET", 3600))

// TestAddedEncoderWritesWhatMarshalWrites checks the documents of new
// objects byte for byte against json.Marshal's.
func TestAddedEncoderWritesWhatMarshalWrites(t *testing.T) {
	tests := []struct {
		name  string
		state State
		data  string // "" for none
	}{
		{"no data", "new", ""},
		{"object", "new", `{"rack":"r1","slots":[1,2]}`},
		{"spaces", "provisioning", " {\n\t\"a\" : [ 1 , 2 ] } "},
		{"html", "new", `{"a":"<b>&</b>"}`},
		{"line separator", "new", "\"\u2028\u2029\""},
		{"unicode state", "prêt \"quoted\"", `"é"`},
		{"null", "new", `null`},
	}
	enc, err := newAddedEncoder(addedSince)
	require.NoError(t, err)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := &Object{State: tt.state, Since: addedSince}
			if tt.data != "" {
				obj.Data = json.RawMessage(tt.data)
			}
			want, err := json.Marshal(obj)
			require.NoError(t, err)
			got, err := enc.encode(obj)
			require.NoError(t, err)
			assert.Equal(t, string(want), string(got))
		})
	}
}

// FuzzAddedEncoder compares the encoder with json.Marshal on any state
// and any valid data.
func FuzzAddedEncoder(f *testing.F) {
	f.Add("new", []byte(`{"a":1}`))
	f.Add("x", []byte(` [ "<", 1e3 ] `))
	f.Fuzz(func(t *testing.T, state string, data []byte) {
		if !json.Valid(data) {
			return
		}
		obj := &Object{State: State(state), Since: addedSince, Data: data}
		want, err := json.Marshal(obj)
		require.NoError(t, err)
		enc, err := newAddedEncoder(addedSince)
		require.NoError(t, err)
		got, err := enc.encode(obj)
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))
	})
}
