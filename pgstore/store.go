package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergekit/converge"
)

// DefaultSchema is the schema a Store keeps its tables in when
// Options.Schema is empty.
const DefaultSchema = "converge"

// Bounds on waiting for the database, when Options leaves them zero.
const (
	// DefaultConnectTimeout bounds making a connection, login included:
	// Open against a server that accepts and never answers fails with a
	// *ConnectError after it, whatever the context. A connect_timeout in
	// the DSN takes precedence for the pool's connections.
	DefaultConnectTimeout = 10 * time.Second
	// DefaultStatementTimeout bounds every call of a Store on the
	// database (and the schema migration of Open and New): a call that
	// gets no answer within it fails with an error matching
	// context.DeadlineExceeded.
	DefaultStatementTimeout = 30 * time.Second
)

// maxPayload is the longest key sent as a notification payload:
// PostgreSQL refuses payloads of 8000 bytes or more. Longer keys are sent
// as "", which watchers take as "look at everything".
const maxPayload = 7999

// Options tunes a Store. The zero value keeps DefaultHistoryEntries per
// key, stores values in clear, in the schema "converge", notifying on the
// channel "converge".
type Options struct {
	// Retention bounds the history kept per key; the zero value keeps the
	// newest converge.DefaultHistoryEntries.
	Retention converge.Retention
	// Sealer, when set, seals every record value and target before it is
	// written, and a value read that is not sealed is refused with an
	// error matching converge.ErrNotSealed. See converge.Sealer for what
	// is covered, and the package documentation for values sealed by
	// earlier versions.
	Sealer converge.Sealer
	// AllowClear, with a Sealer, reads a value that is not sealed as the
	// clear JSON it is instead of refusing it: the migration path for a
	// database written before sealing was turned on. Open the stores with
	// Sealer and AllowClear, run converge.Reseal (naming the targets) on
	// one, then open them without AllowClear. Leave it off otherwise:
	// anyone who can write the tables could then plant a clear value.
	// Without a Sealer it changes nothing.
	AllowClear bool
	// Schema is the PostgreSQL schema of the store's tables, created at
	// open when missing; empty means DefaultSchema. Stores that share a
	// schema share their records.
	Schema string
	// Channel is the LISTEN/NOTIFY channel on which writes are announced
	// to watchers; empty means the schema's name. Stores sharing a schema
	// must use the same channel.
	Channel string
	// ConnectTimeout bounds making a connection (Open, and every
	// connection the pool of Open makes later) when the DSN has no
	// connect_timeout; 0 means DefaultConnectTimeout, and a negative value
	// leaves it to the context (and the DSN).
	ConnectTimeout time.Duration
	// StatementTimeout bounds every call of the Store on the database, and
	// the schema migration at open: a call still waiting for an answer
	// after it fails with an error matching context.DeadlineExceeded (a
	// context with an earlier deadline ends it sooner). A Watch is bounded
	// while it starts listening, not while it waits for notifications.
	// 0 means DefaultStatementTimeout, and a negative value leaves every
	// call to its context.
	StatementTimeout time.Duration
	// Tracer, when set, traces every statement, batch and connection of
	// the pool Open makes (and of the connection a Watch listens on),
	// with the context of the Store call that made it: pgx's tracer
	// interface, so that a well-kept instrumentation plugs in, such as
	// github.com/exaring/otelpgx for OpenTelemetry. A Tracer that also
	// implements pgx.BatchTracer, pgx.CopyFromTracer, pgx.PrepareTracer or
	// pgx.ConnectTracer is called for those too. New leaves the caller's
	// pool as it is: set its ConnConfig.Tracer there.
	Tracer pgx.QueryTracer
}

// connectTimeout returns ConnectTimeout or its default; 0 means none.
func (o Options) connectTimeout() time.Duration {
	switch {
	case o.ConnectTimeout == 0:
		return DefaultConnectTimeout
	case o.ConnectTimeout < 0:
		return 0
	}
	return o.ConnectTimeout
}

