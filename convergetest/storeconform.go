package convergetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/convergekit/converge"
)

// ErrStoreNonConformant is matched by every *StoreConformanceError.
var ErrStoreNonConformant = errors.New("convergetest: store breaks the Store contract")

// StoreConformanceError is one broken rule of the converge.Store contract
// found by ConformStore.
type StoreConformanceError struct {
	Rule string
	Err  error
}

// Error describes the problem, naming its culprit.
func (e *StoreConformanceError) Error() string {
	return fmt.Sprintf("convergetest: store: %s: %v", e.Rule, e.Err)
}

// Unwrap returns the cause.
func (e *StoreConformanceError) Unwrap() error { return e.Err }

// Is makes StoreConformanceError match ErrStoreNonConformant.
func (e *StoreConformanceError) Is(target error) bool { return target == ErrStoreNonConformant }

// StoreConformOptions tunes ConformStore. The zero value checks everything
// but lease expiry, history retention by age through the store's clock,
// and watches across handles.
type StoreConformOptions struct {
	// Prefix is put before every key ConformStore writes, so it can run on
	// a shared database; the store should hold no other key under it.
	Prefix string
	// Wait, when set, lets time pass by d for the store's clock (a real
	// sleep for a database, time.Sleep inside a testing/synctest bubble for
	// MemStore). Without it, lease expiry and retention by age through the
	// passing of time are not checked. ConformStore waits at most a few
	// times, 2 seconds each, plus once 1.5×Retention.Age+1s when Age is
	// set.
	Wait func(d time.Duration)
	// Retention is the retention the store under test was opened with;
	// the zero value is the stores' default (the newest
	// converge.DefaultHistoryEntries entries per key). When Age is set it
	// should be a minute or more.
	Retention converge.Retention
	// Peer, when set, is a second handle on the storage of the store under
	// test (another connection pool on the same database, as another
	// process would have). ConformStore then checks that a write through
	// Peer reaches a Watch on the store.
	Peer converge.Store
}

// watchTimeout bounds the wait for a watch delivery.
const watchTimeout = 5 * time.Second

// ConformStore runs the converge.Store contract against s, and the
// converge.Queue contract when s implements it, and returns nil or an
// error aggregating one *StoreConformanceError per broken rule. It imports
// no testing package, so it runs in any test framework or in a self-check
// command. Its rules (the Rule of the errors it returns) are:
//
//   - "get missing": Get of a missing key matches converge.ErrStoreNotFound.
//   - "create", "update", "get": Put with version 0 creates and returns
//     version 1, then a higher version on each write; Get returns the last
//     value and version.
//   - "stale put": a stale version (0 on an existing key, an old or a
//     future version) fails with a *converge.StoreVersionError and writes
//     nothing, history included.
//   - "history", "delete": history entries are appended with their write,
//     in order, and outlive Delete; Delete checks the version and fails
//     with ErrStoreNotFound on a missing key.
//   - "history subject": History returns each entry's Subject as written:
//     nil stays nil (the record itself), and a subject of command 0 stays
//     a subject, not nil.
//   - "history by": History returns each entry's By (who made the
//     transition) as written, empty staying empty, in a Put and a Delete.
//   - "list": List returns the records under a prefix, sorted by key.
//   - "target": Target of a missing name matches ErrStoreNotFound;
//     PutTarget replaces the last target and returns a revision greater
//     than every one it returned for the name before, which Target
//     returns with the target.
//   - "target revision": PutTarget without a target takes the next
//     revision and keeps the stored target and its revision (on a name
//     with no target, Target still matches ErrStoreNotFound); the next
//     target's revision is greater still.
//   - "concurrent targets": 8 goroutines storing targets under one name
//     get distinct revisions, and Target returns the one with the
//     highest.
//   - "claim", "release": a claim is exclusive until released or (with
//     Wait) expired; renewing keeps the token; a claim after a release
//     gets a greater token; a lost lease cannot be released.
//   - "fencing": a Put with the token of the key's current lease succeeds;
//     a token that is stale (released, then the key taken by another
//     owner), released, never held or (with Wait) expired fails with
//     ErrLeaseLost and writes nothing.
//   - "retention": after more entries than Retention.Entries, History
//     holds exactly the newest ones, in order; entries older than
//     Retention.Age (by their At) are dropped on the next append, but never
//     the newest entry of a key; with Wait, entries that grew older than
//     Age while time passed are dropped too.
//   - "cancellation": with a cancelled context every method fails with an
//     error matching context.Canceled and writes nothing.
//   - "concurrent writers": 8 goroutines doing versioned
//     read-modify-write loops on one key lose no acknowledged write: the
//     final count is the number of acknowledged writes and the history
//     holds one entry per write (as retention allows), in order.
//   - "invalid input": an empty key, empty owner, non-positive lease
//     duration or claim limit, or a value or target that is not JSON
//     fails with a *converge.StoreRequestError (matching ErrStoreInvalid)
//     and writes nothing.
//
// When s implements converge.Creator:
//
//   - "create many": CreateMany of no records writes nothing and fails
//     not; of 500 records, it returns a version for each, Get, History and
//     List return them as written, and (for a Queue) each is due at once.
//   - "create many: exists": a batch holding stored keys fails with a
//     *converge.StoreExistsError naming exactly those keys, sorted, each
//     once in its message, and writes nothing (no record, no history).
//   - "create many: invalid": a batch holding an empty key, a key twice
//     or a value that is not JSON fails with a *converge.StoreRequestError
//     naming that key, and writes nothing.
//   - "create many: again": a record created again after a Delete keeps
//     the history it had, and retention keeps the newest entries of old
//     and new together.
//
// When s implements converge.LeaseReader:
//
//   - "holder": Holder finds no holder of a key never claimed, the lease
//     a claim made (owner, token, expiry), and none once it is released
//     or (with Wait) expired.
//   - "leases": Leases returns the live leases under a prefix, sorted by
//     key, and none of a key released or beside the prefix.
//
// When s implements converge.Queue:
//
//   - "queue: new records due": a created record is due at once; ClaimDue
//     returns it with its value, version and a lease to the owner; a write
//     to an existing record does not make it due again; a deleted record
//     is not due.
//   - "queue: claim history": ClaimDue returns each record with
//     HasHistory set and History equal to the newest
//     converge.ClaimHistoryEntries entries History returns for it (none
//     for a record without history).
//   - "queue: claim due time": ClaimDue returns a record scheduled at a
//     time in the past with that time in Claimed.Due, to the microsecond.
//   - "queue: claim order": ClaimDue takes at most limit records, the
//     earliest due first, only under its prefix.
//   - "queue: schedule": Schedule keeps the earlier of two times, a future
//     time makes a record not due yet, and a missing key fails with
//     ErrStoreNotFound.
//   - "queue: exclusive claims": a record claimed by one owner is neither
//     returned by ClaimDue nor given by Claim to another.
//   - "queue: concurrent claims": 8 concurrent ClaimDue callers never get
//     one record twice, and together get them all.
//   - "queue: schedule during claim": a claimed record is not claimable
//     even when scheduled; a Schedule during the claim survives Finish;
//     Finish with a past time makes the record due, with the zero time not.
//   - "queue: stale finish": Finish with a finished or forged lease fails
//     with ErrLeaseLost and changes nothing.
//   - "queue: expired claim" (with Wait): the records of an owner whose
//     leases expired are claimed by another, with a greater token; the old
//     owner can then neither Finish nor write with its token.
//   - "watch": a write right after Watch returns is seen (Watch returns
//     once the watch is in place); creates, Schedule and Delete are seen
//     (updates need not be); keys outside the prefix are not.
//   - "watch: stop": once stop returns, fn is not called again.
//   - "watch: cancel": once the watch's context is cancelled, fn is not
//     called again.
//   - "watch: peer" (with Peer): a write through Peer is seen by a Watch
//     on s.
//
// When s implements converge.Prioritizer:
//
//   - "queue: priority order": among records due at one time, ClaimDue
//     takes the highest priority first, whether it was set by PutPriority
//     at creation, by CreateMany, or later by PutPriority on the record
//     (a Put keeps it, Priority returns it); among records due at
//     different times, by rank (see converge.PriorityStep): priority 0
//     due two hours ago before priority 3600 due half an hour ago, after
//     priority 7200 due as recently.
//   - "queue: priority invalid": a priority below 0 or above
//     converge.MaxPriority fails with a *converge.StoreRequestError naming
//     the key and writes nothing.
//   - "queue: priority ageing" (with Wait): the starvation check. For 16
//     ticks of 250 ms, 4 records of priority 2 are created and one ClaimDue
//     of limit 4 takes 4 records, so the high stream alone fills every
//     claim; 6 records of priority 0 are due from the start. Every one of
//     them must be claimed by tick AgeingBound (11), and none at the first.
//
// When s implements converge.Linker:
//
//   - "queue: watches": a record watching another (PutWatching; Watching
//     returns the keys sorted, once each) becomes due with a transition
//     of the watched record (a history entry whose To differs from its
//     From: a state change, a deletion, a creation), not with a write
//     without one; a transition while the watcher is claimed makes it
//     due once its claim is finished; watching itself or an empty key
//     fails with a *converge.StoreRequestError; watching nothing, and
//     Delete, drop what it watched.
//
// When Retention.Age is set, the entries the rules expect kept are dated a
// day after the run started, so that none of them grows older than Age
// while the rules run, however long the store's writes take; only the
// entries of the age rules are dated in the past.
//
// A watch delivery is waited for at most 5 seconds; fn("") counts as
// seeing every key. Keys are written under Prefix and sub-prefixes named
// after the rules.
func ConformStore(ctx context.Context, s converge.Store, opts StoreConformOptions) error {
	c := &storeConformer{ctx: ctx, s: s, opts: opts, t0: time.Now().UTC().Truncate(time.Millisecond)}
	c.fresh = c.t0
	if opts.Retention.Age > 0 {
		c.fresh = c.t0.Add(freshAhead)
	}
	c.q, _ = s.(converge.Queue)
	c.versions()
	c.historyAndDelete()
	c.historySubject()
	c.historyBy()
	c.list()
	c.targets()
	c.claims()
	c.fencing()
	c.retention()
	c.cancellation()
	c.concurrentWriters()
	c.invalidInput()
	if cr, ok := s.(converge.Creator); ok {
		c.createMany(cr)
	}
	if lr, ok := s.(converge.LeaseReader); ok {
		c.holder(lr)
		c.leases(lr)
	}
	if c.q != nil {
		c.queueNewDue()
		c.queueClaimHistory()
		c.queueDue()
		c.queueOrder()
		c.queueSchedule()
		c.queueExclusive()
		c.queueConcurrentClaims()
		c.queueScheduleDuringClaim()
		c.queueStaleFinish()
		c.queueExpiredClaim()
		if p, ok := s.(converge.Prioritizer); ok {
			c.priorities(p)
		}
		if l, ok := s.(converge.Linker); ok {
			c.links(l)
		}
		c.watch()
		c.watchStop()
		c.watchCancel()
		c.watchPeer()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) == 0 {
		return nil
	}
	return &multierror.Error{Errors: c.errs}
}

