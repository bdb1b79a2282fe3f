package converge

import (
	"fmt"
	"time"
)

// Backoff computes exponential retry delays with a cap and jitter. The zero
// value means DefaultBackoff.
type Backoff struct {
	// Base is the delay after the first failure; each further failure
	// doubles it. 0 means DefaultBackoff.Base.
	Base time.Duration
	// Max caps the delay. 0 means DefaultBackoff.Max.
	Max time.Duration
	// Jitter is the fraction (0..1) of the delay that is randomised: the
	// delay is drawn from [d*(1-Jitter), d], so it never exceeds Max and
	// retries of many keys spread out. 0 means no jitter.
	Jitter float64
}

// DefaultBackoff is the Backoff used when none is configured: 100 ms
// doubling up to 5 minutes, with 20% jitter.
var DefaultBackoff = Backoff{Base: 100 * time.Millisecond, Max: 5 * time.Minute, Jitter: 0.2}

// Validate reports a field out of range as a *ConfigError.
func (b Backoff) Validate() error {
	switch {
	case b.Base < 0:
		return &ConfigError{Field: "Backoff.Base", Reason: fmt.Sprintf("must not be negative, got %s", b.Base)}
	case b.Max < 0:
		return &ConfigError{Field: "Backoff.Max", Reason: fmt.Sprintf("must not be negative, got %s", b.Max)}
	case b.Max > 0 && b.Base > b.Max:
		return &ConfigError{Field: "Backoff.Base", Reason: fmt.Sprintf("%s is above Max %s", b.Base, b.Max)}
	case b.Jitter < 0 || b.Jitter > 1:
		return &ConfigError{Field: "Backoff.Jitter", Reason: fmt.Sprintf("must be within [0, 1], got %g", b.Jitter)}
	}
	return nil
}

func (b Backoff) withDefaults() Backoff {
	if b.Base == 0 && b.Max == 0 && b.Jitter == 0 {
		return DefaultBackoff
	}
	if b.Base == 0 {
		b.Base = DefaultBackoff.Base
	}
	if b.Max == 0 {
		b.Max = max(DefaultBackoff.Max, b.Base)
	}
	return b
}

// Delay returns the delay before retry number failures (1 for the first
// failure), using r in [0, 1) for the jitter. failures < 1 gives 0.
func (b Backoff) Delay(failures int, r float64) time.Duration {
	if failures < 1 {
		return 0
	}
	b = b.withDefaults()
	d := b.Base
	for i := 1; i < failures && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	if b.Jitter > 0 {
		d -= time.Duration(float64(d) * b.Jitter * r)
	}
	return d
}
