package converge

import (
	"context"
	"fmt"
	"math"
	"time"
)

// MaxPriority is the highest priority a record of a Prioritizer may have;
// 0, the default, is the lowest. A day's worth of seconds: see
// PriorityStep.
const MaxPriority = 86400

// PriorityStep is the waiting one priority level is worth: a due record's
// effective priority is its priority plus the number of PrioritySteps
// (seconds) it has been due. Among due records a Prioritizer claims the
// highest effective priority first (the earliest due among equals, then
// the smallest key): a record of priority p due at t goes before a record
// of priority q due at u exactly when t - p·PriorityStep is before
// u - q·PriorityStep.
//
// This ageing is what keeps low priorities from starving: a record of
// priority p that became due at t goes ahead of every record of priority
// q that becomes due after t + (q-p)·PriorityStep, so it waits at most
// that long plus the time the claims take to drain the records ranked
// ahead of it then, however steady the stream of higher work. With every
// priority 0 the order is the due order, as without priorities.
const PriorityStep = time.Second

// Prioritizer is a Queue whose records carry a priority (0, the default,
// to MaxPriority) that orders ClaimDue among the due records, with
// ageing (see PriorityStep). A record created by Put or Creator.CreateMany
// without one has priority 0, as have the records a store kept before it
// knew priorities. MemStore, boltstore and pgstore implement it.
//
// ClaimDue of a Prioritizer takes the due records in the order of their
// rank, the due time minus priority·PriorityStep, then the due time, then
// the key; a store shared by processes still takes the records whose lease
// expired first (see Queue.ClaimDue). A record's priority survives
// Schedule, Finish, Release, and writes by Put; Delete drops it.
type Prioritizer interface {
	Queue
	// PutPriority writes rec as Put does (versions, fencing token and
	// history alike) and sets the priority of rec.Key in the same atomic
	// write: a record created so (rec.Version 0) is due at once with its
	// priority; an existing one keeps its due time, now ranked by the new
	// priority. A priority outside 0..MaxPriority fails with a
	// *StoreRequestError (field "priority") and writes nothing.
	PutPriority(ctx context.Context, rec StoreRecord, priority int, history ...HistoryEntry) (uint64, error)
	// Priority returns the priority of key, or an error matching
	// ErrStoreNotFound.
	Priority(ctx context.Context, key string) (int, error)
}

// CheckPriority returns a *StoreRequestError naming key when priority is
// outside 0..MaxPriority. Prioritizers call it before they write.
func CheckPriority(key string, priority int) error {
	if priority < 0 || priority > MaxPriority {
		return &StoreRequestError{Key: key, Field: "priority", Reason: fmt.Sprintf("must be between 0 and %d, got %d", MaxPriority, priority)}
	}
	return nil
}

// PriorityRank returns the nanoseconds by which a Prioritizer orders a
// record due at dueNanos (Unix nanoseconds) with priority: dueNanos minus
// priority·PriorityStep. A due time at or before -2⁶² ns (before 1824:
// "at once", the zero time, among them) ranks math.MinInt64 whatever the
// priority, and one at or after 2⁶² ns (after 2116) math.MaxInt64, so that
// the result never overflows; records of equal rank go by due time, then
// key.
func PriorityRank(dueNanos int64, priority int) int64 {
	const bound = math.MaxInt64 / 2
	switch {
	case dueNanos <= -bound:
		return math.MinInt64
	case dueNanos >= bound:
		return math.MaxInt64
	}
	return dueNanos - int64(priority)*int64(PriorityStep)
}
