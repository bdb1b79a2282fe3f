package converge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/convergekit/converge/internal/wire"
)

// Refresher is the optional ability of an Item[S] to act on a change of
// its dependencies once the item itself has converged, as Puppet's
// notify/subscribe, Ansible's handlers and mgmt's refresh do: a service
// restarts once after one or more of its configuration files changed in a
// walk, and never after a walk that changed nothing. Wrap carries it to
// the Node (RefreshNode).
//
// The dependencies that refresh an item are all the dependencies it was
// added with (Graph.Add); an ordering edge (Graph.After) never refreshes.
// A dependency that must not trigger a refresh is therefore expressed as
// an ordering edge: the item still starts after it, but does not read its
// state and is not refreshed when it changes.
//
// A dependency changed when its Apply ran and succeeded in the walk (its
// Decision required work), or, in a dry run, would change it. An item that
// was only refreshed did not change in that sense: its own dependents are
// not refreshed for it (a refresh does not cascade).
//
// In Apply, once the item's own discover, check, apply and verify phases
// succeeded (whether it changed or not), the walk calls Refresh exactly
// once when any of its dependencies changed in the walk or a refresh of
// it is pending from an earlier walk, however many dependencies changed;
// the item is then OutcomeChanged and ItemResult.Refresh lists the
// dependencies. When Refresh fails the item fails in PhaseRefresh and the
// refresh stays pending for the next walk. An item whose dependency
// failed is not run (OutcomeWaiting), so it is not refreshed either, and
// its refresh stays pending. ApplyDry never calls Refresh: its result
// says the item would refresh (ItemResult.Refresh, and OutcomeWouldChange
// for an item that would otherwise be unchanged). Absent items, and every
// item of a Clean, are never refreshed: their pending refreshes are
// dropped once they are gone.
//
// What is pending survives the walk in the Walker's RefreshLog
// (WalkerConfig.RefreshLog): before the Apply of a dependency runs, the
// walk records that its Refresher dependents are due a refresh, and it
// marks an item's refresh done only after Refresh succeeded. A process
// killed between the write and the refresh thus refreshes on its next
// walk, after a restart too when the log is durable (NewStoreRefreshLog;
// a TargetReconciler's walks use one over its Store). The promise is at
// least once: a process killed after Refresh and before the log marked it
// done refreshes again, so Refresh must be harmless to repeat, as a
// restart is.
type Refresher[S any] interface {
	// Refresh acts on a change of the item's dependencies once the item itself has converged
	// (restart a service after its configuration changed). changed lists the dependencies that
	// changed, in this walk or in an earlier one whose refresh did not happen. It returns the state reached.
	Refresh(ctx context.Context, current S, changed []ID) (S, error)
}

// RefreshNode is the optional ability of a Node to be refreshed, the
// untyped counterpart of Refresher. current is the state the item
// converged to in the walk; changed is sorted and holds no repeats.
type RefreshNode interface {
	Refresh(ctx context.Context, current any, changed []ID) (any, error)
}

// DepChanged reports whether dependency id of the item changed in this walk (its Apply ran and succeeded,
// or a dry run would change it). It is false for a DepStates the walk did not make.
//
// It is also false when id is not a dependency of the item (an ordering
// edge is not one), when the dependency has not finished (an Absent item's
// Absent dependencies, removed after it), and when the dependency was
// only refreshed. Items read it through the DepStates their methods get,
// for example to reload instead of restart when only one file changed.
func DepChanged(deps DepStates, id ID) bool {
	d, ok := deps.(*depView)
	if !ok || d == nil || d.ws == nil {
		return false
	}
	j, final := d.final(id)
	return final && d.ws.results[j].changedByApply()
}

// changedByApply reports whether the result is that of an item whose
// Apply (or ApplyDry) ran and succeeded.
func (r *ItemResult) changedByApply() bool {
	return r.Decision.Required() && (r.Outcome == OutcomeChanged || r.Outcome == OutcomeWouldChange)
}

// RefreshLog remembers the refreshes that are due and have not happened
// yet, across walks, and across restarts when it is durable. A walk calls
// Pending once when it starts, Record before the Apply of an item with
// Refresher dependents, and Done after an item's Refresh succeeded; it
// calls them only for graphs that hold a Refresher. Implementations must
// be safe for concurrent use.
//
// MemRefreshLog keeps the log in memory (a Walker without a RefreshLog
// has one for its life); NewStoreRefreshLog keeps it in one record of a
// Store.
type RefreshLog interface {
	// Record notes that each of items is due a refresh because dependency
	// dep is about to change. It must not return before the note is as
	// durable as the log promises: the walk applies dep only after it
	// returned nil, and fails dep (in PhaseApply, without writing) when it
	// returns an error.
	Record(ctx context.Context, dep ID, items []ID) error
	// Pending returns the refreshes recorded and not marked done: for each
	// item, the dependencies it is due a refresh for, sorted and without
	// repeats. The map is the caller's.
	Pending(ctx context.Context) (map[ID][]ID, error)
	// Done marks the refresh of item for the dependencies deps done: they
	// are no longer pending for it. The item's other pending dependencies,
	// if any, stay pending. Marking what is not pending is not an error.
	Done(ctx context.Context, item ID, deps []ID) error
}