// statementTimeout returns StatementTimeout or its default; 0 means none.
func (o Options) statementTimeout() time.Duration {
	switch {
	case o.StatementTimeout == 0:
		return DefaultStatementTimeout
	case o.StatementTimeout < 0:
		return 0
	}
	return o.StatementTimeout
}

// Store is a converge.Queue on PostgreSQL, safe for concurrent use and for
// many processes sharing one database. Make one with Open or New.
type Store struct {
	pool     *pgxpool.Pool
	ownPool  bool
	schema   string
	channel  string
	sealer   converge.Sealer
	clear    bool          // Options.AllowClear
	stmt     time.Duration // bound on each call; 0: none
	keep     int           // history entries kept per key; < 0: all
	ageUS    int64         // history age bound in microseconds; 0: none
	sql      statements
	writes   group // Put and Finish, committed together when they come at once
	mu       sync.Mutex
	watchers map[*watcher]struct{}
	closed   bool
}

var (
	_ converge.Queue       = (*Store)(nil)
	_ converge.Prioritizer = (*Store)(nil)
	_ converge.Linker      = (*Store)(nil)
)

// Open connects to the database named by dsn (a postgres:// URL or
// key=value pairs, as libpq takes them), creates or migrates the store's
// schema and returns the Store, which owns its connection pool: Close
// closes it. A DSN that does not parse fails with a *DSNError, a database
// that cannot be reached with a *ConnectError; neither message holds the
// password. A server that does not answer fails with a *ConnectError
// after Options.ConnectTimeout (DefaultConnectTimeout), even when ctx
// has no deadline.
func Open(ctx context.Context, dsn string, opts Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, dsnError(dsn, err)
	}
	d := opts.connectTimeout()
	if d > 0 && cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = d
	}
	if opts.Tracer != nil {
		cfg.ConnConfig.Tracer = opts.Tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(dsn, cfg, err)
	}
	pctx, cancel := context.WithCancel(ctx)
	if d > 0 {
		pctx, cancel = context.WithTimeout(ctx, d)
	}
	err = pool.Ping(pctx)
	var ne net.Error
	timedOut := err != nil && ctx.Err() == nil &&
		(pctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout())
	cancel()
	if err != nil {
		pool.Close()
		ce := connectError(dsn, cfg, err)
		if timedOut {
			ce.Reason = fmt.Sprintf("no answer within %s", d)
			ce.err = fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
		}
		return nil, ce
	}
	s, err := New(ctx, pool, opts)
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownPool = true
	return s, nil
}

func connectError(dsn string, cfg *pgxpool.Config, err error) *ConnectError {
	cc := cfg.ConnConfig
	cause := err
	// pgx's message repeats the user and database; keep what follows.
	var pce *pgconn.ConnectError
	if errors.As(err, &pce) && errors.Unwrap(pce) != nil {
		cause = errors.Unwrap(pce)
	}
	reason := scrub(strings.ReplaceAll(cause.Error(), "\n", "; "), secretsOf(dsn, cc.Password))
	return &ConnectError{Host: cc.Host, Port: cc.Port, Database: cc.Database, User: cc.User, Reason: reason, err: err}
}

