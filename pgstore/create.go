package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/convergekit/converge"
)

var _ converge.Creator = (*Store)(nil)

// createManySQL returns the statement of CreateMany on the tables of
// schema, with the history retention of buildStatements (keep, ageUS).
// It takes the records as arrays ($1 keys, $2 values, $3 the number of
// history entries sent for each) and their history entries, record after
// record and oldest first ($4 key, $5 at, $6 from, $7 to, $8 reason, $9
// subject as JSON text or NULL, $10 by, $11 whether it is its record's
// newest), $12 the notification channel, and $13 the records'
// priorities. It looks for the keys
// stored already (ex) first: when there are any it writes nothing and
// returns them; otherwise it inserts every record (due at once), its
// lease placeholder unless the key has a lease row, and its history
// entries, after applying retention to the keys that have a history
// already (records deleted before), and notifies once with an empty
// payload (look at everything). The plain INSERT fails with a unique
// violation, writing nothing, if a concurrent writer created one of the
// keys meanwhile. The caller sends only the entries that count
// retention keeps; the age bound is the database's clock, as for Put.
func createManySQL(schema string, keep int, ageUS int64) string {
	records, hist, leases := schema+".records", schema+".history", schema+".leases"
	gone := ""
	if drop := historyDrop("w.n", keep, ageUS); len(drop) > 0 {
		gone = `
w AS (
	SELECT pw.key, pw.n FROM pw, ok
	WHERE ok.ok AND pw.n > 0 AND pw.key IN (
		SELECT h.key FROM {h} h
		WHERE h.key BETWEEN (SELECT min(pw.key) FROM pw) AND (SELECT max(pw.key) FROM pw))
), gone AS (
	DELETE FROM {h} h USING w
	WHERE h.key = w.key AND (` + strings.Join(drop, "\n\t\tOR ") + `)
),`
	}
	young := ""
	if ageUS > 0 {
		young = " AND (e.last OR (e.at < " + ageCutoff(ageUS) + ") IS NOT TRUE)"
	}
	return strings.ReplaceAll(`WITH pa AS MATERIALIZED (
	SELECT $1::text[] AS keys, $2::bytea[] AS vals, $3::int[] AS ns, $13::int[] AS ps
), pw AS (
	SELECT u.* FROM pa, unnest(pa.keys, pa.vals, pa.ns, pa.ps) AS u(key, val, n, prio)
), ex AS MATERIALIZED (
	SELECT r.key FROM `+records+` r JOIN pw ON r.key = pw.key
), ok AS MATERIALIZED (
	SELECT NOT EXISTS (SELECT 1 FROM ex) AS ok
), ins AS (
	INSERT INTO `+records+` (key, version, value, due_at, priority)
	SELECT pw.key, 1, pw.val, now(), pw.prio FROM pw, ok WHERE ok.ok
), lease AS (
	INSERT INTO `+leases+` (key, owner, expires, token)
	SELECT pw.key, '', '-infinity', 1 FROM pw, ok WHERE ok.ok
	ON CONFLICT (key) DO NOTHING
),`+gone+`
ea AS MATERIALIZED (
	SELECT $4::text[] AS keys, $5::timestamptz[] AS ats, $6::text[] AS fs, $7::text[] AS ts,
		$8::text[] AS rs, $9::text[] AS ss, $10::text[] AS bs, $11::bool[] AS lasts
), added AS (
	INSERT INTO {h} (key, at, from_state, to_state, reason, subject, made_by)
	SELECT e.key, e.at, e.f, e.t, e.r, e.s::jsonb, e.b
	FROM ok, ea, unnest(ea.keys, ea.ats, ea.fs, ea.ts, ea.rs, ea.ss, ea.bs, ea.lasts) WITH ORDINALITY AS e(key, at, f, t, r, s, b, last, ord)
	WHERE ok.ok`+young+`
	ORDER BY e.ord
)
SELECT coalesce((SELECT array_agg(ex.key ORDER BY ex.key) FROM ex), '{}'),
	CASE WHEN (SELECT ok.ok FROM ok) THEN pg_notify($12, '')::text ELSE '' END`, "{h}", hist)
}

