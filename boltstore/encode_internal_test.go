package boltstore

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzDecode feeds arbitrary bytes to the decoders of stored records and
// leases: they never panic, and what they accept (its checksum matching)
// encodes back to the same bytes.
func FuzzDecode(f *testing.F) {
	r := record{version: 7, hasDue: true, due: -5, indexed: true, index: 99, value: []byte(`{"a":1}`)}
	l := lease{token: 3, expires: 1e18, hasSaved: true, saved: -1, owner: "owner-a"}
	f.Add(r.encode("k"))
	f.Add(l.encode("k"))
	f.Add([]byte{})
	f.Add([]byte{2, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := decodeRecord("k", b); err == nil {
			if got := r.encode("k"); !bytes.Equal(got, b) {
				t.Fatalf("record %x encodes back to %x", b, got)
			}
		}
		if l, err := decodeLease("k", b); err == nil {
			if got := l.encode("k"); !bytes.Equal(got, b) {
				t.Fatalf("lease %x encodes back to %x", b, got)
			}
		}
	})
}

func TestRecordPriorityEncoding(t *testing.T) {
	plain := record{version: 3, hasDue: true, due: 42, indexed: true, index: 42, value: []byte(`{"a":1}`)}
	b := plain.encode("k")
	// Priority 0 is written as before priorities were kept: no flag, no
	// field, so that older versions read what this one writes for it.
	require.Len(t, b, recordHead+len(plain.value)+sumSize)
	assert.Zero(t, b[1]&flagPriority)
	got, err := decodeRecord("k", b)
	require.NoError(t, err)
	assert.Zero(t, got.prio)

	high := plain
	high.prio = 7
	got, err = decodeRecord("k", high.encode("k"))
	require.NoError(t, err)
	assert.Equal(t, 7, got.prio)
	assert.Equal(t, plain.value, got.value)
	assert.Equal(t, int64(42)-7*int64(time.Second), got.rank(got.index))
	assert.Equal(t, int64(42), plain.rank(plain.index), "priority 0 ranks at its index time")
}