// New returns a Store on the caller's pool, after creating or migrating
// its schema. Close leaves the pool open. A role that may not create the
// schema fails with a *PermissionError; a schema migrated by a newer
// pgstore with a *SchemaVersionError.
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Store, error) {
	if pool == nil {
		return nil, &OptionsError{Field: "pool", Reason: "must not be nil"}
	}
	s := &Store{pool: pool, writes: group{pool: pool}, schema: opts.Schema, channel: opts.Channel, sealer: opts.Sealer, clear: opts.AllowClear, stmt: opts.statementTimeout(), watchers: map[*watcher]struct{}{}}
	if s.schema == "" {
		s.schema = DefaultSchema
	}
	if s.channel == "" {
		s.channel = s.schema
	}
	for _, f := range []struct{ field, v string }{{"Schema", s.schema}, {"Channel", s.channel}} {
		if len(f.v) > 63 || !utf8.ValidString(f.v) || strings.ContainsRune(f.v, 0) {
			return nil, &OptionsError{Field: f.field, Reason: fmt.Sprintf("%q is not a PostgreSQL name (valid UTF-8, no NUL, at most 63 bytes)", f.v)}
		}
	}
	switch r := opts.Retention; {
	case r.Entries == 0:
		s.keep = converge.DefaultHistoryEntries
	default:
		s.keep = r.Entries
	}
	if opts.Retention.Age < 0 {
		return nil, &OptionsError{Field: "Retention.Age", Reason: fmt.Sprintf("must not be negative, got %s", opts.Retention.Age)}
	}
	s.ageUS = opts.Retention.Age.Microseconds()
	if opts.Retention.Age > 0 && s.ageUS == 0 {
		s.ageUS = 1
	}
	mctx, cancel := s.bound(ctx)
	defer cancel()
	if err := migrate(mctx, pool, s.schema); err != nil {
		return nil, err
	}
	s.sql = buildStatements(pgx.Identifier{s.schema}.Sanitize(), s.keep, s.ageUS)
	s.writes.finishMany, s.writes.writeMany, s.writes.channel = s.sql.finishMany, s.sql.writeMany, s.channel
	if err := s.keepChannel(mctx); err != nil {
		return nil, err
	}
	return s, nil
}

// keepChannel stores the store's channel in the schema's settings, where
// the trigger that wakes the watchers of a transition (converge.Linker)
// reads it, unless it is there already: a role that may only read the
// schema opens a store whose channel is kept.
func (s *Store) keepChannel(ctx context.Context) error {
	var have string
	err := s.pool.QueryRow(ctx, s.sql.channel).Scan(&have)
	if err == nil && have == s.channel {
		return nil
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return s.dbError("read the settings of schema", s.schema, err)
	}
	if _, err := s.pool.Exec(ctx, s.sql.setChannel, s.channel); err != nil {
		return s.dbError("keep the channel in schema", s.schema, err)
	}
	return nil
}

// bound returns ctx bounded by the statement timeout, if any: ctx itself
// when it has no such bound or ends by then anyway (a controller's calls
// mostly do), which spares a context and its timer per call.
func (s *Store) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.stmt <= 0 {
		return ctx, nop
	}
	if d, ok := ctx.Deadline(); ok && !d.After(time.Now().Add(s.stmt)) {
		return ctx, nop
	}
	return context.WithTimeout(ctx, s.stmt)
}

func nop() {}

// Close stops the store's watches and, when Open made the pool, closes it,
// waiting for its connections to close. It returns an error, as
// boltstore.Store.Close does, so that both are an io.Closer; it has
// nothing to report today and returns nil, also when called again.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	ws := make([]*watcher, 0, len(s.watchers))
	for w := range s.watchers {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.stop()
	}
	if s.ownPool {
		s.pool.Close()
	}
	return nil
}

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Schema returns the name of the schema holding the store's tables.
func (s *Store) Schema() string { return s.schema }

// badText tells whether checkText refuses v.
func badText(v string) bool {
	return !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0
}

// checkText refuses a string PostgreSQL cannot store as text.
func checkText(key, field, v string) error {
	if !utf8.ValidString(v) {
		return &converge.StoreRequestError{Key: key, Field: field, Reason: "not valid UTF-8"}
	}
	if strings.IndexByte(v, 0) >= 0 {
		return &converge.StoreRequestError{Key: key, Field: field, Reason: "contains a NUL byte"}
	}
	return nil
}

func checkKey(key, field string) error {
	if key == "" {
		return &converge.StoreRequestError{Key: key, Field: field, Reason: "must not be empty"}
	}
	return checkText(key, field, key)
}

