package converge

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeyFileError is the error of OpenKeyFile: the file it names cannot
// give a keyring. It never holds a key.
type KeyFileError struct {
	// Path is the key file as the caller named it.
	Path string
	// Line is the 1-based line of the problem, 0 for the whole file.
	Line int
	// Reason says what is wrong.
	Reason string
	// Err is the underlying error, if any.
	Err error
}

// Error describes the problem, naming the file (and the line).
func (e *KeyFileError) Error() string {
	where := e.Path
	if e.Line > 0 {
		where = fmt.Sprintf("%s:%d", e.Path, e.Line)
	}
	if e.Err != nil {
		return fmt.Sprintf("converge: key file %s: %s: %v", where, e.Reason, e.Err)
	}
	return fmt.Sprintf("converge: key file %s: %s", where, e.Reason)
}

// Unwrap returns the underlying error.
func (e *KeyFileError) Unwrap() error { return e.Err }

// OpenKeyFile returns the AES-GCM keyring (NewAESGCMKeyring) of the keys
// in the file at path: one hex key per line (16, 24 or 32 bytes), oldest
// first, the last one sealing; blank lines and lines starting with '#'
// are skipped. It is the format of convergectl's --key-file, so an
// operator opens what a program sealed with the same file.
//
// When the file does not exist, OpenKeyFile creates it with one random
// 32-byte key, mode 0600, written to a temporary file and linked into
// place, so two processes starting at once agree on one key. Keep the
// file apart from the store it seals (another directory, or a mount the
// backups of the store do not copy): whoever has both reads every sealed
// value. A file that others may read (group or world permission bits) is
// refused, as ssh refuses such a key.
//
// Errors are a *KeyFileError naming the file and line, never a key.
func OpenKeyFile(path string) (Sealer, error) {
	keys, err := readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createKeyFile(path); err != nil {
			return nil, err
		}
		keys, err = readKeyFile(path)
	}
	if err != nil {
		return nil, err
	}
	return NewAESGCMKeyring(keys...)
}

// ReadKeyFile returns the AES-GCM keyring of the keys in the file at path,
// read and checked as OpenKeyFile reads it, but it creates nothing: a
// missing file is a *KeyFileError that matches fs.ErrNotExist. It is the
// call of a tool that only reads what a program sealed, such as
// convergectl --key-file.
func ReadKeyFile(path string) (Sealer, error) {
	keys, err := readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &KeyFileError{Path: path, Reason: "does not exist", Err: fs.ErrNotExist}
	}
	if err != nil {
		return nil, err
	}
	return NewAESGCMKeyring(keys...)
}

func readKeyFile(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, &KeyFileError{Path: path, Reason: "cannot be read", Err: unwrapPath(err)}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, &KeyFileError{Path: path, Reason: "cannot be read", Err: unwrapPath(err)}
	}
	if !st.Mode().IsRegular() {
		return nil, &KeyFileError{Path: path, Reason: "is not a regular file"}
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, &KeyFileError{Path: path, Reason: fmt.Sprintf("may be read by others (mode %04o): make it 0600", perm)}
	}
	var keys [][]byte
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		key, err := hex.DecodeString(l)
		if err != nil {
			return nil, &KeyFileError{Path: path, Line: n, Reason: "not a hex key"}
		}
		if k := len(key); k != 16 && k != 24 && k != 32 {
			return nil, &KeyFileError{Path: path, Line: n, Reason: fmt.Sprintf("a key of %d bytes (AES takes 16, 24 or 32)", k)}
		}
		keys = append(keys, key)
	}
	if err := sc.Err(); err != nil {
		return nil, &KeyFileError{Path: path, Reason: "cannot be read", Err: unwrapPath(err)}
	}
	if len(keys) == 0 {
		return nil, &KeyFileError{Path: path, Reason: "holds no key"}
	}
	return keys, nil
}

func createKeyFile(path string) error {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return &KeyFileError{Path: path, Reason: "cannot create a key", Err: err}
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".keyfile-*")
	if err != nil {
		return &KeyFileError{Path: path, Reason: "cannot be created", Err: unwrapPath(err)}
	}
	defer os.Remove(tmp.Name())
	var b bytes.Buffer
	b.WriteString("# converge seal keys, oldest first; the last one seals (see converge.OpenKeyFile)\n")
	b.WriteString(hex.EncodeToString(key) + "\n")
	_, err = tmp.Write(b.Bytes())
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), path) // CreateTemp made it 0600
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return &KeyFileError{Path: path, Reason: "cannot be created", Err: unwrapPath(err)}
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	return nil
}

// unwrapPath drops the *fs.PathError around err, whose path the
// KeyFileError names already (or is a temporary file the caller never
// named).
func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
