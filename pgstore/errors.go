package pgstore

import (
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// The sentinel errors of the package. Branch on them with errors.Is; the
// typed errors carry the details and match their sentinel. Errors about
// records (stale versions, lost leases, invalid values, sealed values) are
// the converge package's: converge.ErrStoreStale, converge.ErrLeaseLost,
// converge.ErrStoreInvalid, converge.ErrSealed and so on.
var (
	// ErrDSN means the DSN given to Open does not parse. See *DSNError.
	ErrDSN = errors.New("pgstore: invalid DSN")
	// ErrConnect means the database named by the DSN could not be
	// reached or refused the login. See *ConnectError.
	ErrConnect = errors.New("pgstore: cannot connect to the database")
	// ErrPermission means the database role lacks a privilege the store
	// needs, typically to create its schema and tables at open. See
	// *PermissionError.
	ErrPermission = errors.New("pgstore: permission denied")
	// ErrSchemaTooNew means the store's schema was migrated by a newer
	// version of pgstore than this one. See *SchemaVersionError.
	ErrSchemaTooNew = errors.New("pgstore: schema is newer than this pgstore")
	// ErrClosed means the Store was closed (Watch after Close).
	ErrClosed = errors.New("pgstore: store is closed")
	// ErrOptions means an Options field is out of range. See
	// *OptionsError.
	ErrOptions = errors.New("pgstore: invalid options")
)

// DSNError is the error of a DSN that does not parse. Its message never
// contains the password the DSN may hold.
type DSNError struct {
	// Reason says what is wrong, with any password left out.
	Reason string
	err    error
}

// Error describes the problem, naming its culprit.
func (e *DSNError) Error() string { return "pgstore: DSN does not parse: " + e.Reason }

// Unwrap returns pgx's parse error. Beware: printing it may show parts of
// the DSN.
func (e *DSNError) Unwrap() error { return e.err }

// Is makes DSNError match ErrDSN.
func (e *DSNError) Is(target error) bool { return target == ErrDSN }

// ConnectError is the error of a database that could not be reached or
// refused the login. It names the host, port, database and user, never the
// password.
type ConnectError struct {
	Host     string
	Port     uint16
	Database string
	User     string
	// Reason is the cause, with the password left out.
	Reason string
	err    error
}

// Error describes the problem, naming its culprit.
func (e *ConnectError) Error() string {
	return fmt.Sprintf("pgstore: cannot connect to database %q on %s port %d as %q: %s", e.Database, e.Host, e.Port, e.User, e.Reason)
}

// Unwrap returns the cause (often a *pgconn.ConnectError).
func (e *ConnectError) Unwrap() error { return e.err }

// Is makes ConnectError match ErrConnect.
func (e *ConnectError) Is(target error) bool { return target == ErrConnect }

// PermissionError is the error of a statement the database refused for
// lack of privileges. It wraps the *pgconn.PgError.
type PermissionError struct {
	// Action is what the store tried, such as `create schema "converge"`.
	Action string
	// Err is the database's refusal.
	Err *pgconn.PgError
}

// Error describes the problem, naming its culprit.
func (e *PermissionError) Error() string {
	return fmt.Sprintf("pgstore: %s: the database role may not do this: %s (SQLSTATE %s)", e.Action, e.Err.Message, e.Err.Code)
}

// Unwrap returns the database's error.
func (e *PermissionError) Unwrap() error { return e.Err }

// Is makes PermissionError match ErrPermission.
func (e *PermissionError) Is(target error) bool { return target == ErrPermission }

// SchemaVersionError is the error of a schema migrated by a newer pgstore:
// this one refuses to use it rather than misread it.
type SchemaVersionError struct {
	Schema string
	// Have is the newest migration applied to the schema.
	Have int
	// Known is the newest migration this pgstore knows.
	Known int
}

// Error describes the problem, naming its culprit.
func (e *SchemaVersionError) Error() string {
	return fmt.Sprintf("pgstore: schema %q is at version %d, this pgstore knows versions up to %d: upgrade pgstore", e.Schema, e.Have, e.Known)
}

// Is makes SchemaVersionError match ErrSchemaTooNew.
func (e *SchemaVersionError) Is(target error) bool { return target == ErrSchemaTooNew }

// OptionsError names the Options field that is out of range.
type OptionsError struct {
	Field  string
	Reason string
}

// Error describes the problem, naming its culprit.
func (e *OptionsError) Error() string {
	return fmt.Sprintf("pgstore: options %s: %s", e.Field, e.Reason)
}

// Is makes OptionsError match ErrOptions.
func (e *OptionsError) Is(target error) bool { return target == ErrOptions }

// The patterns that find a password in a DSN, parsed or not: key=value
// forms (quoted or not) and the user:password@ part of a URL.
var passwordPatterns = []*regexp.Regexp{
	regexp.MustCompile(`password\s*=\s*'((?:[^'\\]|\\.)*)'`),
	regexp.MustCompile(`password\s*=\s*([^\s']\S*)`),
	regexp.MustCompile(`://[^:/@?#]*:([^@]*)@`),
}

// secretsOf returns the passwords a DSN may hold, longest first, so that
// scrubbing a longer one is not defeated by a shorter one it contains.
func secretsOf(dsn string, known ...string) []string {
	var out []string
	for _, p := range passwordPatterns {
		for _, m := range p.FindAllStringSubmatch(dsn, -1) {
			if m[1] != "" {
				out = append(out, m[1])
			}
		}
	}
	for _, k := range known {
		if k != "" {
			out = append(out, k)
		}
	}
	// Percent-decoded passwords of URLs appear decoded in some messages.
	for _, s := range out {
		if d, err := url.PathUnescape(s); err == nil && d != s {
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// scrub replaces every secret in msg.
func scrub(msg string, secrets []string) string {
	for _, s := range secrets {
		msg = strings.ReplaceAll(msg, s, "xxxxx")
	}
	return msg
}

// dsnError turns pgx's parse error into a *DSNError whose message holds
// no password: the DSN itself is cut out of pgx's message, and what is
// left is scrubbed of anything that looks like a password.
func dsnError(dsn string, err error) *DSNError {
	reason := err.Error()
	// pgx writes "cannot parse `<dsn>`: <reason>"; keep the reason only.
	if i := strings.LastIndex(reason, "`: "); i >= 0 {
		reason = reason[i+3:]
	}
	reason = scrub(reason, secretsOf(dsn))
	for _, p := range passwordPatterns {
		reason = p.ReplaceAllStringFunc(reason, func(m string) string {
			sub := p.FindStringSubmatch(m)
			return strings.Replace(m, sub[1], "xxxxx", 1)
		})
	}
	return &DSNError{Reason: reason, err: err}
}