// seal turns a JSON value into what is stored: the value itself, or its
// sealed form when the store has a Sealer. ad(key) binds it to its key
// (made only then).
func (s *Store) seal(key, field string, ad func(string) string, v json.RawMessage) ([]byte, error) {
	if !json.Valid(v) {
		return nil, &converge.StoreRequestError{Key: key, Field: field, Reason: "not valid JSON"}
	}
	if s.sealer == nil {
		return v, nil
	}
	sealed, err := s.sealer.Seal(ad(key), v)
	if err != nil {
		return nil, fmt.Errorf("pgstore: key %q: seal %s: %w", key, field, err)
	}
	if len(sealed) == 0 || sealed[0] != 0 {
		return nil, fmt.Errorf("pgstore: key %q: seal %s: the Sealer's output does not start with a zero byte", key, field)
	}
	return sealed, nil
}

// open turns a stored value back into JSON. ad(key) is the associated
// data the value is sealed under, legacy(key) the one pgstore used before
// sealed values named their key (see legacyAD); both are made only for a
// sealed value. With a Sealer it fails closed: a clear value is refused
// unless AllowClear.
func (s *Store) open(key string, ad, legacy func(string) string, stored []byte) (json.RawMessage, error) {
	if len(stored) == 0 || stored[0] != 0 {
		if s.sealer != nil && !s.clear {
			return nil, fmt.Errorf("pgstore: key %q: value is not sealed and the store has a Sealer (Options.AllowClear reads clear values while migrating): %w", key, converge.ErrNotSealed)
		}
		return json.RawMessage(stored), nil
	}
	if s.sealer == nil {
		return nil, fmt.Errorf("pgstore: key %q: value is sealed and the store has no Sealer: %w", key, converge.ErrSealed)
	}
	plain, err := s.sealer.Open(ad(key), stored)
	if err != nil && len(stored) > 1 && stored[1] == legacySealFormat {
		if p, lerr := s.sealer.Open(legacy(key), stored); lerr == nil {
			plain, err = p, nil
		}
	}
	if err != nil {
		if errors.Is(err, converge.ErrSealed) {
			return nil, fmt.Errorf("pgstore: key %q: %w", key, err)
		}
		return nil, fmt.Errorf("pgstore: key %q: %w: %w", key, converge.ErrSealed, err)
	}
	return plain, nil
}

// recordAD and targetAD are what the sealed value of a record and of a
// target are bound to: the kind, a NUL (which keys and names cannot
// hold), and the key, so that a value cannot move to another key, nor
// between a record and a target (record "target:x" and target "x" too).
func recordAD(key string) string  { return "record\x00" + key }
func targetAD(name string) string { return "target\x00" + name }

// legacySealFormat is the format byte of the values converge's AES-GCM
// Sealer wrote before sealed values named their key (format 1). pgstore
// then bound a record to its key and a target to "target:" and its name,
// which a record named "target:x" shared with target "x"; a value in that
// format that does not open under its associated data is tried under the
// old one, so that a database sealed by an earlier version still opens.
// converge.Reseal rewrites such values in the current format, bound apart.
const legacySealFormat = 1

func legacyRecordAD(key string) string  { return key }
func legacyTargetAD(name string) string { return "target:" + name }

func payload(key string) string {
	if len(key) > maxPayload {
		return ""
	}
	return key
}

// Get implements converge.Store.
func (s *Store) Get(ctx context.Context, key string) (converge.StoreRecord, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var rec converge.StoreRecord
	var v int64
	var stored []byte
	err := s.pool.QueryRow(ctx, s.sql.get, key).Scan(&v, &stored)
	if errors.Is(err, pgx.ErrNoRows) {
		return rec, fmt.Errorf("pgstore: key %q: %w", key, converge.ErrStoreNotFound)
	}
	if err != nil {
		return rec, s.dbError("get", key, err)
	}
	val, err := s.open(key, recordAD, legacyRecordAD, stored)
	if err != nil {
		return rec, err
	}
	return converge.StoreRecord{Key: key, Version: uint64(v), Value: val}, nil
}

