package fleet

import (
	"errors"
	"fmt"

	"github.com/convergekit/converge/internal/errtext"
)

// prefixes are the package prefixes an embedded error's message drops, so
// that a message reads once.
var prefixes = []string{"fleet: ", "converge: "}

// errf is fmt.Errorf whose error arguments are embedded without their own
// package prefix (they still unwrap as themselves).
func errf(format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = errtext.Bare(err, prefixes...)
		}
	}
	return fmt.Errorf(format, args...)
}

// The sentinels of the fleet package. Every typed error of the package
// matches one of them with errors.Is.
var (
	// ErrUnauthorized is matched by every *AuthError: a device request
	// without a valid credential (missing, wrong, unknown device, revoked).
	ErrUnauthorized = errors.New("fleet: unauthorized")
	// ErrForbidden is the error of an Authorizer refusing a request to
	// the server's own API, and of a device asking for another device's
	// resources.
	ErrForbidden = errors.New("fleet: forbidden")
	// ErrDeviceNotFound means no device is enrolled under an ID.
	ErrDeviceNotFound = errors.New("fleet: device not enrolled")
	// ErrDeviceExists is the error of enrolling an ID that is enrolled.
	ErrDeviceExists = errors.New("fleet: device already enrolled")
	// ErrNoTarget means no target was set for a device.
	ErrNoTarget = errors.New("fleet: no target set")
	// ErrRateLimited means a device made more requests than its rate
	// allows (Config.Rate, Config.Burst).
	ErrRateLimited = errors.New("fleet: rate limited")
	// ErrInvalid is matched by every *RequestError: a request or a
	// document that is malformed or out of range.
	ErrInvalid = errors.New("fleet: invalid request")
	// ErrOlderTarget is the error of an agent's poll answered with a
	// target no newer than the device's (a server that lost targets it
	// gave): the agent keeps its own and retries with backoff.
	ErrOlderTarget = errors.New("fleet: target not newer than the device's")
	// ErrStaleReport is the error of a report for a revision older than
	// the device's stored report, or newer than any target it was given.
	ErrStaleReport = errors.New("fleet: report revision out of order")
	// ErrRolloutExists is the error of creating a rollout under an ID in
	// use.
	ErrRolloutExists = errors.New("fleet: rollout exists")
	// ErrRolloutNotFound means no rollout is stored under an ID.
	ErrRolloutNotFound = errors.New("fleet: rollout not found")
	// ErrRolloutState is matched by every *RolloutError: a pause, resume
	// or abort that the rollout's state does not allow.
	ErrRolloutState = errors.New("fleet: rollout state does not allow it")
)

// AuthReason says why a device request was refused as unauthorized. It
// is the value of the label "reason" of MetricRefused.
type AuthReason string

// The reasons of an AuthError.
const (
	// AuthMissing: no bearer credential in the request.
	AuthMissing AuthReason = "missing"
	// AuthUnknown: no device is enrolled under the request's ID.
	AuthUnknown AuthReason = "unknown"
	// AuthRevoked: the device's credential was revoked.
	AuthRevoked AuthReason = "revoked"
	// AuthMismatch: the credential is not the device's.
	AuthMismatch AuthReason = "mismatch"
)

// AuthError is the error of a device request refused for its credential.
// It matches ErrUnauthorized. It never carries the credential.
type AuthError struct {
	Device string
	Reason AuthReason
}

// Error names the device and the reason.
func (e *AuthError) Error() string {
	return fmt.Sprintf("fleet: device %q: unauthorized: %s credential", e.Device, e.Reason)
}

// Is makes AuthError match ErrUnauthorized.
func (e *AuthError) Is(target error) bool { return target == ErrUnauthorized }

// RequestError names the part of a request or document that is invalid.
// It matches ErrInvalid, and Err (a converge decoding error such as a
// *converge.LimitError or *converge.StatusFieldError) when there is one.
type RequestError struct {
	// Field names the culprit: "device", "wait", "body", "payload", a
	// field path of a document.
	Field  string
	Reason string
	Err    error
}

// Error names the culprit.
func (e *RequestError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("fleet: %s: %s", e.Field, errtext.Cause(e.Err, prefixes...))
	}
	return fmt.Sprintf("fleet: %s: %s", e.Field, e.Reason)
}

// Is makes RequestError match ErrInvalid.
func (e *RequestError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns Err.
func (e *RequestError) Unwrap() error { return e.Err }

// ReportError is the error of a report whose revision does not fit: older
// than the report the server holds for the device, or newer than the
// device's target. It matches ErrStaleReport.
type ReportError struct {
	Device   string
	Revision uint64
	// Stored is the revision of the report held; Target is the device's
	// target revision.
	Stored, Target uint64
}

// Error names the device and the revisions.
func (e *ReportError) Error() string {
	return fmt.Sprintf("fleet: device %q: report for revision %d refused (held report: %d, target: %d)", e.Device, e.Revision, e.Stored, e.Target)
}

// Is makes ReportError match ErrStaleReport.
func (e *ReportError) Is(target error) bool { return target == ErrStaleReport }

// FormatError is the error of a stored fleet record that cannot be read:
// an unknown format version, or a malformed document. It matches
// ErrInvalid and names the store key.
type FormatError struct {
	Key string
	Err error
}

// Error names the key.
func (e *FormatError) Error() string {
	return fmt.Sprintf("fleet: stored record %q: %s", e.Key, errtext.Cause(e.Err, prefixes...))
}

// Is makes FormatError match ErrInvalid.
func (e *FormatError) Is(target error) bool { return target == ErrInvalid }

// Unwrap returns Err.
func (e *FormatError) Unwrap() error { return e.Err }