type storeConformer struct {
	ctx  context.Context
	s    converge.Store
	q    converge.Queue // nil when s is not a Queue
	opts StoreConformOptions
	t0   time.Time
	// fresh is when entry 0 of h is dated: t0, or t0+freshAhead when
	// the retention has an age.
	fresh time.Time

	mu   sync.Mutex
	errs []error
}

func (c *storeConformer) fail(rule string, format string, args ...any) {
	c.mu.Lock()
	c.errs = append(c.errs, &StoreConformanceError{Rule: rule, Err: fmt.Errorf(format, args...)})
	c.mu.Unlock()
}

func (c *storeConformer) k(name string) string { return c.opts.Prefix + name }

// freshAhead is how far after the start of the run the entries are dated
// when the retention has an age: which of them a store drops by age must
// not depend on how long its writes take, and no run lasts a day.
const freshAhead = 24 * time.Hour

// h is history entry i, i milliseconds after c.fresh.
func (c *storeConformer) h(i int, to string) converge.HistoryEntry {
	return converge.HistoryEntry{At: c.fresh.Add(time.Duration(i) * time.Millisecond), To: to}
}

// put writes value under key over version, reporting a failure under rule.
func (c *storeConformer) put(rule, key string, version uint64, value string, h ...converge.HistoryEntry) (uint64, bool) {
	v, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key, Version: version, Value: json.RawMessage(value)}, h...)
	if err != nil {
		c.fail(rule, "put %q over version %d: %v", key, version, err)
		return 0, false
	}
	return v, true
}

func (c *storeConformer) versions() {
	if _, err := c.s.Get(c.ctx, c.k("missing")); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail("get missing", "want ErrStoreNotFound, got %v", err)
	}
	key := c.k("obj/a")
	v1, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`{"n":1}`)}, c.h(1, "one"))
	if err != nil || v1 != 1 {
		c.fail("create", "want version 1, got %d, %v", v1, err)
	}
	for _, stale := range []uint64{0, v1 + 5} {
		_, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key, Version: stale, Value: json.RawMessage(`{"n":9}`)}, c.h(9, "stale"))
		var ve *converge.StoreVersionError
		if !errors.As(err, &ve) || !errors.Is(err, converge.ErrStoreStale) {
			c.fail("stale put", "version %d: want *StoreVersionError, got %v", stale, err)
		}
	}
	v2, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key, Version: v1, Value: json.RawMessage(`{"n":2}`)}, c.h(2, "two"))
	if err != nil || v2 <= v1 {
		c.fail("update", "want a version above %d, got %d, %v", v1, v2, err)
	}
	if _, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key, Version: v1, Value: json.RawMessage(`{"n":9}`)}); !errors.Is(err, converge.ErrStoreStale) {
		c.fail("stale put", "old version %d: want ErrStoreStale, got %v", v1, err)
	}
	if rec, err := c.s.Get(c.ctx, key); err != nil || rec.Version != v2 || !jsonEqual(rec.Value, `{"n":2}`) {
		c.fail("get", "want version %d {\"n\":2}, got %d %s, %v", v2, rec.Version, rec.Value, err)
	}
	if hist, err := c.s.History(c.ctx, key); err != nil || !historyEqual(hist, c.kept([]converge.HistoryEntry{c.h(1, "one"), c.h(2, "two")})) {
		c.fail("history", "want entries one, two; got %v, %v", hist, err)
	}
}

func (c *storeConformer) historyAndDelete() {
	key := c.k("del/a")
	v1, ok := c.put("delete", key, 0, `1`, c.h(1, "one"))
	if !ok {
		return
	}
	v2, ok := c.put("delete", key, v1, `2`, c.h(2, "two"))
	if !ok {
		return
	}
	if err := c.s.Delete(c.ctx, key, v1, c.h(3, "")); !errors.Is(err, converge.ErrStoreStale) {
		c.fail("delete", "stale version: want ErrStoreStale, got %v", err)
	}
	if err := c.s.Delete(c.ctx, key, v2, c.h(3, "")); err != nil {
		c.fail("delete", "%v", err)
	}
	if _, err := c.s.Get(c.ctx, key); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail("delete", "record still there: %v", err)
	}
	if err := c.s.Delete(c.ctx, key, v2); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail("delete", "missing key: want ErrStoreNotFound, got %v", err)
	}
	want := c.kept([]converge.HistoryEntry{c.h(1, "one"), c.h(2, "two"), c.h(3, "")})
	if hist, err := c.s.History(c.ctx, key); err != nil || !historyEqual(hist, want) {
		c.fail("history", "want entries one, two, deleted after delete; got %v, %v", hist, err)
	}
	if hist, err := c.s.History(c.ctx, c.k("del/never")); err != nil || len(hist) != 0 {
		c.fail("history", "key without history: want none, got %v, %v", hist, err)
	}
}

func (c *storeConformer) historySubject() {
	const rule = "history subject"
	key := c.k("subject/a")
	with := func(i int, to string, sub *converge.HistorySubject) converge.HistoryEntry {
		e := c.h(i, to)
		e.Subject = sub
		return e
	}
	written := []converge.HistoryEntry{
		with(1, "plan", nil),
		with(2, "command 0", &converge.HistorySubject{Command: 0}),
		with(3, "host", &converge.HistorySubject{Command: 2, Group: "workers", Host: "w1"}),
	}
	v, ok := c.put(rule, key, 0, `1`, written[:2]...)
	if !ok {
		return
	}
	if _, ok := c.put(rule, key, v, `2`, written[2]); !ok {
		return
	}
	if hist, err := c.s.History(c.ctx, key); err != nil || !historyEqual(hist, c.kept(written)) {
		c.fail(rule, "want subjects nil, {Command:0}, {Command:2 Group:workers Host:w1}; got %s, %v", subjects(hist), err)
	}
}

