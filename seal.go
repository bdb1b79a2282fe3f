package converge

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// The sealed formats of the AES-GCM keyring. Both start with a zero byte
// (no JSON document starts with one) and a format version:
//
//	format 1: 0, 1, nonce (12 bytes), ciphertext and tag
//	format 2: 0, 2, key ID (8 bytes), nonce (12 bytes), ciphertext and tag
//
// Format 1 was written before sealed values named their key; the keyring
// still opens it (trying its keys, newest first) and never writes it.
const (
	sealVersionNoKeyID = 1
	sealVersionKeyID   = 2
	sealHeaderV1       = 2
	sealKeyIDLen       = 8
	sealHeaderV2       = 2 + sealKeyIDLen
	sealNonce          = 12
)

// SealKeyID returns the key ID that NewAESGCMKeyring writes in the values
// it seals with key: 16 hex digits, the first 8 bytes of HMAC-SHA256 under
// key of a fixed label. It tells keys apart without revealing them (an
// error naming the key a value was sealed with prints it), and is the same
// wherever the key is configured, so a key added to a keyring later still
// opens what it sealed before.
func SealKeyID(key []byte) string {
	id := sealKeyID(key)
	return hex.EncodeToString(id[:])
}

func sealKeyID(key []byte) [sealKeyIDLen]byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("converge seal key id"))
	var id [sealKeyIDLen]byte
	copy(id[:], m.Sum(nil))
	return id
}

type aesGCMKey struct {
	id   [sealKeyIDLen]byte
	aead cipher.AEAD
}

// aesGCMKeyring is the Sealer of NewAESGCMKeyring. keys is never empty;
// its last key seals.
type aesGCMKeyring struct {
	keys []aesGCMKey
}

// NewAESGCMSealer returns a Sealer on AES-GCM (crypto/aes, crypto/cipher)
// with one key: NewAESGCMKeyring(key). The key must be 16, 24 or 32 bytes
// long (AES-128, AES-192 or AES-256); another length fails with a
// *ConfigError that names the field and never the key. Keep the key
// outside the store (an environment variable, a file only the service
// reads, a secret manager). To rotate it, move to NewAESGCMKeyring with
// the old key first and the new one last, then call Reseal.
func NewAESGCMSealer(key []byte) (Sealer, error) {
	return NewAESGCMKeyring(key)
}

// NewAESGCMKeyring returns a Sealer on AES-GCM holding keys, oldest first:
// it seals with the last key and opens a value sealed with any of them.
// Each key must be 16, 24 or 32 bytes long; a missing, short, long or
// repeated key fails with a *ConfigError that names the field and the
// key's position, never the key.
//
// A value copied under another store key, or altered, fails to open with
// an error matching ErrSealed; one sealed with a key the keyring does not
// hold fails with ErrSealed naming that key's ID. Open refuses a value
// that is not sealed with ErrNotSealed: a store with a Sealer fails closed
// on a clear value (MemStore.AllowClear turns sealing on over clear
// values). Values of the format before key IDs still open, and Reseal
// rewrites them. docs/internals.md describes the format.
//
// Rotation: construct the keyring with the old key and the new one, so
// that values sealed with either open and new writes use the new key; run
// Reseal (every record, and the targets you name) once; then drop the old
// key. A value still sealed with a dropped key fails with ErrSealed naming
// its key ID.
//
// What is covered: record values (StoreRecord.Value) and targets. What is
// not: keys and target names, versions, history entries, leases, owners
// and due times, which stores keep in clear; the size of a value, which
// sealing grows by 38 bytes; and a value replaced by an older sealed value
// of the same key (sealing gives confidentiality and integrity per value,
// not freshness: versions and the store's own access control do that).
// Random nonces make one key good for about 2^32 writes; rotate it long
// before that.
func NewAESGCMKeyring(keys ...[]byte) (Sealer, error) {
	if len(keys) == 0 {
		return nil, &ConfigError{Field: "sealer keys", Reason: "need at least one key"}
	}
	kr := &aesGCMKeyring{keys: make([]aesGCMKey, 0, len(keys))}
	for i, key := range keys {
		field := "sealer key"
		if len(keys) > 1 {
			field = fmt.Sprintf("sealer key %d", i)
		}
		switch len(key) {
		case 16, 24, 32:
		default:
			return nil, &ConfigError{Field: field, Reason: fmt.Sprintf("must be 16, 24 or 32 bytes long (AES-128, -192 or -256), got %d bytes", len(key))}
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, &ConfigError{Field: field, Reason: "rejected by AES"}
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("converge: AES-GCM: %w", err)
		}
		k := aesGCMKey{id: sealKeyID(key), aead: aead}
		for j := range kr.keys {
			if kr.keys[j].id == k.id {
				return nil, &ConfigError{Field: field, Reason: fmt.Sprintf("repeats sealer key %d (key ID %s)", j, SealKeyID(key))}
			}
		}
		kr.keys = append(kr.keys, k)
	}
	return kr, nil
}

// sealAdditional returns the authenticated data of a value under key: its
// header and the store key.
func sealAdditional(header []byte, key string) []byte {
	ad := make([]byte, 0, len(header)+len(key))
	return append(append(ad, header...), key...)
}

