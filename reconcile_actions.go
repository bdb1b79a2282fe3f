package converge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge/internal/wire"
)

// PendingAction is a host action (a reboot, a shutdown) that an item of a
// TargetReconciler's target asked for (RequireAction) and that has not
// happened yet. The reconciler keeps it in its Store until the host booted
// again (see TargetReconcilerConfig.BootID), so that an agent restarted
// before the reboot still knows the reboot is due.
type PendingAction struct {
	// Action is what the host must do.
	Action Action
	// ID is the item that asked for it.
	ID ID
	// Reason is the item's reason, for people.
	Reason string
	// Revision is the revision of the target whose pass asked for it
	// last.
	Revision uint64
	// BootID is the boot ID of the host when the action was first asked
	// for; empty when it could not be read (see
	// TargetReconcilerConfig.BootID).
	BootID string
	// Since is when the action was first asked for (Walk.Now's clock).
	Since time.Time
}

// LogValue renders the action as a group of its fields, without Since.
func (p PendingAction) LogValue() slog.Value {
	return slog.GroupValue(slog.String("action", p.Action.String()), slog.String("item", string(p.ID)),
		slog.String("reason", p.Reason), slog.Uint64("revision", p.Revision))
}

// String renders the action for people: `reboot for "config:arm_freq"
// (revision 3): boot configuration changed`.
func (p PendingAction) String() string {
	s := fmt.Sprintf("%s for %q (revision %d)", p.Action, p.ID, p.Revision)
	if p.Reason != "" {
		s += ": " + p.Reason
	}
	return s
}

// TargetActionsKeyPrefix starts the Store key of a TargetReconciler's
// pending host actions: see TargetActionsKey.
const TargetActionsKeyPrefix = "converge.actions/"

// TargetActionsKey returns the Store key under which the TargetReconciler
// called name keeps its pending host actions (PendingActions):
// TargetActionsKeyPrefix followed by name, for example
// "converge.actions/target". The record is a small JSON document with a
// format version:
//
//	{"format":1,"actions":[{"action":"reboot","item":"config:arm_freq",
//	  "reason":"boot configuration changed","revision":3,
//	  "bootID":"0e5c…","since":"2026-12-04T15:00:00Z"}]}
//
// A record that is not such a document (damaged, of a newer format, or
// another program's) fails the reconciler's passes with an error matching
// ErrActionsDamaged that names the key, until it is deleted
// (TargetReconciler.ClearPendingActions deletes it). Do not give a
// controller the kind "converge.actions".
func TargetActionsKey(name string) string { return TargetActionsKeyPrefix + name }

// BootIDFile is the file LinuxBootID reads: the Linux kernel's random ID
// of the current boot, a new one at every boot.
const BootIDFile = "/proc/sys/kernel/random/boot_id"

// LinuxBootID returns the ID of the current boot as the Linux kernel gives
// it (BootIDFile), the default TargetReconcilerConfig.BootID. Where the
// file does not exist (another operating system, a sandbox without /proc)
// it returns "" and no error: the boot ID is unknown, and pending actions
// are then kept until TargetReconciler.ClearPendingActions. The file is
// read once per process, at the first call that succeeds: a boot ID
// changes only with a boot, which ends the process.
func LinuxBootID(ctx context.Context) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	if id := linuxBootID.Load(); id != nil {
		return *id, nil
	}
	b, err := os.ReadFile(bootIDFile)
	if errors.Is(err, os.ErrNotExist) {
		b, err = nil, nil
	}
	if err != nil {
		return "", fmt.Errorf("converge: boot ID: %w", bare(err))
	}
	id := string(bytes.TrimSpace(b))
	linuxBootID.Store(&id)
	return id, nil
}

// bootIDFile is the file LinuxBootID reads (BootIDFile; a test's file in
// tests), and linuxBootID the ID it read, once per process.
var (
	bootIDFile  = BootIDFile
	linuxBootID atomic.Pointer[string]
)

// storeActionsFormat is the format version of a stored actions record.
const storeActionsFormat = 1

// storeActionsRetries bounds the attempts of one change to a stored
// actions record that other writers keep changing under it.
const storeActionsRetries = 64

// storeActionsDoc is the JSON document of a stored actions record.
type storeActionsDoc struct {
	Format  int            `json:"format"`
	Actions []storedAction `json:"actions,omitempty"`
}

