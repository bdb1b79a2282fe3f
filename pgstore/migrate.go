package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migration is one step of the schema. Steps are applied in order, each
// once, and recorded in the migrations table; never edit a released step,
// add a new one.
type migration struct {
	version int
	// what names the step in errors, such as "create table records".
	what string
	// sql is the step's statements; {schema} is replaced by the quoted
	// schema name.
	sql string
}

// migrations is the schema, oldest step first. Version i is at index i-1.
var migrations = []migration{
	{version: 1, what: "create the tables records, history, targets and leases", sql: `
CREATE TABLE {schema}.records (
	key         text COLLATE "C" PRIMARY KEY,
	version     bigint NOT NULL CHECK (version > 0),
	value       bytea  NOT NULL,
	due_at      timestamptz,
	claimed_due timestamptz
);
CREATE INDEX records_ready ON {schema}.records ((least(due_at, claimed_due)));
CREATE TABLE {schema}.history (
	id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	key        text COLLATE "C" NOT NULL,
	at         timestamptz NOT NULL,
	from_state text NOT NULL,
	to_state   text NOT NULL,
	reason     text NOT NULL
);
CREATE INDEX history_key ON {schema}.history (key, id);
CREATE TABLE {schema}.targets (
	name       text COLLATE "C" PRIMARY KEY,
	value      bytea NOT NULL,
	updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE {schema}.leases (
	key     text COLLATE "C" PRIMARY KEY,
	owner   text NOT NULL,
	expires timestamptz NOT NULL,
	token   bigint NOT NULL CHECK (token > 0)
);
`},
	// ClaimDue takes the earliest due records in the order (due time,
	// key): an index in that order lets it read as many index entries as
	// it claims (besides those in flight), where the index on the due
	// time alone made PostgreSQL read and sort every due record on each
	// claim. Building it locks the table against writes for as long.
	{version: 2, what: "index the records in the order ClaimDue takes them", sql: `
CREATE INDEX records_due ON {schema}.records ((least(due_at, claimed_due)), key);
DROP INDEX {schema}.records_ready;
`},
	// A target keeps the revision PutTarget gave it (0 while no target is
	// stored), and its name the last revision taken: a PutTarget without
	// a target takes one and keeps the value, NULL until a target is
	// stored. Targets stored before read as revision 1.
	{version: 3, what: "keep the revisions of the targets", sql: `
ALTER TABLE {schema}.targets
	ADD COLUMN revision bigint NOT NULL DEFAULT 1 CHECK (revision >= 0),
	ADD COLUMN last_revision bigint NOT NULL DEFAULT 1 CHECK (last_revision > 0),
	ALTER COLUMN value DROP NOT NULL,
	ADD CHECK (revision <= last_revision AND (value IS NULL) = (revision = 0));
`},
	// A history entry keeps its subject (converge.HistorySubject) as JSON,
	// NULL for the record itself; entries stored before have none.
	{version: 4, what: "keep the subjects of the history entries", sql: `
ALTER TABLE {schema}.history ADD COLUMN subject jsonb;
`},
	// A history entry keeps who made it (converge.HistoryEntry.By), empty
	// for the program itself; entries stored before have nobody.
	{version: 5, what: "keep who made the history entries", sql: `
ALTER TABLE {schema}.history ADD COLUMN made_by text NOT NULL DEFAULT '';
`},
	// ClaimDue walked records_due from its start, where every record in
	// flight sat (claimed_due -infinity): each claim read, and looked up
	// the lease of, every record the replicas held before it reached one
	// it could take. A claim now sets claimed_due to its lease's expiry,
	// and ClaimDue walks two indexes: records_claimed, for the records
	// whose claim has run out (taken over first), and records_due, for
	// the records due by due_at. A record in flight is in neither walk
	// until its claim runs out. Records claimed before keep -infinity:
	// they are taken over first once their lease is gone. Building the
	// indexes locks the table against writes for as long.
	{version: 6, what: "index the due and the claimed records apart", sql: `
DROP INDEX {schema}.records_due;
CREATE INDEX records_due ON {schema}.records (due_at, key) WHERE due_at IS NOT NULL;
CREATE INDEX records_claimed ON {schema}.records (claimed_due, key) WHERE claimed_due IS NOT NULL;
`},
}

// schemaVersion is the newest schema version this pgstore knows: the
// number of its migrations.
var schemaVersion = len(migrations)

// migrate brings the schema up to date in one transaction under an
// advisory lock, so that replicas opening at once apply each step once and
// a failure leaves nothing half-made. It does no DDL (and needs no CREATE
// privilege) when the schema is current.
func migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	quoted := pgx.Identifier{schema}.Sanitize()
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: schema %q: begin migration: %w", schema, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('converge pgstore migrations ' || $1))`, schema); err != nil {
		return fmt.Errorf("pgstore: schema %q: lock for migration: %w", schema, err)
	}
	var hasSchema, hasTable bool
	err = tx.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
		EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'migrations')`, schema).Scan(&hasSchema, &hasTable)
	if err != nil {
		return fmt.Errorf("pgstore: schema %q: read its state: %w", schema, err)
	}
	run := func(what, sql string) error {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return stepError(schema, what, err)
		}
		return nil
	}
	if !hasSchema {
		if err := run(fmt.Sprintf("create schema %s", quoted), "CREATE SCHEMA "+quoted); err != nil {
			return err
		}
	}
	if !hasTable {
		err := run(fmt.Sprintf("create table %s.migrations", quoted), "CREATE TABLE "+quoted+`.migrations (
			version    integer PRIMARY KEY,
			applied_at timestamptz NOT NULL DEFAULT now()
		)`)
		if err != nil {
			return err
		}
	}
	var have int
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+quoted+".migrations").Scan(&have); err != nil {
		return stepError(schema, fmt.Sprintf("read %s.migrations", quoted), err)
	}
	if have > schemaVersion {
		return &SchemaVersionError{Schema: schema, Have: have, Known: schemaVersion}
	}
	if have == schemaVersion && hasTable {
		return nil // current: nothing to write, the rollback ends the transaction
	}
	for _, m := range migrations[have:] {
		if err := run(fmt.Sprintf("migration %d (%s)", m.version, m.what), strings.ReplaceAll(m.sql, "{schema}", quoted)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "INSERT INTO "+quoted+".migrations (version) VALUES ($1)", m.version); err != nil {
			return stepError(schema, fmt.Sprintf("record migration %d", m.version), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return stepError(schema, "commit the migrations", err)
	}
	return nil
}

// stepError names the migration step that failed; a refusal for lack of
// privileges becomes a *PermissionError.
func stepError(schema, what string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42501" {
		return &PermissionError{Action: what, Err: pe}
	}
	return fmt.Errorf("pgstore: schema %q: %s: %w", schema, what, err)
}