func (c *storeConformer) historyBy() {
	const rule = "history by"
	key := c.k("by/a")
	by := func(i int, to, who string) converge.HistoryEntry {
		e := c.h(i, to)
		e.By = who
		return e
	}
	written := []converge.HistoryEntry{
		by(1, "added", ""),
		by(2, "released", "alice@example.com"),
		by(3, "retried", "ops: bob"),
		by(4, "", "carol"),
	}
	v, ok := c.put(rule, key, 0, `1`, written[:2]...)
	if !ok {
		return
	}
	v, ok = c.put(rule, key, v, `2`, written[2])
	if !ok {
		return
	}
	if err := c.s.Delete(c.ctx, key, v, written[3]); err != nil {
		c.fail(rule, "delete: %v", err)
		return
	}
	hist, err := c.s.History(c.ctx, key)
	if err != nil || !historyEqual(hist, c.kept(written)) {
		got := make([]string, len(hist))
		for i, e := range hist {
			got[i] = strconv.Quote(e.By)
		}
		c.fail(rule, `want By "", "alice@example.com", "ops: bob", "carol"; got [%s], %v`, strings.Join(got, ", "), err)
	}
}

// subjects lists the subjects of h for a failure message.
func subjects(h []converge.HistoryEntry) string {
	var b strings.Builder
	b.WriteByte('[')
	for i, e := range h {
		if i > 0 {
			b.WriteString(", ")
		}
		if e.Subject == nil {
			b.WriteString("nil")
		} else {
			fmt.Fprintf(&b, "%+v", *e.Subject)
		}
	}
	b.WriteByte(']')
	return b.String()
}

func (c *storeConformer) list() {
	for _, name := range []string{"list/b", "list/a", "list-other/c", "lis"} {
		if _, ok := c.put("list", c.k(name), 0, `0`); !ok {
			return
		}
	}
	recs, err := c.s.List(c.ctx, c.k("list/"))
	var keys []string
	for _, r := range recs {
		keys = append(keys, r.Key)
	}
	if err != nil || !slices.Equal(keys, []string{c.k("list/a"), c.k("list/b")}) {
		c.fail("list", "want [list/a list/b] sorted, got %v, %v", keys, err)
	}
}

func (c *storeConformer) targets() {
	name := c.k("device")
	if _, _, err := c.s.Target(c.ctx, name); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail("target", "missing: want ErrStoreNotFound, got %v", err)
	}
	var last uint64
	for _, v := range []string{`{"v":1}`, `{"v":2}`} {
		rev, err := c.s.PutTarget(c.ctx, name, json.RawMessage(v))
		if err != nil {
			c.fail("target", "put: %v", err)
			return
		}
		if rev <= last {
			c.fail("target", "put %s: revision %d after %d, want it to grow", v, rev, last)
		}
		last = rev
	}
	if got, rev, err := c.s.Target(c.ctx, name); err != nil || !jsonEqual(got, `{"v":2}`) || rev != last {
		c.fail("target", "want the last one at revision %d, got %s at %d, %v", last, got, rev, err)
	}
	c.targetRevisions(name, last)
	c.concurrentTargets()
}

// targetRevisions checks PutTarget without a target on name, whose last
// target is {"v":2} at revision stored, and on a name with no target.
func (c *storeConformer) targetRevisions(name string, stored uint64) {
	const rule = "target revision"
	reserved, err := c.s.PutTarget(c.ctx, name, nil)
	if err != nil {
		c.fail(rule, "without a target: %v", err)
		return
	}
	if reserved <= stored {
		c.fail(rule, "without a target: revision %d after %d, want it to grow", reserved, stored)
	}
	if got, rev, err := c.s.Target(c.ctx, name); err != nil || !jsonEqual(got, `{"v":2}`) || rev != stored {
		c.fail(rule, "without a target: want the stored target kept at revision %d, got %s at %d, %v", stored, got, rev, err)
	}
	if rev, err := c.s.PutTarget(c.ctx, name, json.RawMessage(`{"v":3}`)); err != nil || rev <= reserved {
		c.fail(rule, "after a revision without a target: want a revision above %d, got %d, %v", reserved, rev, err)
	}
	empty := c.k("device-none")
	r1, err := c.s.PutTarget(c.ctx, empty, nil)
	if err != nil || r1 == 0 {
		c.fail(rule, "first revision of a name without a target: got %d, %v", r1, err)
		return
	}
	if _, _, err := c.s.Target(c.ctx, empty); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail(rule, "name with revisions but no target: want ErrStoreNotFound, got %v", err)
	}
	if r2, err := c.s.PutTarget(c.ctx, empty, json.RawMessage(`1`)); err != nil || r2 <= r1 {
		c.fail(rule, "first target after a revision without one: want a revision above %d, got %d, %v", r1, r2, err)
	}
}

// concurrentTargets stores targets under one name from 8 goroutines.
func (c *storeConformer) concurrentTargets() {
	const rule, writers, each = "concurrent targets", 8, 5
	name := c.k("device-shared")
	var (
		mu   sync.Mutex
		seen = map[uint64]string{}
		wg   sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				v := fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)
				rev, err := c.s.PutTarget(c.ctx, name, json.RawMessage(v))
				if err != nil {
					c.fail(rule, "put: %v", err)
					return
				}
				mu.Lock()
				if prev, dup := seen[rev]; dup {
					c.fail(rule, "revision %d given to %s and %s", rev, prev, v)
				}
				seen[rev] = v
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var top uint64
	for rev := range seen {
		top = max(top, rev)
	}
	if got, rev, err := c.s.Target(c.ctx, name); err != nil || rev != top || !jsonEqual(got, seen[top]) {
		c.fail(rule, "want %s at revision %d (the highest), got %s at %d, %v", seen[top], top, got, rev, err)
	}
}

func (c *storeConformer) claims() {
	key := c.k("claim/a")
	a, err := c.s.Claim(c.ctx, key, "owner-a", time.Minute)
	if err != nil {
		c.fail("claim", "free key: %v", err)
		return
	}
	var ce *converge.ClaimError
	if _, err := c.s.Claim(c.ctx, key, "owner-b", time.Minute); !errors.As(err, &ce) || !errors.Is(err, converge.ErrClaimHeld) {
		c.fail("claim", "held key: want *ClaimError, got %v", err)
	}
	if a2, err := c.s.Claim(c.ctx, key, "owner-a", time.Minute); err != nil || a2.Token != a.Token {
		c.fail("claim", "renewal: want token %d, got %d, %v", a.Token, a2.Token, err)
	}
	if err := c.s.Release(c.ctx, a); err != nil {
		c.fail("release", "%v", err)
	}
	if err := c.s.Release(c.ctx, a); !errors.Is(err, converge.ErrLeaseLost) {
		c.fail("release", "twice: want ErrLeaseLost, got %v", err)
	}
	b, err := c.s.Claim(c.ctx, key, "owner-b", time.Minute)
	if err != nil {
		c.fail("claim", "released key: %v", err)
		return
	}
	if b.Token <= a.Token {
		c.fail("claim", "a claim after a release got token %d, not above the released %d", b.Token, a.Token)
	}
	if err := c.s.Release(c.ctx, b); err != nil {
		c.fail("release", "%v", err)
	}
	if c.opts.Wait == nil {
		return
	}
	short, err := c.s.Claim(c.ctx, key, "owner-a", time.Second)
	if err != nil {
		c.fail("claim", "released key: %v", err)
		return
	}
	c.opts.Wait(2 * time.Second)
	taken, err := c.s.Claim(c.ctx, key, "owner-b", time.Minute)
	if err != nil {
		c.fail("claim", "expired lease: want it taken over, got %v", err)
		return
	}
	if taken.Token <= short.Token {
		c.fail("claim", "new owner of an expired lease got token %d, not above %d", taken.Token, short.Token)
	}
	if err := c.s.Release(c.ctx, short); !errors.Is(err, converge.ErrLeaseLost) {
		c.fail("release", "expired lease: want ErrLeaseLost, got %v", err)
	}
	if err := c.s.Release(c.ctx, taken); err != nil {
		c.fail("release", "%v", err)
	}
}

// fencedPut writes with a token and reports whether the write matched
// ErrLeaseLost and wrote nothing (value, version and history unchanged).
func (c *storeConformer) fencedPutRefused(what, key string, version uint64, token uint64) {
	before, getErr := c.s.Get(c.ctx, key)
	hist, _ := c.s.History(c.ctx, key)
	_, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key, Version: version, Value: json.RawMessage(`"fenced"`), Token: token}, c.h(99, "fenced"))
	if !errors.Is(err, converge.ErrLeaseLost) {
		c.fail("fencing", "%s token: want ErrLeaseLost, got %v", what, err)
	}
	after, afterErr := c.s.Get(c.ctx, key)
	if (getErr == nil) != (afterErr == nil) || after.Version != before.Version || !slices.Equal(after.Value, before.Value) {
		c.fail("fencing", "%s token: the refused write changed the record: %d %s (%v) became %d %s (%v)", what, before.Version, before.Value, getErr, after.Version, after.Value, afterErr)
	}
	if h2, err := c.s.History(c.ctx, key); err != nil || len(h2) != len(hist) {
		c.fail("fencing", "%s token: the refused write changed the history: %d entries became %d, %v", what, len(hist), len(h2), err)
	}
}

