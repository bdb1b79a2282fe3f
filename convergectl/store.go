package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/pgstore"
)

// defaultLockTimeout is how long a command waits for a bolt file another
// process holds: short, so that a running agent is reported, not waited
// for.
const defaultLockTimeout = 200 * time.Millisecond

// common holds the flags every command takes.
type common struct {
	bolt, pg, schema, keyFile, output string
	lockTimeout                       time.Duration
	as                                string
	// showSecrets prints secret values as they are (--show-secrets).
	showSecrets bool
	// watch re-prints a read command's output when the store changes,
	// reading it every watchInterval at least (--watch).
	watch         bool
	watchInterval time.Duration
	// kept, when not nil, is the store the read commands use instead of
	// opening one (a watch keeps a database store open).
	kept converge.Store
}

// keyFileEnv names the environment variable that names the key file when
// --key-file is not given.
const keyFileEnv = "CONVERGECTL_KEY_FILE"

func (c *common) register(fs *flag.FlagSet, write bool) {
	fs.StringVar(&c.bolt, "bolt", "", "the boltstore `FILE` to open")
	fs.StringVar(&c.pg, "pg", "", "the PostgreSQL `DSN` of a pgstore database (postgres://... or key=value pairs)")
	fs.StringVar(&c.schema, "schema", "", "the pgstore schema (default \"converge\")")
	fs.StringVar(&c.keyFile, "key-file", "", "a `FILE` of AES keys in hex, one per line, oldest first, to open sealed values with (default: $"+keyFileEnv+"); without it a sealed value is shown as sealed")
	fs.BoolVar(&c.showSecrets, "show-secrets", false, "print secret values (passwords, tokens, keys: see converge.IsSecretEnv) as they are; a sealed store needs its key too")
	fs.StringVar(&c.output, "o", "table", "output `format`: table, json or yaml")
	fs.DurationVar(&c.lockTimeout, "lock-timeout", defaultLockTimeout, "how long to wait for a bolt file another process holds")
	if write {
		fs.StringVar(&c.as, "as", "", "who the history says did it (default: the user running convergectl)")
		return
	}
	fs.BoolVar(&c.watch, "watch", false, "print again every time what is printed changes, until interrupted (SIGINT)")
	fs.BoolVar(&c.watch, "w", false, "short for --watch")
	fs.DurationVar(&c.watchInterval, "watch-interval", defaultWatchInterval, "with --watch, how often to read the store again (a database's notifications wake it sooner)")
}

// json says errors are written as JSON (-o json).
func (c *common) json() bool { return c.output == "json" }

// structured says the output is a document, JSON or YAML, not a table.
func (c *common) structured() bool { return c.output != "table" }

// check refuses a command line that cannot be run.
func (c *common) check(cmd *command, args []string) error {
	if c.keyFile == "" {
		c.keyFile = os.Getenv(keyFileEnv)
	}
	switch {
	case c.bolt == "" && c.pg == "":
		return &usageError{msg: "name the store: --bolt FILE or --pg DSN"}
	case c.bolt != "" && c.pg != "":
		return &usageError{msg: "--bolt and --pg name two stores: give one"}
	case c.output != "table" && c.output != "json" && c.output != "yaml":
		return &usageError{msg: fmt.Sprintf("-o %q: the formats are table, json and yaml", c.output)}
	case len(args) != cmd.nargs:
		if cmd.nargs == 0 {
			return &usageError{msg: fmt.Sprintf("%s takes no arguments, got %q", cmd.name, args)}
		}
		return &usageError{msg: fmt.Sprintf("%s takes %s, got %d arguments", cmd.name, cmd.args, len(args))}
	}
	return nil
}

// sealedPrefix starts the value a store opened without a key returns for
// a sealed value: a JSON string that no controller object, plan or target
// is, followed by the key ID when the value names one.
const sealedPrefix = `"\u0000sealed`

// markSealer is the converge.Sealer of a store opened to read without a
// key: it opens no value, and returns a marker instead (see sealedValue),
// so that a sealed record is listed and shown as sealed while the clear
// records around it read as they are. It seals nothing: a command that
// writes never uses it.
type markSealer struct{}