// RefreshLogError is the error of a RefreshLog call that a walk needed
// for an item: "record" before the Apply of a dependency (the item fails
// in PhaseApply without writing), "pending" when the log could not be read
// at the start of the walk, or "done" after its Refresh succeeded (the item
// fails in PhaseRefresh; it is refreshed again by the next walk). It
// matches ErrRefreshLog and wraps the log's own error.
type RefreshLogError struct {
	// Op is "record", "pending" or "done".
	Op  string
	Err error
}

// Error describes the problem, naming its culprit.
func (e *RefreshLogError) Error() string {
	return fmt.Sprintf("converge: refresh log: %s: %s", e.Op, causeText(e.Err))
}

// Unwrap returns the log's error.
func (e *RefreshLogError) Unwrap() error { return e.Err }

// Is makes RefreshLogError match ErrRefreshLog.
func (e *RefreshLogError) Is(target error) bool { return target == ErrRefreshLog }

// MemRefreshLog is the in-memory RefreshLog: what is pending is lost when
// the process ends. The zero value is an empty log ready to use. It is
// safe for concurrent use.
type MemRefreshLog struct {
	mu  sync.Mutex
	due map[ID][]ID
}

var _ RefreshLog = (*MemRefreshLog)(nil)

// Record implements RefreshLog.
func (l *MemRefreshLog) Record(ctx context.Context, dep ID, items []ID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.due == nil {
		l.due = map[ID][]ID{}
	}
	recordDue(l.due, dep, items)
	return nil
}

// Pending implements RefreshLog.
func (l *MemRefreshLog) Pending(ctx context.Context) (map[ID][]ID, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return cloneDue(l.due), nil
}

// Done implements RefreshLog.
func (l *MemRefreshLog) Done(ctx context.Context, item ID, deps []ID) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	doneDue(l.due, item, deps)
	return nil
}

// recordDue adds dep to the pending dependencies of each of items and
// reports whether anything was added.
func recordDue(due map[ID][]ID, dep ID, items []ID) bool {
	added := false
	for _, it := range items {
		deps := due[it]
		i, found := slices.BinarySearch(deps, dep)
		if found {
			continue
		}
		due[it] = slices.Insert(deps, i, dep)
		added = true
	}
	return added
}

// doneDue removes deps from the pending dependencies of item and reports
// whether anything was removed.
func doneDue(due map[ID][]ID, item ID, deps []ID) bool {
	have, ok := due[item]
	if !ok {
		return false
	}
	kept := slices.DeleteFunc(slices.Clone(have), func(d ID) bool { return slices.Contains(deps, d) })
	if len(kept) == len(have) {
		return false
	}
	if len(kept) == 0 {
		delete(due, item)
	} else {
		due[item] = kept
	}
	return true
}

func cloneDue(due map[ID][]ID) map[ID][]ID {
	out := make(map[ID][]ID, len(due))
	for it, deps := range due {
		out[it] = slices.Clone(deps)
	}
	return out
}

// storeRefreshFormat is the format version of a stored refresh record.
const storeRefreshFormat = 1

// storeRefreshRetries bounds the attempts of one change to a stored
// refresh record that other writers keep changing under it.
const storeRefreshRetries = 64

// storeRefreshDoc is the JSON document of a stored refresh record:
// {"format":1,"due":{"service:web":["file:/etc/web.conf"]}}, the items in
// key order and each item's dependencies sorted.
type storeRefreshDoc struct {
	Format int         `json:"format"`
	Due    map[ID][]ID `json:"due,omitempty"`
}

// storeRefreshLog is the RefreshLog of NewStoreRefreshLog.
type storeRefreshLog struct {
	store Store
	key   string
	mu    sync.Mutex // orders this process's changes; other writers meet the version check
}

// NewStoreRefreshLog returns a RefreshLog kept in one record of store,
// under key: a small JSON document ({"format":1,"due":{item:[deps]}})
// holding the pending refreshes, changed by compare-and-swap on the
// record's version, so that processes sharing the store never lose each
// other's changes. A change is durable when store's Put is (a boltstore
// is on disk before Put returns). A Record or Done that changes nothing
// writes nothing. The record is sealed at rest when store has a Sealer,
// though it holds only item IDs.
//
// A record under key that is not such a document (another program's, or
// damaged) fails every call with an error matching ErrRefreshDamaged and
// naming key; deleting the record starts the log over, empty (the
// refreshes it held are then lost). A TargetReconciler keeps its log under
// TargetRefreshKey(name).
func NewStoreRefreshLog(store Store, key string) RefreshLog {
	if store == nil {
		panic("converge: NewStoreRefreshLog: nil store")
	}
	return &storeRefreshLog{store: store, key: key}
}