// storedAction is one PendingAction as stored.
type storedAction struct {
	Action   Action    `json:"action"`
	Item     ID        `json:"item"`
	Reason   string    `json:"reason,omitempty"`
	Revision uint64    `json:"revision,omitempty"`
	BootID   string    `json:"bootID,omitempty"`
	Since    time.Time `json:"since"`
}

// decodeActions reads a stored actions record strictly; the error names
// key and matches ErrActionsDamaged.
func decodeActions(key string, b []byte) ([]PendingAction, error) {
	damaged := func(format string, args ...any) error {
		return fmt.Errorf("converge: pending actions %q: %w: %s", key, bare(ErrActionsDamaged), fmt.Sprintf(format, args...))
	}
	var doc storeActionsDoc
	if p := wire.Decode(b, &doc); p != nil {
		where := ""
		if p.Path != "" {
			where = " at " + p.Path
		}
		return nil, damaged("decode%s: %v", where, p.Err)
	}
	switch {
	case doc.Format == 0:
		return nil, damaged("no format version")
	case doc.Format > storeActionsFormat:
		return nil, damaged("format %d is newer than %d", doc.Format, storeActionsFormat)
	}
	out := make([]PendingAction, 0, len(doc.Actions))
	for i, a := range doc.Actions {
		switch {
		case a.Action == 0:
			return nil, damaged("action %d: no action", i)
		case a.Item == "":
			return nil, damaged("action %d: no item", i)
		}
		p := PendingAction{Action: a.Action, ID: a.Item, Reason: a.Reason, Revision: a.Revision, BootID: a.BootID, Since: a.Since}
		if slices.ContainsFunc(out, func(q PendingAction) bool { return sameAction(p, q) }) {
			return nil, damaged("action %d: %s for %q repeated", i, a.Action, a.Item)
		}
		out = append(out, p)
	}
	return out, nil
}

func encodeActions(list []PendingAction) ([]byte, error) {
	doc := storeActionsDoc{Format: storeActionsFormat, Actions: make([]storedAction, len(list))}
	for i, p := range list {
		doc.Actions[i] = storedAction{Action: p.Action, Item: p.ID, Reason: p.Reason, Revision: p.Revision, BootID: p.BootID, Since: p.Since}
	}
	return json.Marshal(doc)
}

func sameAction(a, b PendingAction) bool { return a.Action == b.Action && a.ID == b.ID }

func equalActions(a, b []PendingAction) bool {
	return slices.EqualFunc(a, b, func(x, y PendingAction) bool {
		return sameAction(x, y) && x.Reason == y.Reason && x.Revision == y.Revision && x.BootID == y.BootID && x.Since.Equal(y.Since)
	})
}

// actionBook keeps a TargetReconciler's pending host actions, in memory and
// in one record of its Store.
type actionBook struct {
	store  Store
	key    string
	bootID func(context.Context) (string, error)
	now    func() time.Time
	obs    *targetObs

	mu sync.Mutex // orders this process's changes; other writers meet the version check
	// list is what this process knows is pending: what it read from the
	// store last and what it added since, written or not.
	list []PendingAction
}

// pending returns a copy of the pending actions.
func (b *actionBook) pending() []PendingAction {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.list)
}

// currentBoot reads the boot ID; a failure is logged and means unknown.
func (b *actionBook) currentBoot(ctx context.Context) string {
	id, err := b.bootID(ctx)
	if err != nil {
		b.obs.logAttrs(ctx, slog.LevelWarn, "boot ID unknown", slog.String("error", err.Error()))
		return ""
	}
	return id
}

// record adds the host actions the walk of rep asked for (none for a dry
// run) under revision rev and writes them to the store.
func (b *actionBook) record(ctx context.Context, rep *Report, rev uint64) error {
	if rep == nil || rep.Dry {
		return nil
	}
	asked := rep.Actions()
	if len(asked) == 0 {
		return nil
	}
	boot := b.currentBoot(ctx)
	now := b.now().UTC()
	b.mu.Lock()
	for _, a := range asked {
		p := PendingAction{Action: a.Action, ID: a.ID, Reason: a.Reason, Revision: rev, BootID: boot, Since: now}
		if i := slices.IndexFunc(b.list, func(q PendingAction) bool { return sameAction(p, q) }); i >= 0 {
			if rev >= b.list[i].Revision {
				b.list[i].Revision, b.list[i].Reason = rev, a.Reason
			}
			continue
		}
		b.list = append(b.list, p)
		b.obs.logAttrs(ctx, slog.LevelWarn, "host action required", slog.Any("required", p))
	}
	b.mu.Unlock()
	return b.sync(ctx, boot, true)
}

