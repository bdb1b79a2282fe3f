package plan

import (
	"errors"
	"fmt"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/errtext"
)

// errPrefix starts every message of the package.
const errPrefix = "plan: "

// causeText is err's message for embedding after a message of the package:
// without its own copy of the package prefix or of the core's
// ("converge: ", the prefix of a Store's errors).
func causeText(err error) string { return errtext.Cause(err, errPrefix, "converge: ") }

// bare wraps err (a sentinel, or a Store's error) for embedding with %w
// after the package prefix: it reads without its prefix and unwraps to err.
func bare(err error) error { return errtext.Bare(err, errPrefix, "converge: ") }

// The sentinel errors of the package. Branch on them with errors.Is; the
// typed errors (*DecodeError, *FieldError, *Error, *CommandError) carry
// the details and match their sentinel.
var (
	// ErrDecode is matched by every *DecodeError.
	ErrDecode = errors.New("plan: invalid document")
	// ErrInvalid is matched by every *FieldError: the plan itself is not
	// runnable (no ID, no commands, bad targets).
	ErrInvalid = errors.New("plan: invalid spec")
	// ErrStatusMismatch is matched by a *FieldError: the status does not
	// answer the plan's commands and cannot be repaired.
	ErrStatusMismatch = errors.New("plan: status does not match its commands")
	// ErrUnknownCommand means no handler is registered for a command's
	// kind.
	ErrUnknownCommand = errors.New("plan: no handler for command kind")
	// ErrTransition means a handler returned a state that cannot follow the
	// one it was called in (for example NewPlan from Schedulable).
	ErrTransition = errors.New("plan: invalid state transition")
	// ErrFailed is matched by an *Error: the plan stopped in an error
	// state.
	ErrFailed = errors.New("plan: stopped in an error state")
	// ErrNotFailed means Retry was asked of a plan that is not in an error
	// state.
	ErrNotFailed = errors.New("plan: not in an error state")
	// ErrFinished means Abort was asked of a plan that is Completed or
	// already stopped in an error state.
	ErrFinished = errors.New("plan: already finished")
	// ErrAborted means Abort was asked of a plan that is already being
	// aborted or ended in StateAborted; the first reason is kept.
	ErrAborted = errors.New("plan: already aborted")
	// ErrExists is matched by an *ExistsError: Runner.Create was given a
	// plan whose ID is taken by a stored plan.
	ErrExists = errors.New("plan: already exists")
)

// ExistsError is the error of Runner.Create for a plan whose ID a stored
// plan has already. It matches ErrExists, and converge.ErrStoreStale as
// the error of Create did before ErrExists.
type ExistsError struct {
	// PlanID is the ID of the plan.
	PlanID string
}

// Error reads `plan: plan "upgrade-1.31" already exists`.
func (e *ExistsError) Error() string { return fmt.Sprintf("plan: plan %q already exists", e.PlanID) }

// Is makes ExistsError match ErrExists and converge.ErrStoreStale.
func (e *ExistsError) Is(target error) bool {
	return target == ErrExists || target == converge.ErrStoreStale
}
