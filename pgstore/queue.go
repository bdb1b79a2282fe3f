package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/convergekit/converge"
)

// Schedule implements converge.Queue: key becomes due at at, unless it is
// due earlier already. Due times are compared with the database's clock.
func (s *Store) Schedule(ctx context.Context, key string, at time.Time) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkKey(key, "key"); err != nil {
		return err
	}
	var ignored string
	err := s.pool.QueryRow(ctx, s.sql.schedule, key, at, s.channel, payload(key)).Scan(&ignored)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: schedule key %q: %w", key, converge.ErrStoreNotFound)
	}
	if err != nil {
		return s.dbError("schedule", key, err)
	}
	return nil
}

// ClaimDue implements converge.Queue in one statement: it locks the
// earliest due records under prefix with FOR UPDATE SKIP LOCKED (so
// concurrent callers take disjoint batches, never waiting for each
// other), takes their leases, marks them in flight, and reads their
// newest history entries.
func (s *Store) ClaimDue(ctx context.Context, prefix, owner string, ttl time.Duration, limit int) ([]converge.Claimed, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if err := checkLease(prefix+"*", owner, ttl); err != nil {
		return nil, err
	}
	if err := checkText(prefix, "prefix", prefix); err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, &converge.StoreRequestError{Key: prefix, Field: "limit", Reason: fmt.Sprintf("must be positive, got %d", limit)}
	}
	rows, err := s.pool.Query(ctx, s.sql.claimDue, prefix, int64(limit), owner, ttl.Microseconds())
	if err != nil {
		return nil, s.dbError("claim due", prefix, err)
	}
	type row struct {
		key, owner string
		version    int64
		stored     []byte
		expires    time.Time
		token      int64
		history    []converge.HistoryEntry
		due        *time.Time // NULL: -infinity (released)
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		var ats []time.Time
		var froms, tos, reasons, bys []string
		var subjects []*string
		if err := r.Scan(&x.key, &x.version, &x.stored, &x.owner, &x.expires, &x.token, &ats, &froms, &tos, &reasons, &subjects, &bys, &x.due); err != nil {
			return x, err
		}
		if len(froms) != len(ats) || len(tos) != len(ats) || len(reasons) != len(ats) || len(subjects) != len(ats) || len(bys) != len(ats) {
			return x, fmt.Errorf("history of key %q: arrays of different lengths", x.key)
		}
		x.history = make([]converge.HistoryEntry, len(ats))
		for i := range ats {
			e := converge.HistoryEntry{At: ats[i], From: froms[i], To: tos[i], Reason: reasons[i], By: bys[i]}
			if subjects[i] != nil {
				e.Subject = new(converge.HistorySubject)
				if err := json.Unmarshal([]byte(*subjects[i]), e.Subject); err != nil {
					return x, fmt.Errorf("history of key %q: subject %s: %w", x.key, *subjects[i], err)
				}
			}
			x.history[i] = e
		}
		return x, nil
	})
	if err != nil {
		return nil, s.dbError("claim due", prefix, err)
	}
	out := make([]converge.Claimed, 0, len(got))
	var bad error
	for _, x := range got {
		l := converge.Lease{Key: x.key, Owner: x.owner, Expires: x.expires, Token: uint64(x.token)}
		val, err := s.open(x.key, recordAD, legacyRecordAD, x.stored)
		if err != nil {
			// This record stays leased until its lease runs out (then it
			// is due again, for an owner with the right Sealer).
			bad = cmpOr(bad, err)
			continue
		}
		c := converge.Claimed{Record: converge.StoreRecord{Key: x.key, Version: uint64(x.version), Value: val}, Lease: l, History: x.history, HasHistory: true}
		if x.due != nil {
			c.Due = *x.due
		}
		out = append(out, c)
	}
	if bad != nil {
		// Give the good records of the batch back at once rather than
		// losing them for a lease's time.
		for _, c := range out {
			_ = s.Release(context.WithoutCancel(ctx), c.Lease)
		}
		return nil, bad
	}
	return out, nil
}

func cmpOr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// Finish implements converge.Queue in one statement: it releases the
// lease and makes the key due at next (the zero time: not due until
// scheduled) unless a Schedule made it due earlier meanwhile. It is
// committed with the writes that come at the same time (see group): with
// the Puts of a batch, in their transaction, which waits for the WAL
// flush; when only Finish calls come together, as one statement over
// arrays that commits without waiting for the flush, which can only lose
// a Finish to a crash of the server: the lease then expires and the
// object is claimed again (at least once). Claims and fenced writes
// always wait for the flush.
func (s *Store) Finish(ctx context.Context, lease converge.Lease, next time.Time) error {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var at *time.Time
	if !next.IsZero() {
		at = &next
	}
	token := int64(lease.Token)
	c := &call{
		ctx: ctx, key: lease.Key,
		sql:  s.sql.finish,
		args: func() []any { return []any{lease.Key, lease.Owner, token, at, s.channel, payload(lease.Key)} },
		scan: func(r pgx.Row) error {
			var ignored string
			return r.Scan(&ignored)
		},
		fin: &finishArgs{owner: lease.Owner, token: token, next: at},
	}
	err := s.writes.do(c)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("pgstore: finish lease on %q by %q (token %d): %w", lease.Key, lease.Owner, lease.Token, converge.ErrLeaseLost)
	}
	if err != nil {
		return s.dbError("finish", lease.Key, err)
	}
	return nil
}
