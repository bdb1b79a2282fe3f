package boltstore

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unsafe"

	bolt "go.etcd.io/bbolt"
)

// Tags of records and leases in format version 1, which had no checksums.
const (
	legacyRecordTag = 1
	legacyLeaseTag  = 1
)

// verify checks every entry of a store file of the given format version
// (the current one, or 1), as Open does before the store is used: the root
// holds the store's buckets and nothing else, and every entry decodes
// (format 1) or matches its checksum (format 2). It returns the first
// damage found, naming the entry.
func verify(tx *bolt.Tx, format int) error {
	c := tx.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if v != nil || !slices.ContainsFunc(allBuckets, func(b []byte) bool { return bytes.Equal(b, k) }) {
			return corrupt("unexpected entry %q in the root", k)
		}
	}
	for _, name := range allBuckets {
		b := tx.Bucket(name)
		if b == nil {
			return corrupt("bucket %q is missing", name)
		}
		if bytes.Equal(name, bucketMeta) {
			continue
		}
		c := b.Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil {
				return corrupt("bucket %q: entry %q is a bucket", name, k)
			}
			if err := verifyEntry(format, name, k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// verifyEntry checks one entry k, v of the bucket name.
func verifyEntry(format int, name, k, v []byte) error {
	// The key as a string without a copy: it is only read, while the
	// transaction that holds k is open (messages copy it).
	key := unsafe.String(unsafe.SliceData(k), len(k))
	if format >= 2 {
		var ok bool
		switch {
		case bytes.Equal(name, bucketRecords):
			_, err := decodeRecord(key, v)
			return err
		case bytes.Equal(name, bucketLeases):
			_, err := decodeLease(key, v)
			return err
		case bytes.Equal(name, bucketDue):
			_, ok = checkSum(kindDue, key, v)
			ok = ok && len(k) > 8
		case bytes.Equal(name, bucketHistory):
			_, ok = checkSum(kindHistory, key, v)
		case bytes.Equal(name, bucketTargets):
			var body []byte
			if body, ok = checkSum(kindTarget, key, v); ok {
				if _, err := decodeTarget(key, body); err != nil {
					return err
				}
			}
		}
		if !ok {
			return corrupt("%s: checksum mismatch", entryName(name, k))
		}
		return nil
	}
	var ok bool
	switch {
	case bytes.Equal(name, bucketRecords):
		ok = len(v) >= recordHead && v[0] == legacyRecordTag && v[1]&^(flagDue|flagIndexed) == 0 && storedValue(v[recordHead:])
	case bytes.Equal(name, bucketLeases):
		ok = len(v) >= leaseHead && v[0] == legacyLeaseTag && v[1]&^flagSaved == 0
	case bytes.Equal(name, bucketDue):
		ok = len(k) > 8 && len(v) == 0
	case bytes.Equal(name, bucketHistory):
		ok = json.Valid(v)
	case bytes.Equal(name, bucketTargets):
		_, err := decodeTarget(key, v)
		ok = err == nil && (v[0] == targetTag || storedValue(v))
	}
	if !ok {
		return corrupt("%s (format 1): cannot be decoded", entryName(name, k))
	}
	return nil
}

// storedValue reports whether v can be a stored value: sealed (a zero
// byte first) or clear JSON.
func storedValue(v []byte) bool {
	return len(v) > 0 && (v[0] == 0 || json.Valid(v))
}

// entryName names the entry k of the bucket name for an error.
func entryName(name, k []byte) string {
	switch {
	case bytes.Equal(name, bucketRecords):
		return fmt.Sprintf("record %q", k)
	case bytes.Equal(name, bucketLeases):
		return fmt.Sprintf("lease on %q", k)
	case bytes.Equal(name, bucketTargets):
		return fmt.Sprintf("target %q", k)
	case bytes.Equal(name, bucketDue) && len(k) > 8:
		return fmt.Sprintf("due index entry of %q", k[8:])
	case bytes.Equal(name, bucketHistory):
		if n, w := binary.Uvarint(k); w > 0 && uint64(len(k)-w) >= n {
			return fmt.Sprintf("history of %q", k[w:w+int(n)])
		}
	}
	return fmt.Sprintf("%s entry %q", name, k)
}

// migrate upgrades a file of format version 1, checked by verify, to the
// current format in the transaction tx: every entry gets its checksum
// (records and leases their new tag). A power cut during the upgrade
// leaves the file as it was, in format 1.
func migrate(tx *bolt.Tx) error {
	for _, spec := range []struct {
		name []byte
		kind byte
	}{
		{bucketRecords, kindRecord}, {bucketLeases, kindLease}, {bucketDue, kindDue},
		{bucketHistory, kindHistory}, {bucketTargets, kindTarget},
	} {
		b := tx.Bucket(spec.name)
		var keys, values [][]byte
		if err := b.ForEach(func(k, v []byte) error {
			keys, values = append(keys, slices.Clone(k)), append(values, slices.Clone(v))
			return nil
		}); err != nil {
			return err
		}
		for i, k := range keys {
			body := values[i]
			switch spec.kind {
			case kindRecord:
				body[0] = recordTag
			case kindLease:
				body[0] = leaseTag
			}
			if err := b.Put(k, appendSum(spec.kind, string(k), body)); err != nil {
				return err
			}
		}
	}
	return tx.Bucket(bucketMeta).Put(keyFormat, []byte(strconv.Itoa(FormatVersion)))
}