// histArgs is the history part of a write's arguments: the entries as
// arrays (retention is built into the statements).
type histArgs struct {
	ats                 []time.Time
	froms, tos, reasons []string
	subjects            []*string // JSON; nil: the record itself
	bys                 []string
}

func (s *Store) history(key string, entries []converge.HistoryEntry) (histArgs, error) {
	var h histArgs
	n := len(entries)
	if n == 0 {
		return h, nil
	}
	h.ats = make([]time.Time, 0, n)
	h.froms, h.tos, h.reasons = make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	h.subjects = make([]*string, 0, n)
	h.bys = make([]string, 0, n)
	err := h.add(key, entries)
	return h, err
}

// add checks entries, the history of key, and appends them to h.
func (h *histArgs) add(key string, entries []converge.HistoryEntry) error {
	for i, e := range entries {
		fields := [...]struct{ name, v string }{{"From", e.From}, {"To", e.To}, {"Reason", e.Reason}, {"By", e.By}, {"Subject.Group", ""}, {"Subject.Host", ""}}
		n := 4
		if e.Subject != nil {
			// JSON would replace bad UTF-8 and jsonb refuses NUL: either
			// would not come back as written.
			fields[4].v, fields[5].v = e.Subject.Group, e.Subject.Host
			n = 6
		}
		for _, f := range fields[:n] {
			if badText(f.v) {
				// The field's name is spelled out only for the error.
				return checkText(key, fmt.Sprintf("history[%d].%s", i, f.name), f.v)
			}
		}
		var subject *string
		if e.Subject != nil {
			b, err := json.Marshal(e.Subject)
			if err != nil {
				return fmt.Errorf("pgstore: key %q: history[%d].Subject: %w", key, i, err) // cannot fail: ints and strings
			}
			js := string(b)
			subject = &js
		}
		h.ats, h.froms, h.tos = append(h.ats, e.At), append(h.froms, e.From), append(h.tos, e.To)
		h.reasons, h.subjects, h.bys = append(h.reasons, e.Reason), append(h.subjects, subject), append(h.bys, e.By)
	}
	return nil
}

func (h histArgs) args() []any {
	return h.appendTo(make([]any, 0, 6))
}

// appendTo appends the history's arguments to args, as arrays that pgx
// encodes as they are (a plain slice it wraps first, for each call, and
// a slice of pointers by reflection).
func (h histArgs) appendTo(args []any) []any {
	return append(args, pgtype.FlatArray[time.Time](h.ats), pgtype.FlatArray[string](h.froms), pgtype.FlatArray[string](h.tos),
		pgtype.FlatArray[string](h.reasons), pgtype.FlatArray[*string](h.subjects), pgtype.FlatArray[string](h.bys))
}

// Put implements converge.Store. The version check, the fence on
// rec.Token, the history and its retention are one statement: the
// database rejects a stale or fenced-off write. A record it creates has
// priority 0; a write keeps the record's priority.
func (s *Store) Put(ctx context.Context, rec converge.StoreRecord, history ...converge.HistoryEntry) (uint64, error) {
	return s.write(ctx, rec, nil, history)
}

// put writes rec, and sets its priority unless priority is negative.
func (s *Store) put(ctx context.Context, rec converge.StoreRecord, priority int, history []converge.HistoryEntry) (uint64, error) {
	var also func(pgx.Tx) error
	if priority >= 0 {
		also = func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, s.sql.setPriority, rec.Key, int32(priority))
			return err
		}
	}
	return s.write(ctx, rec, also, history)
}