func (c *storeConformer) fencing() {
	key := c.k("fence/a")
	v, ok := c.put("fencing", key, 0, `0`)
	if !ok {
		return
	}
	la, err := c.s.Claim(c.ctx, key, "owner-a", time.Minute)
	if err != nil {
		c.fail("fencing", "claim: %v", err)
		return
	}
	v, err = c.s.Put(c.ctx, converge.StoreRecord{Key: key, Version: v, Value: json.RawMessage(`1`), Token: la.Token})
	if err != nil {
		c.fail("fencing", "current token: %v", err)
		return
	}
	if err := c.s.Release(c.ctx, la); err != nil {
		c.fail("fencing", "release: %v", err)
		return
	}
	c.fencedPutRefused("released", key, v, la.Token)
	lb, err := c.s.Claim(c.ctx, key, "owner-b", time.Minute)
	if err != nil {
		c.fail("fencing", "claim by another owner: %v", err)
		return
	}
	c.fencedPutRefused("stale", key, v, la.Token)
	if _, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key, Version: v, Value: json.RawMessage(`2`), Token: lb.Token}); err != nil {
		c.fail("fencing", "the new owner's token: %v", err)
	}
	if err := c.s.Release(c.ctx, lb); err != nil {
		c.fail("fencing", "release: %v", err)
	}
	c.fencedPutRefused("never held", c.k("fence/new"), 0, lb.Token+1_000_000)

	// A record created under a lease.
	lc, err := c.s.Claim(c.ctx, c.k("fence/c"), "owner-c", time.Minute)
	if err != nil {
		c.fail("fencing", "claim: %v", err)
		return
	}
	if _, err := c.s.Put(c.ctx, converge.StoreRecord{Key: c.k("fence/c"), Value: json.RawMessage(`0`), Token: lc.Token}); err != nil {
		c.fail("fencing", "create with the current token: %v", err)
	}
	if c.opts.Wait == nil {
		return
	}
	ld, err := c.s.Claim(c.ctx, c.k("fence/d"), "owner-d", time.Second)
	if err != nil {
		c.fail("fencing", "claim: %v", err)
		return
	}
	c.opts.Wait(2 * time.Second)
	c.fencedPutRefused("expired", c.k("fence/d"), 0, ld.Token)
}

// keptEntries is how many of n entries written to one key the retention
// keeps by count.
func (c *storeConformer) keptEntries(n int) int {
	keep := c.opts.Retention.Entries
	if keep == 0 {
		keep = converge.DefaultHistoryEntries
	}
	if keep < 0 || n < keep {
		return n
	}
	return keep
}

// kept returns the entries of written the retention keeps by count.
func (c *storeConformer) kept(written []converge.HistoryEntry) []converge.HistoryEntry {
	return written[len(written)-c.keptEntries(len(written)):]
}

func (c *storeConformer) retention() {
	c.retentionCount()
	if c.opts.Retention.Age > 0 {
		c.retentionOldEntries()
		c.retentionAging()
	}
}

func (c *storeConformer) retentionCount() {
	// Write more entries than kept (or than the default when all are
	// kept), in writes of 7 entries so that some writes cross the limit.
	n := c.opts.Retention.Entries
	if n <= 0 {
		n = converge.DefaultHistoryEntries
	}
	n += 9
	key := c.k("retention/count")
	var written []converge.HistoryEntry
	var v uint64
	for len(written) < n {
		batch := make([]converge.HistoryEntry, 0, 7)
		for i := len(written); i < n && len(batch) < 7; i++ {
			batch = append(batch, c.h(i, strconv.Itoa(i)))
		}
		var ok bool
		if v, ok = c.put("retention", key, v, strconv.Itoa(len(written)), batch...); !ok {
			return
		}
		written = append(written, batch...)
	}
	got, err := c.s.History(c.ctx, key)
	if err != nil {
		c.fail("retention", "history: %v", err)
		return
	}
	want := c.kept(written)
	if !historyEqual(got, want) {
		c.fail("retention", "after %d entries with %+v: want the newest %d in order, got %d entries from %q to %q",
			len(written), c.opts.Retention, len(want), len(got), firstTo(got), lastTo(got))
	}
}

func firstTo(h []converge.HistoryEntry) string {
	if len(h) == 0 {
		return ""
	}
	return h[0].To
}

func lastTo(h []converge.HistoryEntry) string {
	if len(h) == 0 {
		return ""
	}
	return h[len(h)-1].To
}

func (c *storeConformer) retentionOldEntries() {
	// Entries dated before the bound are old when written and only grow
	// older; fresh is dated ahead (c.h), so it stays younger than Age.
	old := time.Now().UTC().Truncate(time.Millisecond).Add(-c.opts.Retention.Age - time.Hour)
	entry := func(at time.Time, to string) converge.HistoryEntry { return converge.HistoryEntry{At: at, To: to} }
	fresh := c.h(0, "fresh")

	key := c.k("retention/age")
	v, ok := c.put("retention", key, 0, `1`, entry(old, "old1"), entry(old.Add(time.Millisecond), "old2"), fresh)
	if !ok {
		return
	}
	if got, err := c.s.History(c.ctx, key); err != nil || !historyEqual(got, []converge.HistoryEntry{fresh}) {
		c.fail("retention", "entries older than Age %s: want only the fresh one kept, got %v, %v", c.opts.Retention.Age, got, err)
	}
	if _, ok := c.put("retention", key, v, `2`, entry(old, "old3")); !ok {
		return
	}
	if got, err := c.s.History(c.ctx, key); err != nil || !historyEqual(got, []converge.HistoryEntry{fresh, entry(old, "old3")}) {
		c.fail("retention", "an old newest entry: want it kept after the fresh one, got %v, %v", got, err)
	}

	key = c.k("retention/all-old")
	if _, ok := c.put("retention", key, 0, `1`, entry(old, "old1"), entry(old.Add(time.Millisecond), "old2")); !ok {
		return
	}
	if got, err := c.s.History(c.ctx, key); err != nil || !historyEqual(got, []converge.HistoryEntry{entry(old.Add(time.Millisecond), "old2")}) {
		c.fail("retention", "only old entries: want the newest kept, got %v, %v", got, err)
	}
}

func (c *storeConformer) retentionAging() {
	if c.opts.Wait == nil {
		return
	}
	key := c.k("retention/aging")
	first := converge.HistoryEntry{At: time.Now().UTC().Truncate(time.Millisecond), To: "first"}
	v, ok := c.put("retention", key, 0, `1`, first)
	if !ok {
		return
	}
	c.opts.Wait(c.opts.Retention.Age + c.opts.Retention.Age/2 + time.Second)
	second := converge.HistoryEntry{At: time.Now().UTC().Truncate(time.Millisecond), To: "second"}
	if _, ok := c.put("retention", key, v, `2`, second); !ok {
		return
	}
	if got, err := c.s.History(c.ctx, key); err != nil || !historyEqual(got, []converge.HistoryEntry{second}) {
		c.fail("retention", "an entry that grew older than Age %s: want it dropped, got %v, %v", c.opts.Retention.Age, got, err)
	}
}

