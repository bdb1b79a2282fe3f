package docker

import (
	"context"
	"errors"
	"slices"

	"github.com/containerd/errdefs"

	"github.com/convergekit/converge"
)

// IsSecretEnv reports whether the values of the environment key are
// secret: the key is listed in extra (exactly), or it matches the default
// pattern, case-insensitively:
//
//   - it contains PASSWORD, PASSWD, PASSPHRASE, SECRET, TOKEN, CREDENTIAL,
//     API_KEY or APIKEY, PRIVATE_KEY or PRIVATEKEY, or AUTH
//     (DB_PASSWORD, GITHUB_TOKEN, AWS_SECRET_ACCESS_KEY, CREDENTIALS_JSON,
//     OAUTH_CLIENT, ...);
//   - or it ends with _PASS, _PWD, _PW, _KEY, _KEYS or _DSN, after a _, .
//     or - (SMTP_PASS, DB_PWD, STRIPE_KEY, SENTRY_DSN).
//
// A key such as PWD (the working directory) or MONKEY is not secret by
// default; list it in ContainerSpec.SecretEnv (extra) to make it so. It is
// converge.IsSecretEnv, the rule every adapter redacts by.
func IsSecretEnv(key string, extra []string) bool {
	return converge.IsSecretEnv(key, extra)
}

// err returns err scrubbed of the redactor's secrets (see string), so that
// nothing a caller can reach from it carries one: not its message, not the
// message of any error of its chain (Unwrap), not a string field of a typed
// error of the chain. An error that carries no secret is returned as it is.
// Otherwise the result is a copy of its chain in which:
//
//   - each of the package's typed errors (*SpecError, *ContainerError,
//     *DependencyError, *LockError, *ImageError, *PullError,
//     *UnsupportedError) is copied with its string fields scrubbed and its
//     cause replaced by the cause's copy, so errors.As finds it, of its own
//     type, with every field but the secrets intact;
//   - an error of another package that carries a secret (in its message or
//     in what it wraps) becomes an opaque error with its message scrubbed,
//     wrapping the copy of what it wrapped. errors.As no longer finds its
//     type (its fields could hold the secret), but errors.Is matches
//     whatever it matched, and so do the engine's classifications
//     (github.com/containerd/errdefs IsNotFound, IsConflict,
//     IsUnavailable and the others, including errors that are classified
//     by marker methods, as the Docker client's errdefs are);
//   - an error that carries no secret, with all it wraps, is kept as it is,
//     whatever its type.
//
// A secret that only shows in the text a typed error formats around its
// fields (a value such as "code 1" next to ExitCode 1) cannot be scrubbed
// from a copy of that type: then the result is one opaque error with the
// scrubbed message, which matches errors.Is as err did and wraps nothing.
func (r redactor) err(err error) error {
	red, _ := r.copy(err)
	if r.leaks(red) {
		return &redactedLeaf{msg: r.string(err.Error()), orig: err}
	}
	return red
}

// scrubURLs returns err with the passwords of URLs with credentials
// scrubbed, as err describes: the image item's errors, which no container
// spec's secrets reach, but whose engine messages may quote a registry or
// proxy URL with its credentials.
func scrubURLs(err error) error { return redactor(nil).err(err) }

