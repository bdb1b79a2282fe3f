//go:build !unix

package converge_test

import "testing"

func refreshKilledCase(t *testing.T) { t.Skip("needs SIGKILL") }