func (c *storeConformer) cancellation() {
	const rule = "cancellation"
	live := c.ctx
	ctx, cancel := context.WithCancel(live)
	cancel()
	canceled := func(what string, err error) {
		if !errors.Is(err, context.Canceled) {
			c.fail(rule, "%s: want context.Canceled, got %v", what, err)
		}
	}
	key := c.k("cancel/a")
	v, ok := c.put(rule, key, 0, `1`, c.h(1, "one"))
	if !ok {
		return
	}
	trev, err := c.s.PutTarget(live, c.k("cancel/t"), json.RawMessage(`1`))
	if err != nil {
		c.fail(rule, "put target: %v", err)
		return
	}
	held, err := c.s.Claim(live, c.k("cancel/held"), "owner-a", time.Minute)
	if err != nil {
		c.fail(rule, "claim: %v", err)
		return
	}

	_, err = c.s.Get(ctx, key)
	canceled("Get", err)
	_, err = c.s.List(ctx, c.k("cancel/"))
	canceled("List", err)
	_, err = c.s.History(ctx, key)
	canceled("History", err)
	_, _, err = c.s.Target(ctx, c.k("cancel/t"))
	canceled("Target", err)

	_, err = c.s.Put(ctx, converge.StoreRecord{Key: c.k("cancel/new"), Value: json.RawMessage(`1`)})
	canceled("Put (create)", err)
	if _, err := c.s.Get(live, c.k("cancel/new")); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail(rule, "Put (create) wrote the record: %v", err)
	}
	_, err = c.s.Put(ctx, converge.StoreRecord{Key: key, Version: v, Value: json.RawMessage(`2`)}, c.h(2, "two"))
	canceled("Put (update)", err)
	err = c.s.Delete(ctx, key, v, c.h(3, ""))
	canceled("Delete", err)
	if rec, err := c.s.Get(live, key); err != nil || rec.Version != v || !jsonEqual(rec.Value, `1`) {
		c.fail(rule, "Put or Delete changed the record: %d %s, %v", rec.Version, rec.Value, err)
	}
	if hist, err := c.s.History(live, key); err != nil || !historyEqual(hist, []converge.HistoryEntry{c.h(1, "one")}) {
		c.fail(rule, "Put or Delete changed the history: %v, %v", hist, err)
	}
	_, err = c.s.PutTarget(ctx, c.k("cancel/t"), json.RawMessage(`2`))
	canceled("PutTarget", err)
	_, err = c.s.PutTarget(ctx, c.k("cancel/t"), nil)
	canceled("PutTarget without a target", err)
	if got, rev, err := c.s.Target(live, c.k("cancel/t")); err != nil || !jsonEqual(got, `1`) || rev != trev {
		c.fail(rule, "PutTarget changed the target: %s at revision %d, %v", got, rev, err)
	}
	if rev, err := c.s.PutTarget(live, c.k("cancel/t"), json.RawMessage(`3`)); err != nil || rev <= trev {
		c.fail(rule, "after a cancelled PutTarget: want a revision above %d, got %d, %v", trev, rev, err)
	}
	_, err = c.s.Claim(ctx, c.k("cancel/free"), "owner-b", time.Minute)
	canceled("Claim", err)
	if l, err := c.s.Claim(live, c.k("cancel/free"), "owner-c", time.Minute); err != nil {
		c.fail(rule, "Claim wrote a lease: %v", err)
	} else {
		_ = c.s.Release(live, l)
	}
	canceled("Release", c.s.Release(ctx, held))
	if _, err := c.s.Claim(live, c.k("cancel/held"), "owner-b", time.Minute); !errors.Is(err, converge.ErrClaimHeld) {
		c.fail(rule, "Release released the lease: want ErrClaimHeld for another owner, got %v", err)
	}
	_ = c.s.Release(live, held)

	if c.q == nil {
		return
	}
	_, err = c.q.ClaimDue(ctx, c.k("cancel/"), "owner-b", time.Minute, 10)
	canceled("ClaimDue", err)
	got, err := c.q.ClaimDue(live, c.k("cancel/"), "owner-a", time.Minute, 10)
	if err != nil || len(got) != 1 {
		c.fail(rule, "ClaimDue claimed the record: want it claimable, got %v, %v", claimedKeys(got), err)
		return
	}
	lease := got[0].Lease
	canceled("Finish", c.q.Finish(ctx, lease, time.Time{}))
	if _, err := c.s.Claim(live, key, "owner-b", time.Minute); !errors.Is(err, converge.ErrClaimHeld) {
		c.fail(rule, "Finish released the lease: want ErrClaimHeld for another owner, got %v", err)
	}
	if err := c.q.Finish(live, lease, time.Time{}); err != nil {
		c.fail(rule, "finish: %v", err)
		return
	}
	canceled("Schedule", c.q.Schedule(ctx, key, c.t0.Add(-time.Hour)))
	if got, err := c.q.ClaimDue(live, c.k("cancel/"), "owner-a", time.Minute, 10); err != nil || len(got) != 0 {
		c.fail(rule, "Schedule made the record due: got %v, %v", claimedKeys(got), err)
		c.finishAll(rule, got)
	}
	stop, err := c.q.Watch(ctx, c.k("cancel/"), func(string) {})
	canceled("Watch", err)
	if stop != nil {
		stop()
	}
}

func (c *storeConformer) concurrentWriters() {
	const rule = "concurrent writers"
	const writers, writes = 8, 20
	key := c.k("concurrent/n")
	if _, ok := c.put(rule, key, 0, `0`); !ok {
		return
	}
	var acked atomic.Int64
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for done, tries := 0, 0; done < writes; tries++ {
				if tries > 100*writers*writes {
					c.fail(rule, "no progress after %d tries", tries)
					return
				}
				rec, err := c.s.Get(c.ctx, key)
				if err != nil {
					c.fail(rule, "get: %v", err)
					return
				}
				n, err := strconv.Atoi(string(rec.Value))
				if err != nil {
					c.fail(rule, "get: value %s: %v", rec.Value, err)
					return
				}
				next := strconv.Itoa(n + 1)
				rec.Value = json.RawMessage(next)
				_, err = c.s.Put(c.ctx, rec, c.h(n+1, next))
				if errors.Is(err, converge.ErrStoreStale) {
					continue
				}
				if err != nil {
					c.fail(rule, "put: %v", err)
					return
				}
				acked.Add(1)
				done++
			}
		})
	}
	wg.Wait()
	n := int(acked.Load())
	rec, err := c.s.Get(c.ctx, key)
	if err != nil || string(rec.Value) != strconv.Itoa(n) || rec.Version != uint64(n)+1 {
		c.fail(rule, "after %d acknowledged writes: want value %d at version %d, got %s at %d, %v", n, n, n+1, rec.Value, rec.Version, err)
	}
	hist, err := c.s.History(c.ctx, key)
	if err != nil {
		c.fail(rule, "history: %v", err)
		return
	}
	kept := c.keptEntries(n)
	tos := make([]string, len(hist))
	for i, e := range hist {
		tos[i] = e.To
	}
	want := make([]string, 0, kept)
	for i := n - kept + 1; i <= n; i++ {
		want = append(want, strconv.Itoa(i))
	}
	if !slices.Equal(tos, want) {
		c.fail(rule, "after %d acknowledged writes: want one history entry per write, %d kept, in order; got %d entries from %q to %q",
			n, kept, len(hist), firstTo(hist), lastTo(hist))
	}
}

func (c *storeConformer) invalidInput() {
	const rule = "invalid input"
	key := c.k("invalid/a")
	calls := []struct {
		what  string
		call  func() error
		queue bool
	}{
		{"Put with an empty key", func() error {
			_, err := c.s.Put(c.ctx, converge.StoreRecord{Value: json.RawMessage(`1`)})
			return err
		}, false},
		{"Put of a value that is not JSON", func() error {
			_, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`{"a":`)}, c.h(1, "x"))
			return err
		}, false},
		{"Put of an empty value", func() error {
			_, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key})
			return err
		}, false},
		{"PutTarget of a target that is not JSON", func() error {
			_, err := c.s.PutTarget(c.ctx, c.k("invalid/t"), json.RawMessage(`nope`))
			return err
		}, false},
		{"Claim with an empty key", func() error { _, err := c.s.Claim(c.ctx, "", "owner-a", time.Minute); return err }, false},
		{"Claim with an empty owner", func() error { _, err := c.s.Claim(c.ctx, key, "", time.Minute); return err }, false},
		{"Claim for a zero duration", func() error { _, err := c.s.Claim(c.ctx, key, "owner-a", 0); return err }, false},
		{"ClaimDue with an empty owner", func() error {
			_, err := c.q.ClaimDue(c.ctx, key, "", time.Minute, 1)
			return err
		}, true},
		{"ClaimDue for a negative duration", func() error {
			_, err := c.q.ClaimDue(c.ctx, key, "owner-a", -time.Second, 1)
			return err
		}, true},
		{"ClaimDue with a zero limit", func() error {
			_, err := c.q.ClaimDue(c.ctx, key, "owner-a", time.Minute, 0)
			return err
		}, true},
	}
	for _, tc := range calls {
		if tc.queue && c.q == nil {
			continue
		}
		err := tc.call()
		var re *converge.StoreRequestError
		if !errors.As(err, &re) || !errors.Is(err, converge.ErrStoreInvalid) {
			c.fail(rule, "%s: want *StoreRequestError, got %v", tc.what, err)
		}
	}
	if _, err := c.s.Get(c.ctx, key); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail(rule, "an invalid Put wrote the record: %v", err)
	}
	if hist, err := c.s.History(c.ctx, key); err != nil || len(hist) != 0 {
		c.fail(rule, "an invalid Put wrote history: %v, %v", hist, err)
	}
	if _, _, err := c.s.Target(c.ctx, c.k("invalid/t")); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail(rule, "an invalid PutTarget wrote the target: %v", err)
	}
	if l, err := c.s.Claim(c.ctx, key, "owner-b", time.Minute); err != nil {
		c.fail(rule, "an invalid Claim took the key: %v", err)
	} else {
		_ = c.s.Release(c.ctx, l)
	}
}

