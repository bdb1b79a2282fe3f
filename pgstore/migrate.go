package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/convergekit/converge"
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
	// A record has a priority (converge.Prioritizer), 0 for the records
	// stored before, and ClaimDue walks records_due in the order of the
	// rank (due_at less the priority's worth, converge.PriorityStep, in
	// UTC so that the expression is immutable), then the key: the same
	// index walk as before, by rank, which is due_at for priority 0.
	// Adding the column with a constant default rewrites no row; building
	// the index locks the table against writes for as long.
	{version: 7, what: "keep the priorities of the records and index the due records by rank", sql: `
ALTER TABLE {schema}.records ADD COLUMN IF NOT EXISTS priority integer NOT NULL DEFAULT 0
	CHECK (priority BETWEEN 0 AND ` + strconv.Itoa(converge.MaxPriority) + `);
DROP INDEX IF EXISTS {schema}.records_due;
CREATE INDEX records_due ON {schema}.records ((` + rankExpr("") + `), key) WHERE due_at IS NOT NULL;
`},
	// Records watch records (converge.Linker): watches holds the links,
	// and a trigger on the history makes the watchers of a record due at
	// once in the transaction that appends a transition of it (a history
	// entry whose to_state differs from its from_state), whichever
	// statement appended it, and announces them on the store's channel,
	// kept in settings (written by the stores that open the schema). The
	// trigger runs once per statement, over the rows it appended. The
	// step can run again (tests undo later steps by their number).
	{version: 8, what: "keep the records' watches and wake the watchers of a transition", sql: `
CREATE TABLE IF NOT EXISTS {schema}.watches (
	watched text COLLATE "C" NOT NULL,
	watcher text COLLATE "C" NOT NULL,
	PRIMARY KEY (watched, watcher)
);
CREATE INDEX IF NOT EXISTS watches_watcher ON {schema}.watches (watcher);
CREATE TABLE IF NOT EXISTS {schema}.settings (
	name  text PRIMARY KEY,
	value text NOT NULL
);
CREATE OR REPLACE FUNCTION {schema}.wake_watchers() RETURNS trigger LANGUAGE plpgsql AS $f$
DECLARE
	n bigint;
BEGIN
	IF NOT EXISTS (SELECT 1 FROM {schema}.watches) THEN
		RETURN NULL;
	END IF;
	WITH u AS (
		UPDATE {schema}.records r SET due_at = least(r.due_at, now())
		WHERE r.key IN (
			SELECT w.watcher FROM added a JOIN {schema}.watches w ON w.watched = a.key
			WHERE a.from_state <> a.to_state)
		RETURNING r.key
	)
	SELECT count(pg_notify(coalesce((SELECT value FROM {schema}.settings WHERE name = 'channel'), TG_TABLE_SCHEMA),
		CASE WHEN octet_length(u.key) <= ` + strconv.Itoa(maxPayload) + ` THEN u.key ELSE '' END)) INTO n
	FROM u;
	RETURN NULL;
END
$f$;
DROP TRIGGER IF EXISTS history_wakes_watchers ON {schema}.history;
CREATE TRIGGER history_wakes_watchers AFTER INSERT ON {schema}.history
	REFERENCING NEW TABLE AS added FOR EACH STATEMENT EXECUTE FUNCTION {schema}.wake_watchers();
`},
	// Every object handled updates its lease twice (the claim, the
	// finish), and neither changes an indexed column, so PostgreSQL can
	// make them heap-only (HOT: no new index entry) when the row's page
	// has room for the new version. Lease rows are stored with their
	// records, so a bulk load filled the pages to the brim and left about
	// a third of those updates without room. (A record's claim and finish
	// change indexed columns and are never heap-only; leaving room in its
	// pages made no more of its writes heap-only.) Pages keep room from
	// now on; rows stored before keep their pages until the table is
	// rewritten (VACUUM FULL). The step can run again.
	{version: 9, what: "leave room in the pages of leases for heap-only updates", sql: `
ALTER TABLE {schema}.leases SET (fillfactor = 70);
`},
}

// rankExpr is the rank of a record of the table aliased alias (none when
// empty) in ClaimDue's order, as index records_due has it: its due time
// less its priority's worth (converge.PriorityRank), as a timestamp in
// UTC.
func rankExpr(alias string) string {
	if alias != "" {
		alias += "."
	}
	return "(" + alias + "due_at AT TIME ZONE 'UTC') - " + alias + "priority * interval '1 second'"
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