func (markSealer) Seal(key string, _ []byte) ([]byte, error) {
	return nil, fmt.Errorf("convergectl: %q: %w (no key given)", key, converge.ErrSealed)
}

func (markSealer) Open(_ string, sealed []byte) ([]byte, error) {
	id := ""
	// Format 2 of converge's AES-GCM keyring: 0, 2, the key ID (8 bytes).
	if len(sealed) >= 10 && sealed[1] == 2 {
		id = ":" + hex.EncodeToString(sealed[2:10])
	}
	return []byte(sealedPrefix + id + `"`), nil
}

// sealedValue reports whether v is the marker of a sealed value, and the
// ID of the key that sealed it when it names one.
func sealedValue(v []byte) (keyID string, ok bool) {
	if !bytes.HasPrefix(v, []byte(sealedPrefix)) {
		return "", false
	}
	id := strings.TrimSuffix(strings.TrimPrefix(string(v), sealedPrefix), `"`)
	return strings.TrimPrefix(id, ":"), true
}

// sealer returns the Sealer the store is opened with and whether clear
// values are read too.
func (c *common) sealer(write bool) (converge.Sealer, bool, error) {
	if c.keyFile == "" {
		if write {
			// A write keeps the store as it is: clear values are written
			// clear, and a sealed one cannot be read (ErrSealed).
			return nil, false, nil
		}
		if c.showSecrets {
			// Nothing sealed can be shown: a sealed value fails with
			// ErrSealed (see needKeyError).
			return nil, false, nil
		}
		return markSealer{}, true, nil
	}
	s, err := converge.ReadKeyFile(c.keyFile)
	if err != nil {
		return nil, false, &keyFileError{path: c.keyFile, err: err}
	}
	// A write with a key seals what it writes, so it refuses a store of
	// clear values (ErrNotSealed) rather than seal one record in it.
	return s, !write, nil
}

// open opens the store the flags name, read-only unless write.
func (c *common) open(ctx context.Context, write bool) (converge.Store, io.Closer, error) {
	if c.kept != nil && !write {
		return c.kept, nopCloser{}, nil
	}
	sealer, clear, err := c.sealer(write)
	if err != nil {
		return nil, nil, err
	}
	if c.bolt != "" {
		timeout := c.lockTimeout
		if timeout <= 0 {
			timeout = -1 // boltstore: at once
		}
		st, err := boltstore.Open(c.bolt, boltstore.Options{Sealer: sealer, AllowClear: clear, LockTimeout: timeout, ReadOnly: !write})
		if errors.Is(err, boltstore.ErrFileLocked) {
			return nil, nil, &lockedError{path: c.bolt, write: write, err: err}
		}
		if err != nil {
			return nil, nil, err
		}
		return st, st, nil
	}
	dsn := c.pg
	if !write {
		if dsn, err = readOnlyDSN(dsn); err != nil {
			return nil, nil, &usageError{msg: "--pg: the DSN does not parse as a URL (postgres://...) or key=value pairs"}
		}
	}
	st, err := pgstore.Open(ctx, dsn, pgstore.Options{Sealer: sealer, AllowClear: clear, Schema: c.schema})
	var pe *pgconn.PgError
	if !write && errors.As(err, &pe) && pe.Code == pgReadOnlyTransaction {
		return nil, nil, &schemaError{schema: c.schemaName(), err: err}
	}
	if err != nil {
		return nil, nil, err
	}
	return st, st, nil
}

// pgReadOnlyTransaction is PostgreSQL's SQLSTATE read_only_sql_transaction:
// a read-only session was asked to write.
const pgReadOnlyTransaction = "25006"

func (c *common) schemaName() string {
	if c.schema == "" {
		return pgstore.DefaultSchema
	}
	return c.schema
}

// readOnlyDSN returns dsn with the run-time parameter that makes every
// transaction of its sessions read-only, so that PostgreSQL itself refuses
// a write.
func readOnlyDSN(dsn string) (string, error) {
	const param = "default_transaction_read_only"
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", err
		}
		q := u.Query()
		q.Set(param, "on")
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	return strings.TrimSpace(dsn) + " " + param + "=on", nil
}

// by returns who a change is made by: --as, or the user running the
// command.
func (c *common) by() string {
	if c.as != "" {
		return c.as
	}
	return currentUser()
}