// write writes rec, and, when also is not nil, runs also in the same
// transaction.
func (s *Store) write(ctx context.Context, rec converge.StoreRecord, also func(pgx.Tx) error, history []converge.HistoryEntry) (uint64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkKey(rec.Key, "Key"); err != nil {
		return 0, err
	}
	stored, err := s.seal(rec.Key, "Value", recordAD, rec.Value)
	if err != nil {
		return 0, err
	}
	h, err := s.history(rec.Key, history)
	if err != nil {
		return 0, err
	}
	sql := s.sql.put[putVariant(rec.Version == 0, rec.Token != 0)]
	args := func() []any {
		args := make([]any, 3, 12) // the most arguments a put has
		args[0], args[1], args[2] = rec.Key, int64(rec.Version), stored
		if rec.Token != 0 {
			args = append(args, int64(rec.Token))
		}
		args = h.appendTo(args)
		if rec.Version == 0 {
			args = append(args, s.channel, payload(rec.Key)) // a new record is announced
		}
		return args
	}
	if also != nil {
		return s.writeAlso(ctx, rec, also, sql, args())
	}
	c := &call{ctx: ctx, key: rec.Key, sql: sql, args: args}
	c.scan = func(r pgx.Row) error {
		var ignored string
		return r.Scan(&c.version, &ignored)
	}
	if rec.Version != 0 {
		c.put = &putArgs{version: int64(rec.Version), token: int64(rec.Token), value: stored, hist: h}
	}
	err = s.writes.do(c)
	if err == nil {
		return uint64(c.version), nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return 0, s.dbError("put", rec.Key, err)
	}
	return 0, s.putRefused(ctx, rec)
}

// putRefused says why a put of rec wrote nothing (this read only
// explains, it decides nothing).
func (s *Store) putRefused(ctx context.Context, rec converge.StoreRecord) error {
	var have *int64
	var leased bool
	if err := s.pool.QueryRow(ctx, s.sql.why, rec.Key, int64(rec.Token)).Scan(&have, &leased); err != nil {
		return s.dbError("put", rec.Key, err)
	}
	if rec.Token != 0 && !leased {
		return fmt.Errorf("pgstore: put key %q with lease token %d: %w", rec.Key, rec.Token, converge.ErrLeaseLost)
	}
	ve := &converge.StoreVersionError{Key: rec.Key, Want: rec.Version}
	if have != nil {
		ve.Have = uint64(*have)
	}
	return ve
}

// PutPriority implements converge.Prioritizer: Put's statement and the
// record's new priority, in one transaction (not grouped with other
// writes, as Put's are: a priority changes seldom).
func (s *Store) PutPriority(ctx context.Context, rec converge.StoreRecord, priority int, history ...converge.HistoryEntry) (uint64, error) {
	if err := converge.CheckPriority(rec.Key, priority); err != nil {
		return 0, err
	}
	return s.put(ctx, rec, priority, history)
}

// PutWatching implements converge.Linker: Put's statement and the keys
// rec.Key watches, in one transaction (not grouped with other writes).
// A transition of a watched record makes rec.Key due in the transaction
// that appends it, through a trigger on the history (schema migration 8),
// whichever statement or process appends it, and is announced on the
// store's channel.
func (s *Store) PutWatching(ctx context.Context, rec converge.StoreRecord, watched []string, history ...converge.HistoryEntry) (uint64, error) {
	w, err := converge.CheckWatched(rec.Key, watched)
	if err != nil {
		return 0, err
	}
	return s.write(ctx, rec, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, s.sql.setWatching, rec.Key, pgtype.FlatArray[string](w))
		return err
	}, history)
}

// Watching implements converge.Linker.
func (s *Store) Watching(ctx context.Context, key string) ([]string, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out []string
	if err := s.pool.QueryRow(ctx, s.sql.watching, key).Scan(&out); err != nil {
		return nil, s.dbError("watches of", key, err)
	}
	return out, nil
}

