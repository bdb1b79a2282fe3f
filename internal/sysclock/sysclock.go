// Package sysclock tells the system clock from a clock a caller set, for
// the packages that read time through a Now func() time.Time.
package sysclock

import (
	"reflect"
	"time"
)

// Is reports whether now is the system clock: nil or time.Now itself (a
// function that wraps time.Now is not).
func Is(now func() time.Time) bool {
	return now == nil || reflect.ValueOf(now).Pointer() == reflect.ValueOf(time.Now).Pointer()
}
