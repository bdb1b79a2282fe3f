package converge

import (
	"errors"

	"github.com/convergekit/converge/internal/errtext"
)

// errFailFast is why items were not run after a failure under
// WalkerConfig.FailFast.
var errFailFast = errors.New("stopped by fail-fast after a failure")

// errPreempted is why items were not run in a walk of a reconciler pass
// that a new target preempted.
var errPreempted = errors.New("preempted by a new target")

// errPrefix starts every message of the package.
const errPrefix = "converge: "

// causeText is err's message for embedding after a message of the package:
// without its own copy of the package prefix.
func causeText(err error) string { return errtext.Cause(err, errPrefix) }

// bare wraps err (a sentinel, usually) for embedding with %w after the
// package prefix: it reads without the prefix and unwraps to err.
func bare(err error) error { return errtext.Bare(err, errPrefix) }

// The sentinel errors of the package. Branch on them with errors.Is; the
// typed errors (*ItemError, *GraphError, *ConfigError, *StoreVersionError,
// *StatusFieldError, ...) carry the details and match
// their sentinel.
var (
	// Items and walks.
	// ErrStateUnknown is returned (wrapped) by StateCurrent when the state
	// cannot be known yet. It is not a failure.
	ErrStateUnknown = errors.New("converge: state cannot be known yet")
	// ErrNotConverged means the item still required work after Apply.
	ErrNotConverged = errors.New("converge: item did not converge")
	// ErrPanic means an item method panicked; see *PanicError.
	ErrPanic = errors.New("converge: item panicked")
	// ErrNotRun means items were not run because the walk was interrupted
	// (its context cancelled), stopped by fail-fast, or preempted by a new
	// target of a TargetReconciler.
	ErrNotRun = errors.New("converge: item not run")
	// ErrStateType means a state of the wrong Go type reached an item.
	ErrStateType = errors.New("converge: wrong state type")
	// ErrLocked is returned (wrapped) by Apply when an update lock held by
	// someone else forbids the change. Reconcile loops wait and retry unless
	// the pass is forced (see WithForce).
	ErrLocked = errors.New("converge: update lock held")
	// ErrRefreshLog means a walk could not use its RefreshLog for an item:
	// record that it is due a refresh, read what is pending, or mark its
	// refresh done. See *RefreshLogError.
	ErrRefreshLog = errors.New("converge: refresh log failed")
	// ErrRefreshDamaged means the record of a Store-backed RefreshLog
	// (NewStoreRefreshLog) is not a refresh record: damaged, of a newer
	// format, or another program's.
	ErrRefreshDamaged = errors.New("converge: refresh record damaged")
	// ErrActionsDamaged means the record of a TargetReconciler's pending
	// host actions (TargetActionsKey) is not such a record: damaged, of a
	// newer format, or another program's.
	ErrActionsDamaged = errors.New("converge: pending actions record damaged")

	// Graphs.
	// ErrInvalidGraph is matched by every graph validation error.
	ErrInvalidGraph = errors.New("converge: invalid graph")
	// ErrNilItem means a nil Node was added to a graph.
	ErrNilItem = errors.New("converge: nil item")
	// ErrEmptyID means an item has the empty ID.
	ErrEmptyID = errors.New("converge: empty item ID")
	// ErrDuplicateID means two items share an ID.
	ErrDuplicateID = errors.New("converge: duplicate item ID")
	// ErrUnknownDependency means an item depends on an ID not in the graph.
	ErrUnknownDependency = errors.New("converge: unknown dependency")
	// ErrUnknownAfter means an ordering edge (Graph.After) names an ID not
	// in the graph, as its item or as the item it comes after.
	ErrUnknownAfter = errors.New("converge: ordering edge names unknown item")
	// ErrCycle means the dependencies, or the dependencies and the
	// ordering edges (Graph.After), form a cycle.
	ErrCycle = errors.New("converge: dependency cycle")
	// ErrPresentDependsOnAbsent means a Present item depends on an Absent one.
	ErrPresentDependsOnAbsent = errors.New("converge: present item depends on absent item")
	// ErrNoClean means an item marked Absent (or cleaned) has no StateClean.
	ErrNoClean = errors.New("converge: item cannot be removed (no StateClean)")

	// Configuration.
	// ErrInvalidConfig is matched by every *ConfigError.
	ErrInvalidConfig = errors.New("converge: invalid config")

	// The target reconciler.
	// ErrTargetNotSettled means a stage still changed something after
	// MaxRounds walks in one pass; a *TargetStageError names the stage.
	ErrTargetNotSettled = errors.New("converge: target did not settle")
	// ErrTargetNone means there is no target to reconcile yet.
	ErrTargetNone = errors.New("converge: no target set")
	// ErrTargetRunning means Run was called on a reconciler that is running
	// or has run.
	ErrTargetRunning = errors.New("converge: target reconciler already ran")
	// ErrTargetStopped means the reconciler stopped before it could run an
	// intermediate target.
	ErrTargetStopped = errors.New("converge: target reconciler stopped")

	// Status documents and edge reports. Every *StatusFieldError matches
	// ErrStatusInvalid and one of the more specific sentinels; every
	// *EdgeWalkError matches one of the ErrEdge sentinels.
	// ErrStatusInvalid is matched by every *StatusFieldError: a desired
	// configuration, edge report or status report that is malformed or
	// inconsistent.
	ErrStatusInvalid = errors.New("converge: invalid status document")
	// ErrStatusUnknownValue means an enum field holds a value that is not
	// one of its declared names.
	ErrStatusUnknownValue = errors.New("unknown value")
	// ErrStatusUnknownField means a JSON object has a field the format does
	// not define.
	ErrStatusUnknownField = errors.New("unknown field")
	// ErrStatusDuplicateField means a JSON object repeats a field.
	ErrStatusDuplicateField = errors.New("duplicate field")
	// ErrStatusMissingField means a required field is absent.
	ErrStatusMissingField = errors.New("missing field")
	// ErrStatusMalformed means a value has the wrong JSON type or syntax.
	ErrStatusMalformed = errors.New("malformed value")
	// ErrStatusEmptyID means an item has the empty ID.
	ErrStatusEmptyID = errors.New("empty item ID")
	// ErrStatusDuplicateID means two entries of one document share an ID.
	ErrStatusDuplicateID = errors.New("duplicate item ID")
	// ErrStatusNoRevision means a revision is zero; revisions start at 1.
	ErrStatusNoRevision = errors.New("revision must be at least 1")
	// ErrStatusInconsistent means fields of one entry contradict each
	// other (for example WaitingFor on an item that does not wait).
	ErrStatusInconsistent = errors.New("inconsistent fields")

	// ErrEdgeDryRun means an edge report was asked for from a dry-run
	// walk: a dry run changed nothing, so it cannot answer a configuration.
	ErrEdgeDryRun = errors.New("converge: edge report from a dry run")
	// ErrEdgeNoReport means an edge report was asked for from a nil Report.
	ErrEdgeNoReport = errors.New("converge: edge report from a nil walk report")
	// ErrEdgeBadOutcome means a walk report holds an item with an outcome
	// an edge report cannot express (such as OutcomeWouldChange outside a
	// dry run, or an undeclared value).
	ErrEdgeBadOutcome = errors.New("converge: walk outcome has no edge state")

	// Stores.
	// ErrStoreNotFound means no record (or no target) is stored under a key.
	ErrStoreNotFound = errors.New("converge: not found in store")
	// ErrStoreStale means a write carried a version that is not the stored
	// one: someone else wrote in between. See *StoreVersionError.
	ErrStoreStale = errors.New("converge: stale version")
	// ErrStoreExists means a record to create is stored already. See
	// *StoreExistsError.
	ErrStoreExists = errors.New("converge: already stored")
	// ErrClaimHeld means another owner holds an unexpired lease on the key.
	// See *ClaimError.
	ErrClaimHeld = errors.New("converge: claim held by another owner")
	// ErrLeaseLost means a lease was released or renewed after it expired
	// and was taken by someone else (or was never held).
	ErrLeaseLost = errors.New("converge: lease lost")
	// ErrStoreInvalid means a store call had invalid arguments (an empty
	// key or owner, a non-positive lease duration, a value that is not
	// valid JSON).
	ErrStoreInvalid = errors.New("converge: invalid store request")
	// ErrSealed means a stored value is sealed and cannot be opened: the
	// store has no Sealer, or the value was sealed with a key the Sealer
	// does not hold, under another store key, or altered.
	ErrSealed = errors.New("converge: sealed value cannot be opened")
	// ErrNotSealed means a store with a Sealer read a value that is not
	// sealed where a sealed one belongs (written in clear before sealing
	// was turned on, or by someone bypassing the Sealer). Stores fail
	// closed on it unless told to accept clear values while migrating
	// (MemStore.AllowClear and its likes in the durable stores).
	ErrNotSealed = errors.New("converge: value is not sealed")
)