// copy returns the scrubbed copy of err described at err, and whether it
// differs from err.
func (r redactor) copy(err error) (error, bool) {
	if err == nil {
		return nil, false
	}
	changed := false
	str := func(v string) string {
		w := r.string(v)
		changed = changed || w != v
		return w
	}
	strs := func(v []string) []string {
		if v == nil {
			return nil
		}
		out := make([]string, len(v))
		for i, s := range v {
			out[i] = str(s)
		}
		return out
	}
	cause := func(e error) error {
		c, ch := r.copy(e)
		changed = changed || ch
		return c
	}
	var out error
	switch e := err.(type) {
	case *SpecError:
		out = &SpecError{Object: str(e.Object), Service: str(e.Service), Field: str(e.Field), Reason: str(e.Reason)}
	case *ContainerError:
		out = &ContainerError{Container: str(e.Container), Service: str(e.Service), Status: str(e.Status),
			ExitCode: e.ExitCode, Health: str(e.Health), Log: str(e.Log), state: e.state}
	case *DependencyError:
		out = &DependencyError{Container: str(e.Container), Dependency: str(e.Dependency), Service: str(e.Service),
			Condition: e.Condition, Err: cause(e.Err), Status: str(e.Status), Health: str(e.Health), Log: str(e.Log)}
	case *LockError:
		out = &LockError{Container: str(e.Container), Lock: str(e.Lock), Action: e.Action}
	case *ImageError:
		out = &ImageError{Ref: str(e.Ref), Services: strs(e.Services), Err: cause(e.Err)}
	case *PullError:
		out = &PullError{Ref: str(e.Ref), Err: cause(e.Err)}
	case *HookError:
		out = &HookError{Container: str(e.Container), Hook: str(e.Hook), ExitCode: e.ExitCode, Output: str(e.Output)}
	case *UnsupportedError:
		var reasons map[string]string
		for k, v := range e.Reasons {
			if reasons == nil {
				reasons = map[string]string{}
			}
			reasons[str(k)] = str(v)
		}
		out = &UnsupportedError{Fields: strs(e.Fields), Reasons: reasons}
	case *objectError:
		out = &objectError{kind: e.kind, name: str(e.name), err: cause(e.err)}
	case *causeError:
		out = &causeError{msg: str(e.msg), err: cause(e.err)}
	default:
		leaf := redactedLeaf{msg: str(err.Error()), orig: err}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			out = &redactedError{redactedLeaf: leaf, next: cause(u.Unwrap())}
		case interface{ Unwrap() []error }:
			errs := slices.Clone(u.Unwrap())
			for i, e := range errs {
				errs[i] = cause(e)
			}
			out = &redactedJoin{redactedLeaf: leaf, next: errs}
		default:
			out = &leaf
		}
	}
	if !changed {
		return err, false
	}
	return out, true
}

// leaks reports whether the message of err or of an error of its chain
// still changes when scrubbed.
func (r redactor) leaks(err error) bool {
	if err == nil {
		return false
	}
	if msg := err.Error(); r.string(msg) != msg {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return r.leaks(u.Unwrap())
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(u.Unwrap(), r.leaks)
	}
	return false
}

// redactedLeaf stands for an error that carried a secret: its message
// scrubbed, it matches what the original matched (see redactor.err)
// without exposing it.
type redactedLeaf struct {
	msg  string
	orig error
}

func (e *redactedLeaf) Error() string { return e.msg }

// Is matches what the original error matched, and its engine
// classification.
func (e *redactedLeaf) Is(target error) bool {
	if errors.Is(e.orig, target) {
		return true
	}
	for _, c := range engineClasses {
		if target == c.sentinel {
			return c.is(e.orig)
		}
	}
	return false
}

// redactedError is a redactedLeaf that wraps the scrubbed copy of the
// original's cause.
type redactedError struct {
	redactedLeaf
	next error
}

func (e *redactedError) Unwrap() error { return e.next }

// redactedJoin is a redactedLeaf that wraps the scrubbed copies of the
// original's causes.
type redactedJoin struct {
	redactedLeaf
	next []error
}

func (e *redactedJoin) Unwrap() []error { return e.next }

// engineClasses pairs the sentinels of github.com/containerd/errdefs (and
// of context) with their predicates, which also recognise errors by their
// marker methods (NotFound(), Conflict(), ...), as errors.Is cannot once
// the original is hidden.
var engineClasses = []struct {
	sentinel error
	is       func(error) bool
}{
	{context.Canceled, errdefs.IsCanceled},
	{context.DeadlineExceeded, errdefs.IsDeadlineExceeded},
	{errdefs.ErrUnknown, errdefs.IsUnknown},
	{errdefs.ErrInvalidArgument, errdefs.IsInvalidArgument},
	{errdefs.ErrNotFound, errdefs.IsNotFound},
	{errdefs.ErrAlreadyExists, errdefs.IsAlreadyExists},
	{errdefs.ErrPermissionDenied, errdefs.IsPermissionDenied},
	{errdefs.ErrResourceExhausted, errdefs.IsResourceExhausted},
	{errdefs.ErrFailedPrecondition, errdefs.IsFailedPrecondition},
	{errdefs.ErrConflict, errdefs.IsConflict},
	{errdefs.ErrNotModified, errdefs.IsNotModified},
	{errdefs.ErrAborted, errdefs.IsAborted},
	{errdefs.ErrOutOfRange, errdefs.IsOutOfRange},
	{errdefs.ErrNotImplemented, errdefs.IsNotImplemented},
	{errdefs.ErrInternal, errdefs.IsInternal},
	{errdefs.ErrUnavailable, errdefs.IsUnavailable},
	{errdefs.ErrDataLoss, errdefs.IsDataLoss},
	{errdefs.ErrUnauthenticated, errdefs.IsUnauthorized},
}
