package boltstore

import (
	"bytes"
	"testing"
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
