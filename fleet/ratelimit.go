package fleet

import (
	"sync"
	"time"
)

// limiter is a token bucket per device: each device may make burst
// requests at once and rate requests per second on average. Buckets that
// are full again are forgotten, so the map holds only the devices seen
// recently.
type limiter struct {
	rate  float64 // tokens per second
	burst float64
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
	sweep   time.Time // next time full buckets are dropped
}

type bucket struct {
	tokens float64
	last   time.Time
}

func newLimiter(rate float64, burst int, now func() time.Time) *limiter {
	return &limiter{rate: rate, burst: float64(burst), now: now, buckets: map[string]*bucket{}}
}

// allow takes a token from id's bucket. When there is none it returns
// false and how long until there is one.
func (l *limiter) allow(id string) (bool, time.Duration) {
	if l.rate <= 0 {
		return true, 0
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.After(l.sweep) {
		l.dropFull(now)
		l.sweep = now.Add(time.Minute)
	}
	b, ok := l.buckets[id]
	if !ok {
		b = &bucket{tokens: l.burst, last: now}
		l.buckets[id] = b
	}
	l.refill(b, now)
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := time.Duration((1 - b.tokens) / l.rate * float64(time.Second))
	return false, max(wait, time.Millisecond)
}

func (l *limiter) refill(b *bucket, now time.Time) {
	if d := now.Sub(b.last); d > 0 {
		b.tokens = min(l.burst, b.tokens+d.Seconds()*l.rate)
		b.last = now
	}
}

// dropFull forgets the buckets that are full: a new bucket starts full, so
// nothing changes for their devices. The caller holds l.mu.
func (l *limiter) dropFull(now time.Time) {
	for id, b := range l.buckets {
		l.refill(b, now)
		if b.tokens >= l.burst {
			delete(l.buckets, id)
		}
	}
}