// writeAlso runs the put statement sql with args and also, in one
// transaction.
func (s *Store) writeAlso(ctx context.Context, rec converge.StoreRecord, also func(pgx.Tx) error, sql string, args []any) (uint64, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, s.dbError("put", rec.Key, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	var version int64
	var ignored string
	err = tx.QueryRow(ctx, sql, args...).Scan(&version, &ignored)
	if errors.Is(err, pgx.ErrNoRows) {
		_ = tx.Rollback(ctx)
		return 0, s.putRefused(ctx, rec)
	}
	if err != nil {
		return 0, s.dbError("put", rec.Key, err)
	}
	if err := also(tx); err != nil {
		return 0, s.dbError("put", rec.Key, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, s.dbError("put", rec.Key, err)
	}
	return uint64(version), nil
}

// Priority implements converge.Prioritizer.
func (s *Store) Priority(ctx context.Context, key string) (int, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var prio int32
	err := s.pool.QueryRow(ctx, s.sql.priority, key).Scan(&prio)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("pgstore: key %q: %w", key, converge.ErrStoreNotFound)
	}
	if err != nil {
		return 0, s.dbError("priority of", key, err)
	}
	return int(prio), nil
}

// Delete implements converge.Store, in one statement like Put.
func (s *Store) Delete(ctx context.Context, key string, version uint64, history ...converge.HistoryEntry) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkKey(key, "key"); err != nil {
		return err
	}
	h, err := s.history(key, history)
	if err != nil {
		return err
	}
	args := append([]any{key, int64(version)}, h.args()...)
	args = append(args, s.channel, payload(key))
	var v int64
	var ignored string
	err = s.pool.QueryRow(ctx, s.sql.del, args...).Scan(&v, &ignored)
	if err == nil {
		return nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return s.dbError("delete", key, err)
	}
	var have *int64
	var leased bool
	if err := s.pool.QueryRow(ctx, s.sql.why, key, int64(0)).Scan(&have, &leased); err != nil {
		return s.dbError("delete", key, err)
	}
	if have == nil {
		return fmt.Errorf("pgstore: key %q: %w", key, converge.ErrStoreNotFound)
	}
	return &converge.StoreVersionError{Key: key, Want: version, Have: uint64(*have)}
}

// List implements converge.Store.
func (s *Store) List(ctx context.Context, prefix string) ([]converge.StoreRecord, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkText(prefix, "prefix", prefix); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql.list, prefix)
	if err != nil {
		return nil, s.dbError("list", prefix, err)
	}
	out := []converge.StoreRecord{}
	var key string
	var v int64
	var stored []byte
	_, err = pgx.ForEachRow(rows, []any{&key, &v, &stored}, func() error {
		val, err := s.open(key, recordAD, legacyRecordAD, slices.Clone(stored))
		if err != nil {
			return err
		}
		out = append(out, converge.StoreRecord{Key: key, Version: uint64(v), Value: val})
		return nil
	})
	if err != nil {
		return nil, s.dbError("list", prefix, err)
	}
	return out, nil
}

// History implements converge.Store. Times are kept to the microsecond.
func (s *Store) History(ctx context.Context, key string) ([]converge.HistoryEntry, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkText(key, "key", key); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql.history, key)
	if err != nil {
		return nil, s.dbError("history", key, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (converge.HistoryEntry, error) {
		var e converge.HistoryEntry
		var subject *string
		if err := row.Scan(&e.At, &e.From, &e.To, &e.Reason, &subject, &e.By); err != nil {
			return e, err
		}
		if subject != nil {
			e.Subject = new(converge.HistorySubject)
			if err := json.Unmarshal([]byte(*subject), e.Subject); err != nil {
				return e, fmt.Errorf("subject %s of an entry: %w", *subject, err) // dbError names the key
			}
		}
		return e, nil
	})
	if err != nil {
		return nil, s.dbError("history", key, err)
	}
	if out == nil {
		out = []converge.HistoryEntry{}
	}
	return out, nil
}

