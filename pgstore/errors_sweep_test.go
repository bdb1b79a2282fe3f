package pgstore_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge/internal/errtext"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// TestErrorMessagesReadOnce sweeps the package's sentinels and typed
// errors as the core module's sweep does: one package prefix, first, the
// subject named once, and the right articles.
func TestErrorMessagesReadOnce(t *testing.T) {
	prefixes := []string{"pgstore: ", "pgtest: ", "converge: "}
	for pkg, errs := range map[string][]error{
		"pgstore": {
			pgstore.ErrDSN, pgstore.ErrConnect, pgstore.ErrPermission, pgstore.ErrSchemaTooNew,
			pgstore.ErrClosed, pgstore.ErrOptions,
			&pgstore.OptionsError{Field: "Schema", Reason: "must be a plain identifier"},
		},
		"pgtest": {pgtest.ErrNoPostgres, pgtest.ErrServerClosed},
	} {
		for _, err := range errs {
			assert.Empty(t, errtext.Problems(pkg, err.Error(), prefixes), "%q", err.Error())
		}
	}
}
