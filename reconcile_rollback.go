package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// TargetRollbackKeyPrefix starts the Store key of a TargetReconciler's
// rollback record: see TargetRollbackKey.
const TargetRollbackKeyPrefix = "converge.rollback/"

// TargetRollbackKey returns the Store key under which the TargetReconciler
// called name keeps, when TargetReconcilerConfig.RollbackAfter is set, the
// last target that converged on this device and the rollback in force, if
// any: TargetRollbackKeyPrefix followed by name. The record holds a
// target, so a Store with a Sealer seals it as it seals the target; its
// history (one entry per rollback, and per new target that ended one)
// names revisions only. Do not give a controller the kind
// "converge.rollback".
func TargetRollbackKey(name string) string { return TargetRollbackKeyPrefix + name }

// TargetRollback is a rollback a TargetReconciler made: the target of
// revision From failed Failures passes in a row, so the last target that
// converged on this device (revision To) was set again, under revision
// Revision. It stays in force (TargetReconciler.RolledBack) until a new
// target is set.
type TargetRollback struct {
	From     uint64    `json:"from"`
	To       uint64    `json:"to"`
	Revision uint64    `json:"revision"`
	Failures int       `json:"failures"`
	At       time.Time `json:"at"`
	// Err is the error of the last failed pass of the target of
	// revision From.
	Err string `json:"error,omitempty"`
}

// rollbackRecord is the stored form of TargetRollbackKey.
type rollbackRecord struct {
	Format       int             `json:"format"`
	Good         json.RawMessage `json:"good,omitempty"`
	GoodRevision uint64          `json:"goodRevision,omitempty"`
	RolledBack   *TargetRollback `json:"rolledBack,omitempty"`
}

const rollbackFormat = 1

// ErrRollbackDamaged means a TargetReconciler's rollback record
// (TargetRollbackKey) is not one it can read: no rollback happens until a
// target converges and replaces it.
var ErrRollbackDamaged = errors.New("converge: rollback record damaged")

// rollbackBook keeps the reconciler's rollback record, in memory and in
// its store.
type rollbackBook struct {
	store Store
	key   string
	after int

	mu  sync.Mutex
	rec rollbackRecord
}

// change applies fn to the stored record and writes it back (with the
// history entries fn returns), again when another writer got in between.
// fn returns false to write nothing.
func (b *rollbackBook) change(ctx context.Context, fn func(rec *rollbackRecord) ([]HistoryEntry, bool)) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range storeActionsRetries {
		var rec rollbackRecord
		var version uint64
		stored, err := b.store.Get(ctx, b.key)
		switch {
		case errors.Is(err, ErrStoreNotFound):
		case err != nil:
			return fmt.Errorf("converge: rollback record %q: %w", b.key, bare(err))
		default:
			version = stored.Version
			if err := json.Unmarshal(stored.Value, &rec); err != nil || rec.Format != rollbackFormat {
				rec = rollbackRecord{} // damaged: replaced by what fn writes
			}
		}
		hist, write := fn(&rec)
		if !write {
			b.rec = rec
			return nil
		}
		rec.Format = rollbackFormat
		v, err := json.Marshal(rec)
		if err != nil {
			return fmt.Errorf("converge: rollback record %q: encode: %w", b.key, bare(err))
		}
		_, err = b.store.Put(ctx, StoreRecord{Key: b.key, Version: version, Value: v}, hist...)
		if errors.Is(err, ErrStoreStale) || errors.Is(err, ErrStoreNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("converge: rollback record %q: %w", b.key, bare(err))
		}
		b.rec = rec
		return nil
	}
	return fmt.Errorf("converge: rollback record %q: %w: still changing after %d attempts", b.key, bare(ErrStoreStale), storeActionsRetries)
}

// load reads the stored record.
func (b *rollbackBook) load(ctx context.Context) error {
	rec, err := b.store.Get(ctx, b.key)
	if errors.Is(err, ErrStoreNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("converge: rollback record %q: %w", b.key, bare(err))
	}
	var r rollbackRecord
	if err := json.Unmarshal(rec.Value, &r); err != nil || r.Format != rollbackFormat {
		return fmt.Errorf("converge: rollback record %q: %w", b.key, ErrRollbackDamaged)
	}
	b.mu.Lock()
	b.rec = r
	b.mu.Unlock()
	return nil
}

func (b *rollbackBook) rolledBack() (TargetRollback, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.rec.RolledBack == nil {
		return TargetRollback{}, false
	}
	return *b.rec.RolledBack, true
}

