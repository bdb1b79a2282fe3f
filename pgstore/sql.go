package pgstore

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/convergekit/converge"
)

// statements are the store's SQL, with its schema's tables named.
// Every write is one statement (data-modifying CTEs), so that it is atomic
// and costs one round trip; its notification is sent in the same
// transaction, hence only when it commits.
type statements struct {
	get, list, history, why    string
	put                        [4]string // by putVariant
	del                        string
	putTarget, target          string
	claim, holder, release     string
	schedule, claimDue, finish string
	finishMany, writeMany      string
	createMany                 string
	setPriority, priority      string
	setWatching, watching      string
	channel, setChannel        string
}

func putVariant(create, fenced bool) int {
	i := 0
	if create {
		i |= 1
	}
	if fenced {
		i |= 2
	}
	return i
}

// p returns the placeholder of parameter i.
func p(i int) string { return fmt.Sprintf("$%d", i) }

// historyCTE is the part of a write that appends the entries given as
// arrays in parameters b..b+4 (at, from, to, reason, subject as JSON text
// or NULL) and b+5 (by) to the history of the key written by the CTE w, and applies
// retention, whose bounds are the store's and built into the SQL as
// constants (keep: entries kept per key, negative: all; ageUS: entries
// older than that many microseconds are dropped, 0: no bound), so that
// the statement's plan does not depend on its parameters: a NULL bound
// passed as a parameter made PostgreSQL plan the statement afresh on
// every call. It takes histParams parameters. See historyRows for how
// the entries are added and retention applied.
func historyCTE(hist string, b, keep int, ageUS int64) string {
	at := p(b) + "::timestamptz[]"
	src := "w, unnest(" + at + ", " + p(b+1) + "::text[], " + p(b+2) + "::text[], " + p(b+3) + "::text[], " +
		p(b+4) + "::text[], " + p(b+5) + "::text[]) WITH ORDINALITY AS e(at, f, t, r, s, b, ord)"
	return historyRows(hist, "coalesce(cardinality("+at+"), 0)", src, keep, ageUS)
}

// historyRows is the part of a write that appends to the history of each
// key written by the CTE w the entries that src yields for it (a FROM
// list joining w to e(at, f, t, r, s, b, ord): the entry's fields and its
// place among the write's entries, from 1), n of them (an expression on
// w), and applies retention (keep and ageUS as for historyCTE). When
// entries are added, the key's older entries are kept up to keep minus
// the number added and the new entries beyond keep are skipped (the
// oldest first); entries older than the age bound are dropped, but never
// the newest new entry. The CTEs see the table as it was before the
// statement, which is why old and new entries are trimmed apart.
func historyRows(hist, n, src string, keep int, ageUS int64) string {
	drop := historyDrop(n, keep, ageUS)
	skip := "0"
	if keep >= 0 {
		skip = fmt.Sprintf("greatest(%s - %d, 0)", n, keep)
	}
	young := "true"
	if ageUS > 0 {
		young = "(e.ord = " + n + " OR (e.at < " + ageCutoff(ageUS) + ") IS NOT TRUE)"
	}
	gone := ""
	if len(drop) > 0 {
		gone = `
gone AS (
	DELETE FROM {h} h USING w
	WHERE h.key = w.key AND (` + strings.Join(drop, "\n\t\tOR ") + `)
),`
	}
	return strings.ReplaceAll(gone+`
added AS (
	INSERT INTO {h} (key, at, from_state, to_state, reason, subject, made_by)
	SELECT w.key, e.at, e.f, e.t, e.r, e.s::jsonb, e.b
	FROM `+src+`
	WHERE e.ord > `+skip+` AND `+young+`
	ORDER BY w.key, e.ord
)`, "{h}", hist)
}

// historyDrop returns the conditions on a stored history entry h of the
// key w.key that retention drops when n entries are added to the key
// (n an expression on w), each a disjunct: beyond keep entries with the
// new ones (keep >= 0), and older than ageUS microseconds (ageUS > 0).
// {h} stands for the history table.
func historyDrop(n string, keep int, ageUS int64) []string {
	var drop []string
	if keep >= 0 {
		drop = append(drop, fmt.Sprintf("(%[1]s > 0 AND h.id <= (SELECT o.id FROM {h} o WHERE o.key = w.key ORDER BY o.id DESC OFFSET greatest(%[2]d - %[1]s, 0) LIMIT 1))", n, keep))
	}
	if ageUS > 0 {
		drop = append(drop, "h.at < "+ageCutoff(ageUS))
	}
	return drop
}

