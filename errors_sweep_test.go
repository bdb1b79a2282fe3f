package converge_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/hostcfg"
	"github.com/convergekit/converge/internal/errtext"
	"github.com/convergekit/converge/plan"
)

// TestErrorMessagesOfEveryPackageReadOnce sweeps the sentinels and typed
// errors of every package of the core module: a message carries its
// package prefix once and first (embedded sentinels, made to follow
// another error's prefix, carry none), names its subject once (the
// package's name is not repeated after its prefix: "controller:
// controller ..." reads twice) and uses the right article.
func TestErrorMessagesOfEveryPackageReadOnce(t *testing.T) {
	prefixed := map[string][]error{
		"converge": {
			converge.ErrStateUnknown, converge.ErrNotConverged, converge.ErrPanic, converge.ErrNotRun,
			converge.ErrStateType, converge.ErrLocked, converge.ErrInvalidGraph, converge.ErrNilItem,
			converge.ErrEmptyID, converge.ErrDuplicateID, converge.ErrUnknownDependency, converge.ErrCycle,
			converge.ErrPresentDependsOnAbsent, converge.ErrNoClean, converge.ErrInvalidConfig,
			converge.ErrTargetNotSettled, converge.ErrTargetNone, converge.ErrTargetRunning,
			converge.ErrTargetStopped, converge.ErrStatusInvalid, converge.ErrEdgeDryRun, converge.ErrEdgeNoReport,
			converge.ErrEdgeBadOutcome, converge.ErrStoreNotFound, converge.ErrStoreStale,
			converge.ErrClaimHeld, converge.ErrLeaseLost, converge.ErrStoreInvalid, converge.ErrSealed,
			converge.ErrNotSealed, converge.ErrUnknownName, converge.ErrRefreshLog, converge.ErrRefreshDamaged,
			&converge.RefreshLogError{Op: "record", Err: converge.ErrStoreStale},
			&converge.StatusFieldError{Doc: "edge report", Field: "items[0].edge", Value: "x", Err: converge.ErrStatusUnknownValue},
		},
		"controller": {
			controller.ErrRunning, controller.ErrShutdownTimeout, controller.ErrObjectExists,
			controller.ErrObjectNotFound, controller.ErrTerminal, controller.ErrObjectInvalid,
			&controller.ObjectError{Kind: "host", Key: "h1", Err: controller.ErrObjectNotFound},
		},
		"plan": {
			plan.ErrDecode, plan.ErrInvalid, plan.ErrStatusMismatch, plan.ErrUnknownCommand,
			plan.ErrTransition, plan.ErrFailed, plan.ErrNotFailed, plan.ErrFinished, plan.ErrAborted,
			&plan.FieldError{Field: "spec.id", Reason: "must not be empty", Err: plan.ErrInvalid},
			&plan.Error{PlanID: "p1", Command: 0, Kind: "update", State: plan.StateApplyFailed, Reason: "disk full"},
			&plan.CommandError{Command: 0, Kind: "update", State: plan.StateSchedulable, Err: plan.ErrTransition},
			&plan.DecodeError{Command: 0, Field: "spec.commands[0].update", Err: plan.ErrDecode},
		},
		"autopilot":    {autopilot.ErrHostNotFound, autopilot.ErrNoSelector, autopilot.ErrNoDiscover, autopilot.ErrNoSignal},
		"convergetest": {convergetest.ErrInjected, convergetest.ErrNonConformant, convergetest.ErrStoreNonConformant, convergetest.ErrPartitioned, convergetest.ErrOverlap},
		"boltstore": {
			boltstore.ErrClosed, boltstore.ErrCorrupt,
			&boltstore.OpenError{Path: "/var/lib/agent.db", Reason: boltstore.ErrNotStore},
		},
		"hostcfg": {
			hostcfg.ErrEscape, hostcfg.ErrInvalidPath, hostcfg.ErrTooManyLinks, hostcfg.ErrWrongType,
			hostcfg.ErrNeedRoot, hostcfg.ErrInvalidItem, hostcfg.ErrRepeatedKey, hostcfg.ErrUnknownOwner,
			hostcfg.ErrHardLinked, hostcfg.ErrOwnerUnsupported,
			&hostcfg.PathError{Op: "write", Path: "/etc/motd", Err: hostcfg.ErrHardLinked},
			&hostcfg.EscapeError{Path: "/etc/x", Link: "etc", Target: "/outside"},
			&hostcfg.OwnerError{Path: "/etc/x", Kind: "user", Name: "pi", DB: "/mnt/etc/passwd"},
			&hostcfg.RepeatedKeyError{Path: "/config.txt", Key: "gpu_mem", Lines: []int{1, 2}},
			&hostcfg.ItemError{Item: "configkey:/config.txt:gpu=mem", Reason: `invalid key "gpu=mem"`},
		},
	}
	// Sentinels made to be embedded after another error's prefix.
	embedded := []error{
		converge.ErrStatusUnknownValue, converge.ErrStatusUnknownField, converge.ErrStatusDuplicateField,
		converge.ErrStatusMissingField, converge.ErrStatusMalformed, converge.ErrStatusEmptyID,
		converge.ErrStatusDuplicateID, converge.ErrStatusNoRevision, converge.ErrStatusInconsistent,
		boltstore.ErrNotStore, boltstore.ErrFileLocked, boltstore.ErrNewerFormat,
	}
	prefixes := []string{"converge: ", "plan: ", "controller: ", "autopilot: ", "boltstore: ", "hostcfg: ", "convergetest: "}
	for pkg, errs := range prefixed {
		for _, err := range errs {
			msg := err.Error()
			t.Run(msg, func(t *testing.T) {
				assert.Empty(t, errtext.Problems(pkg, msg, prefixes))
			})
		}
	}
	for _, err := range embedded {
		msg := err.Error()
		t.Run(msg, func(t *testing.T) {
			assert.Empty(t, errtext.Problems("", msg, prefixes), "an embedded sentinel has no prefix")
		})
	}
}