// RolledBack returns the rollback in force: the one the reconciler made
// last (see TargetReconcilerConfig.RollbackAfter), until a new target is
// set; false when there is none. It survives a restart (Load reads it).
func (r *TargetReconciler[T]) RolledBack() (TargetRollback, bool) {
	if r.rollback == nil {
		return TargetRollback{}, false
	}
	return r.rollback.rolledBack()
}

// converged records target, of revision rev, as the last target that
// converged, once per revision. A store failure is logged: the previous
// good target stays.
func (r *TargetReconciler[T]) converged(ctx context.Context, target T, rev uint64) {
	b := r.rollback
	if b == nil {
		return
	}
	b.mu.Lock()
	same := b.rec.GoodRevision == rev
	b.mu.Unlock()
	if same {
		return
	}
	v, err := json.Marshal(target)
	if err == nil {
		err = b.change(ctx, func(rec *rollbackRecord) ([]HistoryEntry, bool) {
			if rec.GoodRevision >= rev {
				return nil, false
			}
			rec.Good, rec.GoodRevision = v, rev
			return nil, true
		})
	}
	if err != nil {
		r.obs.logAttrs(ctx, slog.LevelWarn, "last converged target not recorded", slog.Uint64("revision", rev), slog.String("error", err.Error()))
	}
}

// maybeRollBack rolls the target of revision rev back after its failures
// in a row reached RollbackAfter: the last target that converged is set
// again, under a new revision. It does nothing when there is none, when
// rev is that target, or when rev is itself a rollback's. It reports the
// rollback it made.
func (r *TargetReconciler[T]) maybeRollBack(ctx context.Context, rev uint64, failures int, cause error) *TargetRollback {
	b := r.rollback
	if b == nil || failures < b.after {
		return nil
	}
	b.mu.Lock()
	good, goodRev := b.rec.Good, b.rec.GoodRevision
	inForce := b.rec.RolledBack != nil && b.rec.RolledBack.Revision == rev
	b.mu.Unlock()
	if good == nil || goodRev == rev || inForce {
		return nil
	}
	var t T
	if err := json.Unmarshal(good, &t); err != nil {
		r.obs.logAttrs(ctx, slog.LevelWarn, "rollback impossible", slog.String("error",
			fmt.Sprintf("converge: rollback record %q: decode: %v", b.key, bare(err))))
		return nil
	}
	newRev, err := r.cfg.Store.PutTarget(ctx, r.name, good)
	if err != nil {
		r.obs.logAttrs(ctx, slog.LevelWarn, "rollback impossible", slog.String("error",
			fmt.Sprintf("converge: target %q: store: %v", r.name, bare(err))))
		return nil
	}
	rb := &TargetRollback{From: rev, To: goodRev, Revision: newRev, Failures: failures, At: r.walker.cfg.Now().UTC().Round(0)}
	if cause != nil {
		rb.Err = cause.Error()
	}
	err = b.change(ctx, func(rec *rollbackRecord) ([]HistoryEntry, bool) {
		rec.RolledBack = rb
		return []HistoryEntry{{At: rb.At, From: fmt.Sprintf("revision %d", rev), To: fmt.Sprintf("revision %d", goodRev),
			Reason: fmt.Sprintf("rolled back after %d failed passes in a row, as revision %d", failures, newRev)}}, true
	})
	if err != nil {
		r.obs.logAttrs(ctx, slog.LevelWarn, "rollback not recorded", slog.String("error", err.Error()))
	}
	r.obs.logAttrs(ctx, slog.LevelWarn, "target rolled back", slog.Uint64("from", rev), slog.Uint64("to", goodRev),
		slog.Uint64("revision", newRev), slog.Int("failures", failures))
	if !r.adopt(ctx, t, newRev, false) {
		return nil // a newer target was set meanwhile
	}
	return rb
}

// clearRollback ends the rollback in force, once a new target of revision
// rev is set.
func (r *TargetReconciler[T]) clearRollback(ctx context.Context, rev uint64) {
	b := r.rollback
	if b == nil {
		return
	}
	if _, ok := b.rolledBack(); !ok {
		return
	}
	err := b.change(ctx, func(rec *rollbackRecord) ([]HistoryEntry, bool) {
		if rec.RolledBack == nil || rec.RolledBack.Revision >= rev {
			return nil, false
		}
		from := rec.RolledBack.Revision
		rec.RolledBack = nil
		return []HistoryEntry{{At: r.walker.cfg.Now(), From: fmt.Sprintf("revision %d", from), To: fmt.Sprintf("revision %d", rev),
			Reason: "a new target ended the rollback"}}, true
	})
	if err != nil {
		r.obs.logAttrs(ctx, slog.LevelWarn, "rollback not cleared", slog.String("error", err.Error()))
	}
}