func claimedKeys(cl []converge.Claimed) []string {
	keys := make([]string, len(cl))
	for i, x := range cl {
		keys[i] = x.Record.Key
	}
	return keys
}

// finishAll finishes the leases of cl, not due again.
func (c *storeConformer) finishAll(rule string, cl []converge.Claimed) {
	for _, x := range cl {
		if err := c.q.Finish(c.ctx, x.Lease, time.Time{}); err != nil {
			c.fail(rule, "finish %q: %v", x.Record.Key, err)
		}
	}
}

// claimDue claims for owner with a one-minute lease.
func (c *storeConformer) claimDue(rule, prefix, owner string, limit int) ([]converge.Claimed, bool) {
	got, err := c.q.ClaimDue(c.ctx, prefix, owner, time.Minute, limit)
	if err != nil {
		c.fail(rule, "claim due under %q: %v", prefix, err)
		return nil, false
	}
	return got, true
}

// expectClaimed claims under prefix for owner and checks the keys (names
// under the run's Prefix) in order, finishing the leases (not due again)
// when finish is set.
func (c *storeConformer) expectClaimed(rule, what, prefix, owner string, limit int, names []string, finish bool) []converge.Claimed {
	got, ok := c.claimDue(rule, prefix, owner, limit)
	if !ok {
		return nil
	}
	want := make([]string, len(names))
	for i, n := range names {
		want[i] = c.k(n)
	}
	if keys := claimedKeys(got); !slices.Equal(keys, want) {
		c.fail(rule, "%s: want %v claimed, got %v", what, want, keys)
	}
	if finish {
		c.finishAll(rule, got)
	}
	return got
}

func (c *storeConformer) queueNewDue() {
	const rule = "queue: new records due"
	prefix := c.k("qnew/")
	values := map[string]string{"qnew/a": `{"a":1}`, "qnew/b": `"b"`}
	versions := map[string]uint64{}
	for _, name := range []string{"qnew/a", "qnew/b"} {
		v, ok := c.put(rule, c.k(name), 0, values[name])
		if !ok {
			return
		}
		versions[c.k(name)] = v
	}
	before := time.Now()
	got, ok := c.claimDue(rule, prefix, "owner-a", 10)
	if !ok {
		return
	}
	slices.SortFunc(got, func(a, b converge.Claimed) int { return strings.Compare(a.Record.Key, b.Record.Key) })
	if keys := claimedKeys(got); !slices.Equal(keys, []string{c.k("qnew/a"), c.k("qnew/b")}) {
		c.fail(rule, "want both new records claimed, got %v", keys)
	}
	for _, x := range got {
		name := x.Record.Key[len(c.opts.Prefix):]
		if x.Record.Version != versions[x.Record.Key] || !jsonEqual(x.Record.Value, values[name]) {
			c.fail(rule, "%q: want version %d %s, got %d %s", x.Record.Key, versions[x.Record.Key], values[name], x.Record.Version, x.Record.Value)
		}
		l := x.Lease
		if l.Key != x.Record.Key || l.Owner != "owner-a" || l.Token == 0 || !l.Expires.After(before) {
			c.fail(rule, "%q: want a lease to owner-a with a token, expiring after now, got %+v", x.Record.Key, l)
		}
	}
	c.finishAll(rule, got)
	c.expectClaimed(rule, "after Finish with the zero time", prefix, "owner-a", 10, nil, true)

	// A write to an existing record does not make it due.
	if _, ok := c.put(rule, c.k("qnew/a"), versions[c.k("qnew/a")], `{"a":2}`); !ok {
		return
	}
	c.expectClaimed(rule, "after an update", prefix, "owner-a", 10, nil, true)

	// A deleted record is not due; created again, it is.
	v, ok := c.put(rule, c.k("qnew/d"), 0, `1`)
	if !ok {
		return
	}
	if err := c.s.Delete(c.ctx, c.k("qnew/d"), v); err != nil {
		c.fail(rule, "delete: %v", err)
		return
	}
	c.expectClaimed(rule, "after Delete", prefix, "owner-a", 10, nil, true)
	if _, ok := c.put(rule, c.k("qnew/d"), 0, `2`); !ok {
		return
	}
	c.expectClaimed(rule, "a record created again", prefix, "owner-a", 10, []string{"qnew/d"}, true)
}

func (c *storeConformer) queueOrder() {
	const rule = "queue: claim order"
	base := time.Now()
	for _, name := range []string{"qorder/a", "qorder/b", "qorder/c", "qorder-other/x"} {
		if _, ok := c.put(rule, c.k(name), 0, `0`); !ok {
			return
		}
	}
	for name, at := range map[string]time.Time{
		"qorder/a": base.Add(-3 * time.Hour), "qorder/b": base.Add(-time.Hour), "qorder/c": base.Add(-2 * time.Hour),
		"qorder-other/x": base.Add(-4 * time.Hour),
	} {
		if err := c.q.Schedule(c.ctx, c.k(name), at); err != nil {
			c.fail(rule, "schedule %q: %v", name, err)
			return
		}
	}
	prefix := c.k("qorder/")
	c.expectClaimed(rule, "limit 2, earliest first", prefix, "owner-a", 2, []string{"qorder/a", "qorder/c"}, true)
	c.expectClaimed(rule, "the rest", prefix, "owner-a", 2, []string{"qorder/b"}, true)
	c.expectClaimed(rule, "nothing left", prefix, "owner-a", 2, nil, true)
	c.expectClaimed(rule, "the other prefix", c.k("qorder-other/"), "owner-a", 2, []string{"qorder-other/x"}, true)
}

func (c *storeConformer) queueSchedule() {
	const rule = "queue: schedule"
	if err := c.q.Schedule(c.ctx, c.k("qsched/missing"), time.Now()); !errors.Is(err, converge.ErrStoreNotFound) {
		c.fail(rule, "missing key: want ErrStoreNotFound, got %v", err)
	}
	key, prefix := c.k("qsched/a"), c.k("qsched/")
	if _, ok := c.put(rule, key, 0, `0`); !ok {
		return
	}
	c.expectClaimed(rule, "a new record", prefix, "owner-a", 10, []string{"qsched/a"}, true)
	base := time.Now()
	if err := c.q.Schedule(c.ctx, key, base.Add(time.Hour)); err != nil {
		c.fail(rule, "schedule: %v", err)
		return
	}
	c.expectClaimed(rule, "scheduled in an hour", prefix, "owner-a", 10, nil, true)
	for _, at := range []time.Time{base.Add(-time.Hour), base.Add(2 * time.Hour)} {
		if err := c.q.Schedule(c.ctx, key, at); err != nil {
			c.fail(rule, "schedule: %v", err)
			return
		}
	}
	c.expectClaimed(rule, "scheduled an hour ago, then later", prefix, "owner-a", 10, []string{"qsched/a"}, true)
	if err := c.q.Schedule(c.ctx, key, time.Time{}); err != nil {
		c.fail(rule, "schedule at the zero time: %v", err)
		return
	}
	c.expectClaimed(rule, "scheduled at the zero time (at once)", prefix, "owner-a", 10, []string{"qsched/a"}, true)
}

func (c *storeConformer) queueExclusive() {
	const rule = "queue: exclusive claims"
	prefix := c.k("qexcl/")
	for _, name := range []string{"qexcl/a", "qexcl/b"} {
		if _, ok := c.put(rule, c.k(name), 0, `0`); !ok {
			return
		}
	}
	// Tokens are per key: two keys may share one.
	got := c.expectClaimed(rule, "owner-a", prefix, "owner-a", 10, []string{"qexcl/a", "qexcl/b"}, false)
	c.expectClaimed(rule, "owner-b while owner-a holds them", prefix, "owner-b", 10, nil, true)
	if _, err := c.s.Claim(c.ctx, c.k("qexcl/a"), "owner-b", time.Minute); !errors.Is(err, converge.ErrClaimHeld) {
		c.fail(rule, "Claim by owner-b of a record owner-a claimed: want ErrClaimHeld, got %v", err)
	}
	c.finishAll(rule, got)
}