// PutTarget implements converge.Store. The revision is taken in the
// same statement that writes the target, so replicas sharing the database
// never get the same one.
func (s *Store) PutTarget(ctx context.Context, name string, target json.RawMessage) (uint64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkKey(name, "name"); err != nil {
		return 0, err
	}
	var stored any // NULL: take a revision, keep the target
	if len(target) > 0 {
		v, err := s.seal(name, "target", targetAD, target)
		if err != nil {
			return 0, err
		}
		stored = v
	}
	var rev int64
	if err := s.pool.QueryRow(ctx, s.sql.putTarget, name, stored).Scan(&rev); err != nil {
		return 0, s.dbError("put target", name, err)
	}
	return uint64(rev), nil
}

// Target implements converge.Store.
func (s *Store) Target(ctx context.Context, name string) (json.RawMessage, uint64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var stored []byte
	var rev int64
	err := s.pool.QueryRow(ctx, s.sql.target, name).Scan(&stored, &rev)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && stored == nil) {
		return nil, 0, fmt.Errorf("pgstore: target %q: %w", name, converge.ErrStoreNotFound)
	}
	if err != nil {
		return nil, 0, s.dbError("target", name, err)
	}
	v, err := s.open(name, targetAD, legacyTargetAD, stored)
	if err != nil {
		return nil, 0, err
	}
	return v, uint64(rev), nil
}

func checkLease(key, owner string, ttl time.Duration) error {
	if err := checkKey(key, "key"); err != nil {
		return err
	}
	if owner == "" {
		return &converge.StoreRequestError{Key: key, Field: "owner", Reason: "must not be empty"}
	}
	if err := checkText(key, "owner", owner); err != nil {
		return err
	}
	if ttl < time.Microsecond {
		return &converge.StoreRequestError{Key: key, Field: "ttl", Reason: fmt.Sprintf("must be at least 1µs, got %s", ttl)}
	}
	return nil
}

// Claim implements converge.Store. Lease times are the database's clock;
// the token of a key grows by one each time the key changes owner, and
// never goes back, even across Release and Delete.
func (s *Store) Claim(ctx context.Context, key, owner string, ttl time.Duration) (converge.Lease, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkLease(key, owner, ttl); err != nil {
		return converge.Lease{}, err
	}
	for attempt := 0; ; attempt++ {
		l := converge.Lease{Key: key}
		var token int64
		err := s.pool.QueryRow(ctx, s.sql.claim, key, owner, ttl.Microseconds()).Scan(&l.Owner, &l.Expires, &token)
		if err == nil {
			l.Token = uint64(token)
			return l, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return converge.Lease{}, s.dbError("claim", key, err)
		}
		ce := &converge.ClaimError{Key: key, Owner: owner}
		var free bool
		err = s.pool.QueryRow(ctx, s.sql.holder, key).Scan(&ce.Holder, &ce.Expires, &free)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return converge.Lease{}, s.dbError("claim", key, err)
		}
		if (free || errors.Is(err, pgx.ErrNoRows)) && attempt < 2 {
			continue // released meanwhile: try again
		}
		return converge.Lease{}, ce
	}
}

// Release implements converge.Store. The lease row stays, with no owner,
// so that the key's next token is higher. A record that ClaimDue took
// under the lease is due again at once, before the records due by their
// due time.
func (s *Store) Release(ctx context.Context, lease converge.Lease) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var released string
	err := s.pool.QueryRow(ctx, s.sql.release, lease.Key, lease.Owner, int64(lease.Token)).Scan(&released)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: lease on %q by %q (token %d): %w", lease.Key, lease.Owner, lease.Token, converge.ErrLeaseLost)
	}
	if err != nil {
		return s.dbError("release", lease.Key, err)
	}
	return nil
}

// dbError wraps an error of the database, naming the call and the key; a
// refusal for lack of privileges becomes a *PermissionError.
func (s *Store) dbError(op, key string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return &PermissionError{Action: fmt.Sprintf("%s key %q in schema %q", op, key, s.schema), Err: pe}
	}
	return fmt.Errorf("pgstore: %s key %q: %w", op, key, err)
}