// createManyTries bounds how often CreateMany sends its statement when a
// concurrent writer creates one of its keys between its look and its
// insert (a unique violation): the next try reports the key as stored.
const createManyTries = 3

// CreateMany implements converge.Creator in one statement over arrays,
// so one round trip and one commit: the records, their lease
// placeholders and their history entries (with the store's retention),
// announced to watchers by one notification that says look at
// everything (fn("")). The statement looks for stored keys before it
// writes, so a batch holding one writes nothing and names them all.
func (s *Store) CreateMany(ctx context.Context, recs []converge.NewRecord) ([]uint64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := converge.CheckNewRecords(recs); err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return []uint64{}, nil
	}
	args, err := s.createArgs(recs)
	if err != nil {
		return nil, err
	}
	for try := 1; ; try++ {
		var exist []string
		var notified string
		err := s.pool.QueryRow(ctx, s.sql.createMany, args...).Scan(&exist, &notified)
		var pe *pgconn.PgError
		switch {
		case err == nil && len(exist) > 0:
			return nil, &converge.StoreExistsError{Keys: exist}
		case err == nil:
			versions := make([]uint64, len(recs))
			for i := range versions {
				versions[i] = 1
			}
			return versions, nil
		case errors.As(err, &pe) && pe.Code == "23505" && try < createManyTries:
			continue // created meanwhile: look again
		default:
			return nil, s.dbError(fmt.Sprintf("create %d records from", len(recs)), recs[0].Key, err)
		}
	}
}

// createArgs returns the arguments of the createMany statement for recs:
// the values sealed, and of each record's history only the newest
// entries that the store's retention keeps.
func (s *Store) createArgs(recs []converge.NewRecord) ([]any, error) {
	keys := make([]string, len(recs))
	vals := make([][]byte, len(recs))
	ns := make([]int32, len(recs))
	ps := make([]int32, len(recs))
	total := 0
	for _, r := range recs {
		total += len(r.History)
	}
	h := histArgs{
		ats: make([]time.Time, 0, total), froms: make([]string, 0, total), tos: make([]string, 0, total),
		reasons: make([]string, 0, total), subjects: make([]*string, 0, total), bys: make([]string, 0, total),
	}
	hkeys := make([]string, 0, total)
	lasts := make([]bool, 0, total)
	for i, r := range recs {
		if err := checkKey(r.Key, fmt.Sprintf("recs[%d].Key", i)); err != nil {
			return nil, err
		}
		v, err := s.seal(r.Key, fmt.Sprintf("recs[%d].Value", i), recordAD, r.Value)
		if err != nil {
			return nil, err
		}
		entries := r.History
		if s.keep >= 0 && len(entries) > s.keep {
			entries = entries[len(entries)-s.keep:]
		}
		if err := h.add(r.Key, entries); err != nil {
			return nil, err
		}
		keys[i], vals[i], ns[i], ps[i] = r.Key, v, int32(len(entries)), int32(r.Priority)
		for j := range entries {
			hkeys, lasts = append(hkeys, r.Key), append(lasts, j == len(entries)-1)
		}
	}
	return []any{
		pgtype.FlatArray[string](keys), pgtype.FlatArray[[]byte](vals), pgtype.FlatArray[int32](ns),
		pgtype.FlatArray[string](hkeys), pgtype.FlatArray[time.Time](h.ats), pgtype.FlatArray[string](h.froms),
		pgtype.FlatArray[string](h.tos), pgtype.FlatArray[string](h.reasons), pgtype.FlatArray[*string](h.subjects),
		pgtype.FlatArray[string](h.bys), pgtype.FlatArray[bool](lasts), s.channel,
		pgtype.FlatArray[int32](ps),
	}, nil
}
