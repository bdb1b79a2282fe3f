package prometheus_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/convergekit/converge/internal/errtext"
	"github.com/convergekit/converge/prometheus"
)

// TestErrorMessagesReadOnce checks the package's sentinels, made to be
// embedded after a message that names the metric: no prefix of their own,
// and the right articles.
func TestErrorMessagesReadOnce(t *testing.T) {
	for _, err := range []error{prometheus.ErrInvalidMetric, prometheus.ErrConflict, prometheus.ErrMisuse} {
		assert.Empty(t, errtext.Problems("", err.Error(), []string{"prometheus: ", "converge: "}), "%q", err.Error())
	}
}