func (c *storeConformer) queueConcurrentClaims() {
	const rule = "queue: concurrent claims"
	const records, claimers = 40, 8
	prefix := c.k("qconc/")
	for i := range records {
		if _, ok := c.put(rule, c.k(fmt.Sprintf("qconc/%02d", i)), 0, `0`); !ok {
			return
		}
	}
	var mu sync.Mutex
	var all []converge.Claimed
	var wg sync.WaitGroup
	for w := range claimers {
		wg.Go(func() {
			for range records {
				got, err := c.q.ClaimDue(c.ctx, prefix, fmt.Sprintf("owner-%d", w), time.Minute, 3)
				if err != nil {
					c.fail(rule, "claim due: %v", err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				all = append(all, got...)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	count := map[string]int{}
	for _, x := range all {
		count[x.Record.Key]++
	}
	for key, n := range count {
		if n > 1 {
			c.fail(rule, "%q claimed %d times", key, n)
		}
	}
	if len(count) != records {
		c.fail(rule, "want all %d records claimed once, got %d", records, len(count))
	}
	c.finishAll(rule, all)
}

func (c *storeConformer) queueScheduleDuringClaim() {
	const rule = "queue: schedule during claim"
	key, prefix := c.k("qdur/a"), c.k("qdur/")
	if _, ok := c.put(rule, key, 0, `0`); !ok {
		return
	}
	got := c.expectClaimed(rule, "a new record", prefix, "owner-a", 10, []string{"qdur/a"}, false)
	if len(got) != 1 {
		return
	}
	base := time.Now()
	if err := c.q.Schedule(c.ctx, key, base.Add(-time.Hour)); err != nil {
		c.fail(rule, "schedule: %v", err)
		return
	}
	c.expectClaimed(rule, "scheduled while claimed", prefix, "owner-b", 10, nil, true)
	if err := c.q.Finish(c.ctx, got[0].Lease, base.Add(time.Hour)); err != nil {
		c.fail(rule, "finish: %v", err)
		return
	}
	got = c.expectClaimed(rule, "Finish after a Schedule during the claim", prefix, "owner-b", 10, []string{"qdur/a"}, false)
	if len(got) != 1 {
		return
	}
	if err := c.q.Finish(c.ctx, got[0].Lease, base.Add(-time.Minute)); err != nil {
		c.fail(rule, "finish: %v", err)
		return
	}
	c.expectClaimed(rule, "Finish with a past time", prefix, "owner-a", 10, []string{"qdur/a"}, true)
	c.expectClaimed(rule, "Finish with the zero time", prefix, "owner-a", 10, nil, true)
}

func (c *storeConformer) queueStaleFinish() {
	const rule = "queue: stale finish"
	key, prefix := c.k("qstale/a"), c.k("qstale/")
	if _, ok := c.put(rule, key, 0, `0`); !ok {
		return
	}
	got := c.expectClaimed(rule, "a new record", prefix, "owner-a", 10, []string{"qstale/a"}, false)
	if len(got) != 1 {
		return
	}
	l1 := got[0].Lease
	if err := c.q.Finish(c.ctx, l1, time.Time{}); err != nil {
		c.fail(rule, "finish: %v", err)
		return
	}
	if err := c.q.Finish(c.ctx, l1, time.Now().Add(-time.Hour)); !errors.Is(err, converge.ErrLeaseLost) {
		c.fail(rule, "finished lease: want ErrLeaseLost, got %v", err)
	}
	c.expectClaimed(rule, "after a refused Finish", prefix, "owner-a", 10, nil, true)

	if err := c.q.Schedule(c.ctx, key, time.Now().Add(-time.Hour)); err != nil {
		c.fail(rule, "schedule: %v", err)
		return
	}
	got = c.expectClaimed(rule, "scheduled", prefix, "owner-a", 10, []string{"qstale/a"}, false)
	if len(got) != 1 {
		return
	}
	l2 := got[0].Lease
	for what, forged := range map[string]converge.Lease{
		"another owner": {Key: l2.Key, Owner: "owner-b", Expires: l2.Expires, Token: l2.Token},
		"another token": {Key: l2.Key, Owner: l2.Owner, Expires: l2.Expires, Token: l2.Token + 1_000_000},
		"the old token": {Key: l2.Key, Owner: l2.Owner, Expires: l2.Expires, Token: l1.Token},
	} {
		if err := c.q.Finish(c.ctx, forged, time.Now().Add(-time.Hour)); !errors.Is(err, converge.ErrLeaseLost) {
			c.fail(rule, "lease with %s: want ErrLeaseLost, got %v", what, err)
		}
	}
	if _, err := c.s.Claim(c.ctx, key, "owner-b", time.Minute); !errors.Is(err, converge.ErrClaimHeld) {
		c.fail(rule, "a refused Finish released the lease: want ErrClaimHeld for another owner, got %v", err)
	}
	if err := c.q.Finish(c.ctx, l2, time.Time{}); err != nil {
		c.fail(rule, "finish: %v", err)
	}
}

func (c *storeConformer) queueExpiredClaim() {
	const rule = "queue: expired claim"
	if c.opts.Wait == nil {
		return
	}
	key, prefix := c.k("qexp/a"), c.k("qexp/")
	v, ok := c.put(rule, key, 0, `0`)
	if !ok {
		return
	}
	got, err := c.q.ClaimDue(c.ctx, prefix, "owner-a", time.Second, 10)
	if err != nil || len(got) != 1 {
		c.fail(rule, "claim: want the new record, got %v, %v", claimedKeys(got), err)
		return
	}
	la := got[0].Lease
	c.opts.Wait(2 * time.Second)
	got = c.expectClaimed(rule, "owner-b after owner-a's lease expired", prefix, "owner-b", 10, []string{"qexp/a"}, false)
	if len(got) != 1 {
		return
	}
	lb := got[0].Lease
	if lb.Token <= la.Token {
		c.fail(rule, "the new lease has token %d, not above the expired %d", lb.Token, la.Token)
	}
	if err := c.q.Finish(c.ctx, la, time.Time{}); !errors.Is(err, converge.ErrLeaseLost) {
		c.fail(rule, "Finish by the old owner: want ErrLeaseLost, got %v", err)
	}
	c.fencedPutRefused("expired and taken over", key, v, la.Token)
	if _, err := c.s.Put(c.ctx, converge.StoreRecord{Key: key, Version: v, Value: json.RawMessage(`1`), Token: lb.Token}); err != nil {
		c.fail(rule, "write with the new owner's token: %v", err)
	}
	if err := c.q.Finish(c.ctx, lb, time.Time{}); err != nil {
		c.fail(rule, "finish: %v", err)
	}
}

// watchLog records the calls of a watch.
type watchLog struct {
	mu    sync.Mutex
	keys  []string
	calls chan struct{}
}

func newWatchLog() *watchLog { return &watchLog{calls: make(chan struct{}, 1)} }

func (w *watchLog) fn(key string) {
	w.mu.Lock()
	w.keys = append(w.keys, key)
	w.mu.Unlock()
	select {
	case w.calls <- struct{}{}:
	default:
	}
}

// seen reports whether key (or "": everything) was delivered since the
// last reset.
func (w *watchLog) seen(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.keys, key) || slices.Contains(w.keys, "")
}

func (w *watchLog) reset() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := w.keys
	w.keys = nil
	return keys
}

// waitFor waits at most watchTimeout for key to be delivered.
func (w *watchLog) waitFor(key string) bool {
	deadline := time.After(watchTimeout)
	for !w.seen(key) {
		select {
		case <-w.calls:
		case <-deadline:
			return w.seen(key)
		}
	}
	return true
}

func (c *storeConformer) watch() {
	const rule = "watch"
	prefix := c.k("watch/")
	log := newWatchLog()
	stop, err := c.q.Watch(c.ctx, prefix, log.fn)
	if err != nil {
		c.fail(rule, "watch: %v", err)
		return
	}
	defer stop()
	outside := c.k("watchx/a")
	if _, ok := c.put(rule, outside, 0, `0`); !ok {
		return
	}
	key := c.k("watch/a")
	v, ok := c.put(rule, key, 0, `0`)
	if !ok {
		return
	}
	if !log.waitFor(key) {
		c.fail(rule, "a record created right after Watch returned was not seen in %s", watchTimeout)
		return
	}
	if keys := log.reset(); slices.Contains(keys, outside) {
		c.fail(rule, "a key outside the prefix was delivered: %v", keys)
	}
	// An update changes no due time: a store need not announce it (a
	// durable one should not, as announcing costs more than the write).
	// It goes to another key, so that its announcement, if any, cannot
	// answer for the steps below.
	other := c.k("watch/b")
	if ov, ok := c.put(rule, other, 0, `0`); ok {
		if _, err := c.s.Put(c.ctx, converge.StoreRecord{Key: other, Version: ov, Value: json.RawMessage(`1`)}); err != nil {
			c.fail(rule, "update: %v", err)
			return
		}
	}
	steps := []struct {
		what string
		do   func() error
	}{
		{"Schedule", func() error { return c.q.Schedule(c.ctx, key, time.Now().Add(-time.Hour)) }},
		{"Delete", func() error { return c.s.Delete(c.ctx, key, v) }},
	}
	for _, step := range steps {
		if err := step.do(); err != nil {
			c.fail(rule, "%s: %v", step.what, err)
			return
		}
		if !log.waitFor(key) {
			c.fail(rule, "%s of a watched record was not seen in %s", step.what, watchTimeout)
		}
		log.reset()
	}
}

// sync writes key and waits for a fresh watch to see it, so that every
// earlier delivery a working store makes has had its chance.
func (c *storeConformer) syncWatch(rule, prefix, key string) bool {
	log := newWatchLog()
	stop, err := c.q.Watch(c.ctx, prefix, log.fn)
	if err != nil {
		c.fail(rule, "watch: %v", err)
		return false
	}
	defer stop()
	if _, ok := c.put(rule, key, 0, `0`); !ok {
		return false
	}
	if !log.waitFor(key) {
		c.fail(rule, "a write was not seen in %s", watchTimeout)
		return false
	}
	return true
}

func (c *storeConformer) watchStop() {
	const rule = "watch: stop"
	prefix := c.k("wstop/")
	var stopped atomic.Bool
	var late atomic.Int64
	stop, err := c.q.Watch(c.ctx, prefix, func(string) {
		if stopped.Load() {
			late.Add(1)
		}
	})
	if err != nil {
		c.fail(rule, "watch: %v", err)
		return
	}
	if _, ok := c.put(rule, c.k("wstop/a"), 0, `0`); !ok {
		stop()
		return
	}
	stop()
	stopped.Store(true)
	stop() // a second stop is harmless
	if !c.syncWatch(rule, prefix, c.k("wstop/b")) {
		return
	}
	if n := late.Load(); n > 0 {
		c.fail(rule, "fn called %d times after stop returned", n)
	}
}

func (c *storeConformer) watchCancel() {
	const rule = "watch: cancel"
	prefix := c.k("wcancel/")
	ctx, cancel := context.WithCancel(c.ctx)
	defer cancel()
	var cancelled atomic.Bool
	var late atomic.Int64
	stop, err := c.q.Watch(ctx, prefix, func(string) {
		if cancelled.Load() {
			late.Add(1)
		}
	})
	if err != nil {
		c.fail(rule, "watch: %v", err)
		return
	}
	defer stop()
	cancel()
	cancelled.Store(true)
	if !c.syncWatch(rule, prefix, c.k("wcancel/a")) {
		return
	}
	if n := late.Load(); n > 0 {
		c.fail(rule, "fn called %d times after the context was cancelled", n)
	}
}

func (c *storeConformer) watchPeer() {
	const rule = "watch: peer"
	if c.opts.Peer == nil {
		return
	}
	prefix := c.k("wpeer/")
	log := newWatchLog()
	stop, err := c.q.Watch(c.ctx, prefix, log.fn)
	if err != nil {
		c.fail(rule, "watch: %v", err)
		return
	}
	defer stop()
	key := c.k("wpeer/a")
	if _, err := c.opts.Peer.Put(c.ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`0`)}); err != nil {
		c.fail(rule, "put through the peer: %v", err)
		return
	}
	if !log.waitFor(key) {
		c.fail(rule, "a record created through the peer was not seen in %s", watchTimeout)
	}
}

func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	if json.Unmarshal(got, &a) != nil || json.Unmarshal([]byte(want), &b) != nil {
		return false
	}
	return reflect.DeepEqual(a, b)
}

func historyEqual(got, want []converge.HistoryEntry) bool {
	return slices.EqualFunc(got, want, func(a, b converge.HistoryEntry) bool {
		return a.At.Equal(b.At) && a.From == b.From && a.To == b.To && a.Reason == b.Reason && a.By == b.By &&
			(a.Subject == nil) == (b.Subject == nil) && (a.Subject == nil || *a.Subject == *b.Subject)
	})
}

func (c *storeConformer) queueClaimHistory() {
	const rule = "queue: claim history"
	prefix := c.k("qhist/")
	if _, ok := c.put(rule, c.k("qhist/none"), 0, `{}`); !ok {
		return
	}
	var entries []converge.HistoryEntry
	for i := range converge.ClaimHistoryEntries + 3 {
		e := c.h(i, fmt.Sprintf("s%d", i))
		e.From, e.Reason = fmt.Sprintf("s%d", i-1), "because"
		if i%5 == 0 {
			e.Subject = &converge.HistorySubject{Command: i, Group: "g", Host: fmt.Sprintf("h%d", i)}
		}
		entries = append(entries, e)
	}
	v, ok := c.put(rule, c.k("qhist/many"), 0, `{}`, entries[:4]...)
	if !ok {
		return
	}
	if _, ok := c.put(rule, c.k("qhist/many"), v, `{"n":2}`, entries[4:]...); !ok {
		return
	}
	got, ok := c.claimDue(rule, prefix, "owner-h", 10)
	if !ok {
		return
	}
	if len(got) != 2 {
		c.fail(rule, "want 2 records claimed, got %v", claimedKeys(got))
	}
	for _, x := range got {
		all, err := c.s.History(c.ctx, x.Record.Key)
		if err != nil {
			c.fail(rule, "history of %q: %v", x.Record.Key, err)
			continue
		}
		want := all[max(len(all)-converge.ClaimHistoryEntries, 0):]
		if !x.HasHistory || !historyEqual(x.History, want) {
			c.fail(rule, "%q: want the newest %d of its %d history entries with the claim, got HasHistory %v and %d entries %v",
				x.Record.Key, len(want), len(all), x.HasHistory, len(x.History), x.History)
		}
	}
	c.finishAll(rule, got)
}

// holder runs the rule "holder" of a converge.LeaseReader.
func (c *storeConformer) holder(lr converge.LeaseReader) {
	const rule = "holder"
	key := c.k("holder/a")
	if _, ok, err := lr.Holder(c.ctx, key); ok || err != nil {
		c.fail(rule, "a key never claimed: want no holder, got %v, %v", ok, err)
	}
	a, err := c.s.Claim(c.ctx, key, "owner-a", time.Minute)
	if err != nil {
		c.fail(rule, "claim: %v", err)
		return
	}
	got, ok, err := lr.Holder(c.ctx, key)
	if !ok || err != nil || got.Owner != "owner-a" || got.Token != a.Token || got.Key != key || !got.Expires.Equal(a.Expires) {
		c.fail(rule, "a claimed key: want %+v, got %+v, %v, %v", a, got, ok, err)
	}
	if err := c.s.Release(c.ctx, a); err != nil {
		c.fail(rule, "release: %v", err)
	}
	if _, ok, err := lr.Holder(c.ctx, key); ok || err != nil {
		c.fail(rule, "a released key: want no holder, got %v, %v", ok, err)
	}
	if c.opts.Wait == nil {
		return
	}
	if _, err := c.s.Claim(c.ctx, key, "owner-a", time.Second); err != nil {
		c.fail(rule, "claim: %v", err)
		return
	}
	c.opts.Wait(2 * time.Second)
	if _, ok, err := lr.Holder(c.ctx, key); ok || err != nil {
		c.fail(rule, "an expired lease: want no holder, got %v, %v", ok, err)
	}
	if got, err := lr.Leases(c.ctx, c.k("holder/")); len(got) != 0 || err != nil {
		c.fail(rule, "an expired lease: want no leases, got %+v, %v", got, err)
	}
}

// leases runs the rule "leases" of a converge.LeaseReader.
func (c *storeConformer) leases(lr converge.LeaseReader) {
	const rule = "leases"
	prefix := c.k("leases/")
	var held []converge.Lease
	for _, k := range []string{"b", "a", "c"} {
		l, err := c.s.Claim(c.ctx, prefix+k, "owner-"+k, time.Minute)
		if err != nil {
			c.fail(rule, "claim: %v", err)
			return
		}
		held = append(held, l)
	}
	// A key beside the prefix, not under it.
	if _, err := c.s.Claim(c.ctx, c.k("leasesx"), "owner-x", time.Minute); err != nil {
		c.fail(rule, "claim: %v", err)
		return
	}
	if err := c.s.Release(c.ctx, held[2]); err != nil {
		c.fail(rule, "release: %v", err)
	}
	got, err := lr.Leases(c.ctx, prefix)
	if err != nil {
		c.fail(rule, "%v", err)
		return
	}
	want := []converge.Lease{held[1], held[0]} // sorted by key; c released
	if len(got) != len(want) {
		c.fail(rule, "want the leases %+v, got %+v", want, got)
		return
	}
	for i := range want {
		if got[i].Key != want[i].Key || got[i].Owner != want[i].Owner || got[i].Token != want[i].Token || !got[i].Expires.Equal(want[i].Expires) {
			c.fail(rule, "lease %d: want %+v, got %+v", i, want[i], got[i])
		}
	}
	if got, err := lr.Leases(c.ctx, c.k("leases-none/")); len(got) != 0 || err != nil {
		c.fail(rule, "an empty prefix: want none, got %+v, %v", got, err)
	}
}