// ageCutoff is the time before which history entries are older than
// ageUS microseconds, by the database's clock.
func ageCutoff(ageUS int64) string {
	return fmt.Sprintf("now() - interval '%d microseconds'", ageUS)
}

// histParams is the number of parameters historyCTE takes (histArgs.args).
const histParams = 6

// Lock order: a statement that locks both a record and its lease locks
// the record first (ClaimDue finds its keys in records; Finish and fenced
// Put lock the record in a CTE that the lease's part reads, which makes
// it run first), so that they cannot deadlock.

// fence is the condition that the lease with the token named by the
// expression token is the current, unexpired lease on the key named by
// keyExpr, by the database's clock when the statement reads the lease:
// clock_timestamp(), not now(), which is the start of the transaction,
// and a group of writes (group) runs as one transaction, so that a write
// late in a batch would have been checked against the time the batch
// started, up to a batch's duration after its lease expired. FOR SHARE
// holds the lease row until the write commits, so that no claim can take
// the key in between. On an update, keyExpr must name the locked record's
// column (not $1): a condition that does not depend on the record's row
// is run once before the join (an InitPlan), which would lock the lease
// before the record, against the order ClaimDue and Finish lock them in,
// and deadlock with them.
func fence(leases, keyExpr, token string) string {
	return fmt.Sprintf(`EXISTS (SELECT 1 FROM %s l WHERE l.key = %s AND l.token = %s AND l.owner <> '' AND l.expires > clock_timestamp() FOR SHARE)`, leases, keyExpr, token)
}

// releaseCTEs is the part of a statement that finishes the leases that
// src (a CTE with the columns key, owner, token, next) names: l releases
// each lease that is still its owner's with its token, after the CTE
// locked has locked the records (and after whatever also, a FROM item,
// evaluates), and u sets the released records' next due time (next, or
// an earlier one a Schedule set meanwhile; NULL keeps due_at as it is)
// and clears claimed_due. l returns the released keys with next, u the
// released records' keys and due times.
func releaseCTEs(records, leases, src, also string) string {
	return strings.NewReplacer("{records}", records, "{leases}", leases, "{src}", src, "{also}", also).Replace(`l AS (
	UPDATE {leases} l SET owner = ''
	FROM {src}, (SELECT count(*) FROM locked) AS record_first{also}
	WHERE l.key = {src}.key AND l.owner = {src}.owner AND l.owner <> '' AND l.token = {src}.token
	RETURNING l.key, {src}.next
), u AS (
	UPDATE {records} r SET due_at = least(r.due_at, l.next), claimed_due = NULL
	FROM l WHERE r.key = l.key
	RETURNING r.key, r.due_at
)`)
}

// releaseOne is the part of a statement that releases the lease on the
// key in parameter $1 if it is still owner $2's with token $3: locked
// locks the key's record, if any, and l, after it, releases the lease and
// returns its key.
func releaseOne(records, leases string) string {
	return `locked AS (
	SELECT key FROM ` + records + ` WHERE key = $1 FOR UPDATE
), l AS (
	UPDATE ` + leases + ` l SET owner = ''
	FROM (SELECT count(*) FROM locked) AS record_first
	WHERE l.key = $1 AND l.owner = $2 AND l.owner <> '' AND l.token = $3
	RETURNING l.key
)`
}

// notifyReleased is the notification of a released lease whose record is
// due now (u.due_at, from releaseCTEs), on the channel in parameter ch,
// its payload the key unless too long for one: the text of pg_notify's
// result, or the empty string.
func notifyReleased(ch int) string {
	return `CASE WHEN u.due_at <= now() THEN pg_notify(` + p(ch) + `, CASE WHEN octet_length(l.key) <= ` + strconv.Itoa(maxPayload) + ` THEN l.key ELSE '' END)::text ELSE '' END`
}

