package converge

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"fmt"
)

// The sealed format of NewAESGCMSealer: a zero byte (no JSON document
// starts with one), the format version, a random nonce, then the AES-GCM
// ciphertext with its tag.
const (
	sealVersionAESGCM = 1
	sealHeader        = 2
	sealNonce         = 12
)

type aesGCMSealer struct {
	aead cipher.AEAD
}

// NewAESGCMSealer returns a Sealer on AES-GCM (crypto/aes, crypto/cipher)
// with key, which must be 16, 24 or 32 bytes long (AES-128, AES-192 or
// AES-256); another length fails with a *ConfigError that names the field
// and never the key. Keep the key outside the store (an environment
// variable, a file only the service reads, a secret manager).
//
// A sealed value is a zero byte, a format version byte, a random 12-byte
// nonce and the ciphertext with its 16-byte tag; the store key is
// authenticated with it, so a sealed value copied under another store key
// fails to open, as does an altered value or one sealed with another key,
// with an error matching ErrSealed. Open returns a value that does not
// start with a zero byte unchanged: it was stored in clear before sealing
// was turned on, and is sealed on its next write.
//
// What is covered: record values (StoreRecord.Value) and targets. What is
// not: keys and target names, versions, history entries, leases, owners
// and due times, which stores keep in clear; the size of a value, which
// sealing grows by 30 bytes; and a value replaced by an older sealed value
// of the same key (sealing gives confidentiality and integrity per value,
// not freshness: versions and the store's own access control do that).
// Random nonces make one key good for about 2^32 writes; rotate it long
// before that.
func NewAESGCMSealer(key []byte) (Sealer, error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, &ConfigError{Field: "sealer key", Reason: fmt.Sprintf("must be 16, 24 or 32 bytes long (AES-128, -192 or -256), got %d bytes", len(key))}
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, &ConfigError{Field: "sealer key", Reason: "rejected by AES"}
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("converge: AES-GCM: %w", err)
	}
	return &aesGCMSealer{aead: aead}, nil
}

// sealAdditional returns the authenticated data of a value under key: its
// header and the store key.
func sealAdditional(header []byte, key string) []byte {
	ad := make([]byte, 0, len(header)+len(key))
	return append(append(ad, header...), key...)
}

// Seal implements Sealer.
func (s *aesGCMSealer) Seal(key string, plain []byte) ([]byte, error) {
	out := make([]byte, sealHeader+sealNonce, sealHeader+sealNonce+len(plain)+s.aead.Overhead())
	out[0], out[1] = 0, sealVersionAESGCM
	nonce := out[sealHeader:]
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("converge: seal: random nonce: %w", err)
	}
	return s.aead.Seal(out, nonce, plain, sealAdditional(out[:sealHeader], key)), nil
}

// Open implements Sealer.
func (s *aesGCMSealer) Open(key string, sealed []byte) ([]byte, error) {
	if len(sealed) == 0 || sealed[0] != 0 {
		return sealed, nil // stored in clear
	}
	if len(sealed) < sealHeader+sealNonce+s.aead.Overhead() {
		return nil, fmt.Errorf("%w: truncated (%d bytes)", ErrSealed, len(sealed))
	}
	if sealed[1] != sealVersionAESGCM {
		return nil, fmt.Errorf("%w: unknown format version %d", ErrSealed, sealed[1])
	}
	nonce := sealed[sealHeader : sealHeader+sealNonce]
	plain, err := s.aead.Open(nil, nonce, sealed[sealHeader+sealNonce:], sealAdditional(sealed[:sealHeader], key))
	if err != nil {
		return nil, fmt.Errorf("%w: altered, sealed with another key or under another store key", ErrSealed)
	}
	return plain, nil
}
