package docker

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/convergekit/converge"
)

// HashKeySize is the size of the keys LoadHashKey creates, in bytes.
const HashKeySize = 32

// minHashKeySize is the smallest key LoadHashKey accepts from a record.
const minHashKeySize = 16

// ErrBadHashKey means the record LoadHashKey reads holds no usable key
// (damaged, written by another program, or shorter than 16 bytes). It is
// not replaced: a new key would recreate every container of the project.
var ErrBadHashKey = errors.New("not a hash key")

// HashKeyRecord is the key of the converge.Store record in which
// LoadHashKey keeps the hash key of project.
func HashKeyRecord(project string) string { return "docker-hash-key/" + project }

// hashKeyRecord is the JSON document of a hash key record.
type hashKeyRecord struct {
	Key []byte `json:"key"`
}

// LoadHashKey returns the key of the label hashes of project
// (Project.HashKey, LoadOptions.HashKey) kept in store under
// HashKeyRecord(project), creating a random key of HashKeySize bytes there
// the first time. It is the key "beside the state": an agent that keeps its
// target in a store (boltstore on a device, pgstore for replicas) keeps the
// key in the same place, so every restart and every replica computes the
// same hashes and recreates nothing, and a store with a Sealer seals the key
// as it seals the target. Processes that call it at once for the same
// project agree on one key: the record is created only where none exists,
// and the others read it. A record that holds no usable key fails with
// ErrBadHashKey naming the record, and is left as it is.
func LoadHashKey(ctx context.Context, store converge.Store, project string) ([]byte, error) {
	rk := HashKeyRecord(project)
	for range 2 {
		rec, err := store.Get(ctx, rk)
		if err == nil {
			var doc hashKeyRecord
			if err := json.Unmarshal(rec.Value, &doc); err != nil || len(doc.Key) < minHashKeySize {
				return nil, fmt.Errorf("docker: hash key record %s: %w", rk, ErrBadHashKey)
			}
			return doc.Key, nil
		}
		if !errors.Is(err, converge.ErrStoreNotFound) {
			return nil, storeErr(rk, err)
		}
		key := make([]byte, HashKeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("docker: hash key record %s: %w", rk, err)
		}
		value, err := json.Marshal(hashKeyRecord{Key: key})
		if err != nil {
			return nil, fmt.Errorf("docker: hash key record %s: %w", rk, err)
		}
		_, err = store.Put(ctx, converge.StoreRecord{Key: rk, Value: value})
		if err == nil {
			return key, nil
		}
		if !errors.Is(err, converge.ErrStoreStale) { // someone else created it first: read theirs
			return nil, storeErr(rk, err)
		}
	}
	return nil, storeErr(rk, &causeError{msg: "created and removed while it was read", err: converge.ErrStoreStale})
}

// storeErr is a store's error about the record rk, read with one package
// prefix.
func storeErr(rk string, err error) error {
	return fmt.Errorf("docker: hash key record %s: %w", rk, &causeError{msg: strings.TrimPrefix(err.Error(), "converge: "), err: err})
}