// buildStatements returns the statements of a store on the tables of
// schema, keeping keep history entries per key (negative: all) and none
// older than ageUS microseconds (0: no bound).
func buildStatements(schema string, keep int, ageUS int64) statements {
	records, hist, targets, leases := schema+".records", schema+".history", schema+".targets", schema+".leases"
	var s statements
	s.get = `SELECT version, value FROM ` + records + ` WHERE key = $1`
	s.list = `SELECT key, version, value FROM ` + records + ` WHERE key >= $1 AND starts_with(key, $1) ORDER BY key`
	s.history = `SELECT at, from_state, to_state, reason, subject::text, made_by FROM ` + hist + ` WHERE key = $1 ORDER BY id`
	s.why = `SELECT (SELECT version FROM ` + records + ` WHERE key = $1),
		EXISTS (SELECT 1 FROM ` + leases + ` l WHERE l.key = $1 AND l.token = $2 AND l.owner <> '' AND l.expires > clock_timestamp())`

	for _, create := range []bool{false, true} {
		for _, fenced := range []bool{false, true} {
			b := 4 // first history parameter
			cond := ""
			if fenced {
				b = 5
				key := "locked.key" // the record, locked first
				if create {
					key = "$1" // no record to lock yet
				}
				cond = " AND " + fence(leases, key, p(4))
			}
			var w string
			if create {
				// $2 is the version the writer read, 0 here; it is named
				// so that its type is known.
				w = `INSERT INTO ` + records + ` (key, version, value, due_at)
	SELECT $1, 1, $3, now() WHERE $2::bigint = 0` + cond + `
	ON CONFLICT (key) DO NOTHING
	RETURNING key, version`
			} else if fenced {
				// Lock the record before the lease (FOR SHARE in the
				// fence), in the order ClaimDue and Finish take them.
				w = `UPDATE ` + records + ` r SET version = r.version + 1, value = $3
	FROM locked WHERE r.key = locked.key` + cond + `
	RETURNING r.key, r.version`
			} else {
				w = `UPDATE ` + records + ` SET version = version + 1, value = $3
	WHERE key = $1 AND version = $2
	RETURNING key, version`
			}
			lock := ""
			if fenced && !create {
				lock = `locked AS (
	SELECT key FROM ` + records + ` WHERE key = $1 AND version = $2 FOR UPDATE
), `
			}
			// Only a new record is announced: it is due at once. An
			// update changes no due time, and a NOTIFY would cost more
			// than the write: PostgreSQL serialises the commits of
			// transactions that notify, fsync included.
			// A new record gets a lease row with no owner (token 1, so
			// that its first owner gets 2), unless its key has one: the
			// leases table then holds a row per record from the start, and
			// PostgreSQL's statistics of it (and the plans it keeps for the
			// statements that read it by key) are those of a table as large
			// as the records, not of the empty table that a bulk load of
			// records left, which made it scan the table on every Finish
			// and fenced write until autovacuum analyzed it again.
			placeholder := ""
			if create {
				placeholder = `
lease AS (
	INSERT INTO ` + leases + ` (key, owner, expires, token)
	SELECT w.key, '', '-infinity', 1 FROM w
	ON CONFLICT (key) DO NOTHING
),`
			}
			notify := "''"
			if create {
				notify = `pg_notify(` + p(b+histParams) + `, ` + p(b+histParams+1) + `)::text`
			}
			s.put[putVariant(create, fenced)] = `WITH ` + lock + `w AS (
	` + w + `
),` + placeholder + historyCTE(hist, b, keep, ageUS) + `
SELECT w.version, ` + notify + ` FROM w`
		}
	}
	s.del = `WITH w AS (
	DELETE FROM ` + records + ` WHERE key = $1 AND version = $2 RETURNING key, version
), unwatch AS (
	DELETE FROM ` + schema + `.watches x USING w WHERE x.watcher = w.key
),` + historyCTE(hist, 3, keep, ageUS) + `
SELECT w.version, pg_notify(` + p(3+histParams) + `, ` + p(3+histParams+1) + `)::text FROM w`

	// Every PutTarget takes the next revision of the name in one
	// statement, under the row's lock, so that concurrent writers never
	// get the same one; a NULL value keeps the stored target.
	s.putTarget = `INSERT INTO ` + targets + ` AS t (name, value, revision, last_revision)
	VALUES ($1, $2, CASE WHEN $2::bytea IS NULL THEN 0 ELSE 1 END, 1)
	ON CONFLICT (name) DO UPDATE SET
		last_revision = t.last_revision + 1,
		value = coalesce(EXCLUDED.value, t.value),
		revision = CASE WHEN EXCLUDED.value IS NULL THEN t.revision ELSE t.last_revision + 1 END,
		updated_at = CASE WHEN EXCLUDED.value IS NULL THEN t.updated_at ELSE now() END
	RETURNING last_revision`
	s.target = `SELECT value, revision FROM ` + targets + ` WHERE name = $1`

	// A claim succeeds when the key is free, its lease expired, or the
	// owner renews it; the token grows unless the owner renews a lease
	// that has not expired.
	//
	// A record in flight (claimed_due set by ClaimDue) gets the new
	// expiry as its claimed_due, so that a renewed claim stays out of
	// ClaimDue's walks until it runs out; the record is locked first, as
	// every statement that locks a record and its lease does.
	s.claim = `WITH locked AS (
	SELECT key FROM ` + records + ` WHERE key = $1 FOR UPDATE
), l AS (
	INSERT INTO ` + leases + ` AS l (key, owner, expires, token)
	SELECT $1, $2, now() + $3::bigint * interval '1 microsecond', 1
	FROM (SELECT count(*) FROM locked) AS record_first
	ON CONFLICT (key) DO UPDATE SET
		token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires > now() THEN l.token ELSE l.token + 1 END,
		owner = EXCLUDED.owner,
		expires = EXCLUDED.expires
	WHERE l.owner = '' OR l.owner = EXCLUDED.owner OR l.expires <= now()
	RETURNING l.key, l.owner, l.expires, l.token
), u AS (
	UPDATE ` + records + ` r SET claimed_due = l.expires
	FROM l WHERE r.key = l.key AND r.claimed_due IS NOT NULL
)
SELECT owner, expires, token FROM l`
	s.holder = `SELECT owner, expires, owner = '' OR expires <= now() FROM ` + leases + ` WHERE key = $1`
	// Release gives the lease back and makes a record that ClaimDue took
	// under it due at once, first (claimed_due -infinity), as when a
	// claim runs out; it locks the record first, as Finish does. It
	// returns the key released, or no row.
	s.release = `WITH ` + releaseOne(records, leases) + `, u AS (
	UPDATE ` + records + ` r SET claimed_due = '-infinity'
	FROM l WHERE r.key = l.key AND r.claimed_due IS NOT NULL
)
SELECT key FROM l`

	// Due times: due_at is when the record is next due (NULL: not due).
	// ClaimDue clears it and sets claimed_due to the expiry of the lease
	// it takes, which makes the record due again, before every record due
	// by due_at, when its claim runs out without Finish (the owner died):
	// a dead replica's objects are taken over first, not after the
	// backlog; Release sets it to -infinity, due at once. It also lets
	// Finish tell a Schedule made meanwhile (due_at set again).
	s.schedule = `WITH w AS (
	UPDATE ` + records + ` SET due_at = least(due_at, $2) WHERE key = $1 RETURNING key
)
SELECT pg_notify($3, $4)::text FROM w`
	//
	// ClaimDue returns each claimed record with its newest history
	// entries (converge.ClaimHistoryEntries), as arrays, read through the
	// index history_key: the handler's input costs no other call.
	//
	// ClaimDue takes first the records whose claim has run out (taken,
	// walking records_claimed), then the records due by due_at (cd,
	// walking records_due in the order of the rank, due_at less the
	// priority's worth, which is never after due_at: the walk's range
	// ends at now, and passes over only the records of a priority above 0
	// due within its worth of now); neither sees a record in flight. The prefix
	// filter is hidden from the planner (coalesce), claimed records are
	// updated by key, and each lease is read by key in a scalar subquery,
	// so that stale statistics never turn a claim into a scan
	// (docs/internals.md, "How a claim walks").
	free := `coalesce(starts_with(r.key, $1), false)
		AND NOT coalesce((SELECT x.owner <> '' AND x.expires > now() FROM ` + leases + ` x WHERE x.key = r.key), false)`
	s.claimDue = `WITH taken AS (
	SELECT r.key, r.version, r.value, 0 AS tier, r.claimed_due AS due, r.claimed_due AT TIME ZONE 'UTC' AS rank
	FROM ` + records + ` r
	WHERE r.claimed_due <= now() AND ` + free + `
	ORDER BY r.claimed_due, r.key
	LIMIT (SELECT $2::bigint)
	FOR UPDATE OF r SKIP LOCKED
), cd AS (
	SELECT r.key, r.version, r.value, 1 AS tier, r.due_at AS due, ` + rankExpr("r") + ` AS rank
	FROM ` + records + ` r
	WHERE ` + rankExpr("r") + ` <= (now() AT TIME ZONE 'UTC') AND r.due_at <= now()
		AND coalesce(r.claimed_due > now(), true) AND ` + free + `
	ORDER BY ` + rankExpr("r") + `, r.key
	LIMIT (SELECT $2::bigint - count(*) FROM taken)
	FOR UPDATE OF r SKIP LOCKED
), c AS (
	SELECT * FROM taken UNION ALL SELECT * FROM cd
), l AS (
	INSERT INTO ` + leases + ` AS l (key, owner, expires, token)
	SELECT c.key, $3, now() + $4::bigint * interval '1 microsecond', 1 FROM c
	ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, expires = EXCLUDED.expires, token = l.token + 1
	WHERE l.owner = '' OR l.expires <= now()
	RETURNING l.key, l.owner, l.expires, l.token
), u AS (
	UPDATE ` + records + ` r SET claimed_due = now() + $4::bigint * interval '1 microsecond', due_at = NULL
	WHERE r.key = ANY (ARRAY(SELECT l.key FROM l))
)
SELECT c.key, c.version, c.value, l.owner, l.expires, l.token, h.at, h.f, h.t, h.r, h.s, h.b,
	CASE WHEN isfinite(c.due) THEN c.due END
FROM c JOIN l ON l.key = c.key
CROSS JOIN LATERAL (
	SELECT array_agg(n.at ORDER BY n.id) AS at, array_agg(n.from_state ORDER BY n.id) AS f,
		array_agg(n.to_state ORDER BY n.id) AS t, array_agg(n.reason ORDER BY n.id) AS r,
		array_agg(n.subject::text ORDER BY n.id) AS s, array_agg(n.made_by ORDER BY n.id) AS b
	FROM (SELECT id, at, from_state, to_state, reason, subject, made_by FROM ` + hist + `
		WHERE key = c.key ORDER BY id DESC LIMIT ` + strconv.Itoa(converge.ClaimHistoryEntries) + `) n
) h
ORDER BY c.tier, c.rank, c.key`
	// Finish releases the lease and sets the next due time, keeping an
	// earlier one a Schedule set meanwhile; a NULL next keeps due_at as
	// it is (NULL unless scheduled meanwhile).
	s.finish = `WITH ` + releaseOne(records, leases) + `, u AS (
	UPDATE ` + records + ` r SET due_at = least(r.due_at, $4::timestamptz), claimed_due = NULL
	FROM l WHERE r.key = l.key
	RETURNING r.due_at
)
SELECT CASE WHEN (SELECT due_at FROM u) <= now() THEN pg_notify($5, $6)::text ELSE '' END FROM l`
	// FinishMany is Finish for many leases at once, given as arrays (key,
	// owner, token, next due time or NULL) of distinct keys: it returns
	// the keys whose lease it released. It locks the records in the order
	// of their keys, as every batch of writes does, then the leases. The
	// arrays are read through a materialized CTE, so that the plan does
	// not depend on their lengths and PostgreSQL plans it generically.
	//
	// It commits with synchronous_commit off for this transaction only,
	// harmless for a Finish alone: a lost Finish leaves the object claimed
	// by a lease that expires, and its handler runs again, at least once
	// (docs/internals.md, "pgstore's batches"). Claims and fenced writes
	// never run in a transaction that sets it.
	s.finishMany = `WITH async AS (
	SELECT set_config('synchronous_commit', 'off', true)
), a AS MATERIALIZED (
	SELECT $1::text[] AS keys, $2::text[] AS owners, $3::bigint[] AS tokens, $4::timestamptz[] AS nexts
), f AS (
	SELECT u.* FROM a, unnest(a.keys, a.owners, a.tokens, a.nexts) AS u(key, owner, token, next)
), locked AS (
	SELECT r.key FROM ` + records + ` r WHERE r.key IN (SELECT f.key FROM f) ORDER BY r.key FOR UPDATE
), ` + releaseCTEs(records, leases, "f", ", (SELECT count(*) FROM async) AS commit_async") + `
SELECT l.key, ` + notifyReleased(5) + `
FROM l LEFT JOIN u ON u.key = l.key`
	// WriteMany is the Puts that update a record (fenced or not) and the
	// Finish calls of a batch of writes (group), of distinct keys, in one
	// statement over arrays: the Puts as key, version read, lease token (0:
	// not fenced), value and number of history entries; their history
	// entries as key, place among the Put's entries (from 1), at, from,
	// to, reason, subject (JSON text or NULL) and by; the Finish calls as
	// key, owner, token and next due time (NULL: not due). Each row is
	// checked as the single statement checks it: a Put writes only if the
	// record is at the version read and, when fenced, the lease holds its
	// token (fence), and appends its entries with the store's retention
	// (historyRows); a Finish releases only the lease of its owner and
	// token. It returns a row per Put written (key, new version, '') and
	// per lease released (key, 0, its notification). It locks every
	// record of the batch first, in the order of their keys, then the
	// leases (each after its record), as the statements of a batch sent
	// one by one would, and commits synchronously: it carries Puts. Its
	// arrays are read through materialized CTEs so that its plan does not
	// depend on their lengths.
	s.writeMany = `WITH pa AS MATERIALIZED (
	SELECT $1::text[] AS keys, $2::bigint[] AS versions, $3::bigint[] AS tokens, $4::bytea[] AS vals, $5::int[] AS ns
), pw AS (
	SELECT u.* FROM pa, unnest(pa.keys, pa.versions, pa.tokens, pa.vals, pa.ns) AS u(key, version, token, val, n)
), ea AS MATERIALIZED (
	SELECT $6::text[] AS keys, $7::int[] AS ords, $8::timestamptz[] AS ats, $9::text[] AS fs, $10::text[] AS ts,
		$11::text[] AS rs, $12::text[] AS ss, $13::text[] AS bs
), e AS (
	SELECT u.* FROM ea, unnest(ea.keys, ea.ords, ea.ats, ea.fs, ea.ts, ea.rs, ea.ss, ea.bs) AS u(key, ord, at, f, t, r, s, b)
), fa AS MATERIALIZED (
	SELECT $14::text[] AS keys, $15::text[] AS owners, $16::bigint[] AS tokens, $17::timestamptz[] AS nexts
), fw AS (
	SELECT u.* FROM fa, unnest(fa.keys, fa.owners, fa.tokens, fa.nexts) AS u(key, owner, token, next)
), locked AS (
	SELECT r.key FROM ` + records + ` r
	WHERE r.key IN (SELECT pw.key FROM pw UNION ALL SELECT fw.key FROM fw)
	ORDER BY r.key FOR UPDATE
), w AS (
	UPDATE ` + records + ` r SET version = r.version + 1, value = pw.val
	FROM locked k JOIN pw ON pw.key = k.key
	WHERE r.key = k.key AND r.version = pw.version
		AND (pw.token = 0 OR ` + fence(leases, "k.key", "pw.token") + `)
	RETURNING r.key, r.version, pw.n
),` + historyRows(hist, "w.n", "w JOIN e ON e.key = w.key", keep, ageUS) + `,
` + releaseCTEs(records, leases, "fw", "") + `
SELECT w.key, w.version, '' FROM w
UNION ALL
SELECT l.key, 0, ` + notifyReleased(18) + `
FROM l LEFT JOIN u ON u.key = l.key`
	s.createMany = createManySQL(schema, keep, ageUS)
	s.setPriority = `UPDATE ` + records + ` SET priority = $2 WHERE key = $1`
	s.priority = `SELECT priority FROM ` + records + ` WHERE key = $1`
	s.setWatching = `WITH gone AS (
	DELETE FROM ` + schema + `.watches WHERE watcher = $1
)
INSERT INTO ` + schema + `.watches (watched, watcher) SELECT w, $1 FROM unnest($2::text[]) AS w`
	s.watching = `SELECT coalesce(array_agg(watched ORDER BY watched), '{}') FROM ` + schema + `.watches WHERE watcher = $1`
	s.channel = `SELECT value FROM ` + schema + `.settings WHERE name = 'channel'`
	s.setChannel = `INSERT INTO ` + schema + `.settings (name, value) VALUES ('channel', $1)
	ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value`
	return s
}