// Seal implements Sealer: it seals plain under the newest key.
func (s *aesGCMKeyring) Seal(key string, plain []byte) ([]byte, error) {
	k := &s.keys[len(s.keys)-1]
	out := make([]byte, sealHeaderV2+sealNonce, sealHeaderV2+sealNonce+len(plain)+k.aead.Overhead())
	out[0], out[1] = 0, sealVersionKeyID
	copy(out[2:sealHeaderV2], k.id[:])
	nonce := out[sealHeaderV2:]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("converge: seal: random nonce: %w", err)
	}
	return k.aead.Seal(out, nonce, plain, sealAdditional(out[:sealHeaderV2], key)), nil
}

// Open implements Sealer.
func (s *aesGCMKeyring) Open(key string, sealed []byte) ([]byte, error) {
	if len(sealed) == 0 || sealed[0] != 0 {
		return nil, fmt.Errorf("%w (%d bytes that do not start with the sealed header)", ErrNotSealed, len(sealed))
	}
	if len(sealed) < 2 {
		return nil, fmt.Errorf("%w: truncated (%d bytes)", ErrSealed, len(sealed))
	}
	overhead := s.keys[0].aead.Overhead()
	switch sealed[1] {
	case sealVersionKeyID:
		if len(sealed) < sealHeaderV2+sealNonce+overhead {
			return nil, fmt.Errorf("%w: truncated (%d bytes)", ErrSealed, len(sealed))
		}
		id := sealed[2:sealHeaderV2]
		for i := range s.keys {
			k := &s.keys[i]
			if !bytes.Equal(k.id[:], id) {
				continue
			}
			nonce := sealed[sealHeaderV2 : sealHeaderV2+sealNonce]
			plain, err := k.aead.Open(nil, nonce, sealed[sealHeaderV2+sealNonce:], sealAdditional(sealed[:sealHeaderV2], key))
			if err != nil {
				return nil, fmt.Errorf("%w: altered or sealed under another store key (key ID %x)", ErrSealed, id)
			}
			return plain, nil
		}
		return nil, fmt.Errorf("%w: sealed with key ID %x, which the keyring does not hold", ErrSealed, id)
	case sealVersionNoKeyID:
		if len(sealed) < sealHeaderV1+sealNonce+overhead {
			return nil, fmt.Errorf("%w: truncated (%d bytes)", ErrSealed, len(sealed))
		}
		nonce := sealed[sealHeaderV1 : sealHeaderV1+sealNonce]
		ad := sealAdditional(sealed[:sealHeaderV1], key)
		for i := len(s.keys) - 1; i >= 0; i-- {
			if plain, err := s.keys[i].aead.Open(nil, nonce, sealed[sealHeaderV1+sealNonce:], ad); err == nil {
				return plain, nil
			}
		}
		return nil, fmt.Errorf("%w: format 1 value: altered, sealed with a key the keyring does not hold or under another store key", ErrSealed)
	default:
		return nil, fmt.Errorf("%w: unknown format version %d", ErrSealed, sealed[1])
	}
}

// Reseal writes every record of s, and the targets named, again through
// the Store contract, so that a store whose Sealer is a keyring seals
// them all with its newest key (and in its current format): run it after
// adding a key to the keyring, before dropping the old one, and after
// turning sealing on over clear values (with the store's AllowClear set
// until it returns). It returns how many records and targets it wrote.
//
// Each record is written with Put at the version it was read (no history
// entry): its version rises by one, and a writer holding the old version
// gets a *StoreVersionError and reads again, as after any write. A record
// written by someone else meanwhile is read again and written again, up
// to 5 times; one deleted meanwhile, or a target not stored, is skipped.
// A target is written again with PutTarget, so it takes a new revision
// (see Store.PutTarget): a reconciler running on it reports against the
// older one until its next SetTarget. The store has no list of targets,
// so only the targets named are written: a reconciler's target is also
// sealed again on its next SetTarget. Records are read with List(ctx,
// ""), all at once.
//
// It stops at the first error: a value the store cannot open (ErrSealed,
// ErrNotSealed) names its key; what was written before stays written, so
// running it again after fixing the cause is safe.
func Reseal(ctx context.Context, s Store, targets ...string) (int, error) {
	recs, err := s.List(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("converge: reseal: %w", bare(err))
	}
	n := 0
	for _, rec := range recs {
		wrote, err := resealRecord(ctx, s, rec)
		if err != nil {
			return n, err
		}
		if wrote {
			n++
		}
	}
	for _, name := range targets {
		t, _, err := s.Target(ctx, name)
		if errors.Is(err, ErrStoreNotFound) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("converge: reseal: %w", bare(err))
		}
		if _, err := s.PutTarget(ctx, name, t); err != nil {
			return n, fmt.Errorf("converge: reseal: %w", bare(err))
		}
		n++
	}
	return n, nil
}

// resealAttempts bounds the writes of one record by Reseal that lose to a
// concurrent writer.
const resealAttempts = 5

func resealRecord(ctx context.Context, s Store, rec StoreRecord) (bool, error) {
	for attempt := 1; ; attempt++ {
		_, err := s.Put(ctx, StoreRecord{Key: rec.Key, Version: rec.Version, Value: rec.Value})
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, ErrStoreStale) || attempt == resealAttempts {
			return false, fmt.Errorf("converge: reseal: %w", bare(err))
		}
		rec, err = s.Get(ctx, rec.Key)
		if errors.Is(err, ErrStoreNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("converge: reseal: %w", bare(err))
		}
	}
}