// sync merges the stored actions with those this process knows, drops the
// ones done (asked for in another boot than boot, when both are known),
// and writes the result back when it differs from what is stored.
func (b *actionBook) sync(ctx context.Context, boot string, bootKnown bool) error {
	if !bootKnown {
		boot = b.currentBoot(ctx)
	}
	return b.change(ctx, true, func(stored []PendingAction) []PendingAction {
		var kept []PendingAction
		for _, p := range mergeActions(stored, b.list) {
			if boot != "" && p.BootID != "" && p.BootID != boot {
				b.obs.logAttrs(ctx, slog.LevelInfo, "host action done", slog.Any("done", p))
				continue
			}
			kept = append(kept, p)
		}
		return kept
	})
}

// clear forgets every pending action, in the store too, whatever the
// stored record holds.
func (b *actionBook) clear(ctx context.Context) error {
	return b.change(ctx, false, func([]PendingAction) []PendingAction { return nil })
}

// change reads the stored actions (decoding them when decode is true),
// makes what fn returns the pending actions, and writes them back when
// they differ from what is stored (deleting the record when none is
// left), again when another writer got in between. It holds b.mu, which
// fn may rely on.
func (b *actionBook) change(ctx context.Context, decode bool, fn func(stored []PendingAction) []PendingAction) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for range storeActionsRetries {
		var stored []PendingAction
		var version uint64
		rec, err := b.store.Get(ctx, b.key)
		switch {
		case errors.Is(err, ErrStoreNotFound):
		case err != nil:
			return fmt.Errorf("converge: pending actions %q: %w", b.key, bare(err))
		default:
			version = rec.Version
			if decode {
				if stored, err = decodeActions(b.key, rec.Value); err != nil {
					return err
				}
			}
		}
		kept := fn(stored)
		switch {
		case version != 0 && equalActions(kept, stored) && (decode || len(kept) > 0):
			err = nil // as stored
		case version == 0 && len(kept) == 0:
			err = nil // none stored, none kept
		case len(kept) == 0:
			err = b.store.Delete(ctx, b.key, version)
		default:
			var v []byte
			if v, err = encodeActions(kept); err != nil {
				return fmt.Errorf("converge: pending actions %q: encode: %w", b.key, bare(err))
			}
			_, err = b.store.Put(ctx, StoreRecord{Key: b.key, Version: version, Value: v})
		}
		if errors.Is(err, ErrStoreStale) || errors.Is(err, ErrStoreNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("converge: pending actions %q: %w", b.key, bare(err))
		}
		b.list = kept
		b.obs.pendingActions(kept)
		return nil
	}
	return fmt.Errorf("converge: pending actions %q: %w: still changing after %d attempts", b.key, bare(ErrStoreStale), storeActionsRetries)
}

// mergeActions returns stored followed by the actions of mem that stored
// does not hold; an action both hold keeps the stored one's Since and boot
// ID and the Reason and Revision of the newer revision.
func mergeActions(stored, mem []PendingAction) []PendingAction {
	out := slices.Clone(stored)
	for _, p := range mem {
		i := slices.IndexFunc(out, func(q PendingAction) bool { return sameAction(p, q) })
		if i < 0 {
			out = append(out, p)
			continue
		}
		if p.Revision > out[i].Revision {
			out[i].Revision, out[i].Reason = p.Revision, p.Reason
		}
	}
	return out
}

// PendingActions returns the host actions that items of the target asked
// for (RequireAction) and that have not happened yet, oldest first: a
// reboot is pending until the host booted again, as the boot ID says (see
// TargetReconcilerConfig.BootID). They are kept in the Store (under
// TargetActionsKey(Name)) with the revision of the target that asked, so
// that a restarted agent still knows; they are read from it by Load (and
// LoadOrSet, Run) and at the start of every pass, when actions done are
// dropped. A new target does not clear them: the host changed already.
// The slice is the caller's.
func (r *TargetReconciler[T]) PendingActions() []PendingAction {
	return r.actions.pending()
}

// ClearPendingActions forgets every pending host action, in the Store
// too: for a program that performed them on a host whose boot ID is
// unknown (see TargetReconcilerConfig.BootID), or to start over after a
// damaged record (ErrActionsDamaged).
func (r *TargetReconciler[T]) ClearPendingActions(ctx context.Context) error {
	return r.actions.clear(ctx)
}