// read returns the stored document and its version (0 when none is
// stored).
func (l *storeRefreshLog) read(ctx context.Context) (map[ID][]ID, uint64, error) {
	rec, err := l.store.Get(ctx, l.key)
	if errors.Is(err, ErrStoreNotFound) {
		return map[ID][]ID{}, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var doc storeRefreshDoc
	if p := wire.Decode(rec.Value, &doc); p != nil {
		where := ""
		if p.Path != "" {
			where = " at " + p.Path
		}
		return nil, 0, fmt.Errorf("converge: refresh log %q: %w: decode%s: %v", l.key, bare(ErrRefreshDamaged), where, p.Err)
	}
	switch {
	case doc.Format == 0:
		return nil, 0, fmt.Errorf("converge: refresh log %q: %w: no format version", l.key, bare(ErrRefreshDamaged))
	case doc.Format > storeRefreshFormat:
		return nil, 0, fmt.Errorf("converge: refresh log %q: %w: format %d is newer than %d", l.key, bare(ErrRefreshDamaged), doc.Format, storeRefreshFormat)
	}
	due := make(map[ID][]ID, len(doc.Due))
	for it, deps := range doc.Due {
		if it == "" || len(deps) == 0 || slices.Contains(deps, "") {
			return nil, 0, fmt.Errorf("converge: refresh log %q: %w: item %q: empty ID or no dependency", l.key, bare(ErrRefreshDamaged), it)
		}
		deps = slices.Clone(deps)
		slices.Sort(deps)
		due[it] = slices.Compact(deps)
	}
	return due, rec.Version, nil
}

// change applies fn to the stored document and writes it back when fn
// reports a change, retrying when another writer got in between.
func (l *storeRefreshLog) change(ctx context.Context, fn func(map[ID][]ID) bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range storeRefreshRetries {
		due, version, err := l.read(ctx)
		if err != nil {
			return err
		}
		if !fn(due) {
			return nil
		}
		b, err := json.Marshal(storeRefreshDoc{Format: storeRefreshFormat, Due: due})
		if err != nil {
			return fmt.Errorf("converge: refresh log %q: encode: %w", l.key, bare(err))
		}
		_, err = l.store.Put(ctx, StoreRecord{Key: l.key, Version: version, Value: b})
		if errors.Is(err, ErrStoreStale) {
			continue
		}
		return err
	}
	return fmt.Errorf("converge: refresh log %q: %w: still changing after %d attempts", l.key, bare(ErrStoreStale), storeRefreshRetries)
}

// Record implements RefreshLog.
func (l *storeRefreshLog) Record(ctx context.Context, dep ID, items []ID) error {
	return l.change(ctx, func(due map[ID][]ID) bool { return recordDue(due, dep, items) })
}

// Pending implements RefreshLog.
func (l *storeRefreshLog) Pending(ctx context.Context) (map[ID][]ID, error) {
	due, _, err := l.read(ctx)
	return due, err
}

// Done implements RefreshLog.
func (l *storeRefreshLog) Done(ctx context.Context, item ID, deps []ID) error {
	return l.change(ctx, func(due map[ID][]ID) bool { return doneDue(due, item, deps) })
}

// TargetRefreshKeyPrefix starts the Store key of a TargetReconciler's
// refresh log: see TargetRefreshKey.
const TargetRefreshKeyPrefix = "converge.refresh/"

// TargetRefreshKey returns the Store key under which the TargetReconciler
// called name keeps its refresh log (NewStoreRefreshLog), unless its
// Walk.RefreshLog is set: TargetRefreshKeyPrefix followed by name, for
// example "converge.refresh/target". The reconciler's targets are kept
// apart from records (Store.PutTarget), and no other record of this module
// starts with the prefix (a controller's start with its kind and "/", a
// plan's with "plan/"): do not give a controller the kind
// "converge.refresh".
func TargetRefreshKey(name string) string { return TargetRefreshKeyPrefix + name }

// compiledRefresh is what a walk needs of the Refreshers of a compiled
// graph; nil for a graph without any.
type compiledRefresh struct {
	// nodes[k] is item k's RefreshNode, nil for an item that is not one.
	nodes []RefreshNode
	// dependents[k] are the IDs of the Present Refresher items that depend
	// on item k: those the walk records due a refresh before k's Apply.
	dependents [][]ID
}

// compileRefresh finds the Refreshers of c; nil when there are none.
func compileRefresh(c *compiled) *compiledRefresh {
	var cr *compiledRefresh
	for k := range c.items {
		rn, ok := c.items[k].node.(RefreshNode)
		if !ok {
			continue
		}
		if cr == nil {
			cr = &compiledRefresh{nodes: make([]RefreshNode, len(c.items)), dependents: make([][]ID, len(c.items))}
		}
		cr.nodes[k] = rn
		if c.items[k].presence != Present {
			continue
		}
		for _, j := range c.items[k].deps {
			cr.dependents[j] = append(cr.dependents[j], c.items[k].id)
		}
	}
	return cr
}

// walkRefresh is the refresh state of one walk of a graph with
// Refreshers.
type walkRefresh struct {
	log RefreshLog
	// pending is what the log held when the walk started; read-only
	// during the walk. readErr is why it could not be read.
	pending map[ID][]ID
	readErr error
}

// startRefresh reads the log at the start of a walk of a graph with
// Refreshers.
func startRefresh(ctx context.Context, log RefreshLog) *walkRefresh {
	wr := &walkRefresh{log: log}
	wr.pending, wr.readErr = log.Pending(ctx)
	return wr
}

// refreshList returns the dependencies that refresh item k, which
// converged: those pending for it and those that changed in this walk,
// sorted and without repeats; nil when there are none.
func (ws *walkState) refreshList(k int) []ID {
	it := &ws.c.items[k]
	var out []ID
	for _, j := range it.deps {
		if ws.results[j].changedByApply() {
			out = append(out, ws.c.items[j].id)
		}
	}
	out = append(out, ws.refresh.pending[it.id]...)
	if len(out) == 0 {
		return nil
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// refreshItem runs the refresh of item k, which converged (res holds its
// result so far): it returns nil, with nothing done, for an item that is
// not a Refresher or has nothing to refresh for, and the error that fails
// the item in PhaseRefresh otherwise. An Absent item drops what is pending
// for it. *run is the item's itemRun, made here if the item did not apply.
// The caller set the phase to PhaseRefresh.
func (ws *walkState) refreshItem(k int, res *ItemResult, b *batch, run **itemRun) error {
	rn := ws.c.refresh.nodes[k]
	if rn == nil {
		return nil
	}
	wr := ws.refresh
	id := ws.c.items[k].id
	if res.Presence == Absent {
		if deps := wr.pending[id]; len(deps) > 0 && !ws.dry {
			// Gone: nothing to refresh. A failure leaves the entry for a
			// later walk to drop; it costs at most a needless refresh of
			// an item that is added again.
			_ = wr.log.Done(ws.itemCtx, id, deps)
		}
		return nil
	}
	if wr.readErr != nil {
		return &RefreshLogError{Op: "pending", Err: wr.readErr}
	}
	changed := ws.refreshList(k)
	if changed == nil {
		return nil
	}
	res.Refresh = changed
	if ws.dry {
		if res.Outcome == OutcomeUnchanged {
			res.Outcome = OutcomeWouldChange
		}
		return nil
	}
	// A refresh is slow work, as an Apply is: see runItem.
	ws.giveBack(b)
	ws.applied.Store(true)
	if ws.grow > 0 && !ws.grew.Load() {
		ws.growFrom(k)
	}
	if *run == nil {
		*run = &itemRun{id: id}
	}
	ctx := context.WithValue(ws.itemCtx, keyItemRun, *run)
	after, err := rn.Refresh(ctx, res.After, slices.Clone(changed))
	if err != nil {
		return err
	}
	res.After = after
	if res.Outcome == OutcomeUnchanged {
		res.Outcome = OutcomeChanged
	}
	if err := wr.log.Done(ctx, id, changed); err != nil {
		return &RefreshLogError{Op: "done", Err: err}
	}
	return nil
}

// recordRefresh records, before item k's Apply, that its Refresher
// dependents are due a refresh; nil when it has none or in a dry run.
func (ws *walkState) recordRefresh(k int) error {
	deps := ws.c.refresh.dependents[k]
	if len(deps) == 0 || ws.dry || ws.mode != ModeApply {
		return nil
	}
	if err := ws.refresh.log.Record(ws.itemCtx, ws.c.items[k].id, slices.Clone(deps)); err != nil {
		return &RefreshLogError{Op: "record", Err: err}
	}
	return nil
}

// final returns the index of dependency id of the view's item and whether
// its result is final (see State).
func (d *depView) final(id ID) (int, bool) {
	ws := d.ws
	j, ok := ws.c.index[id]
	if !ok {
		return 0, false
	}
	if !slices.Contains(ws.c.items[d.k].deps, j) {
		return 0, false
	}
	switch {
	case ws.presence(d.k) == Present:
		return j, true
	case ws.presence(j) == Absent:
		return j, false
	case ws.published[j].Load():
		return j, true
	}
	return j, false
}
