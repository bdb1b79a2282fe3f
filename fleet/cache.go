package fleet

import (
	"bytes"
	"sync"

	"github.com/convergekit/converge"
)

// recordCacheSize bounds the records of each kind (devices, targets) a
// Server keeps decoded: about one per device of a fleet of its size.
const recordCacheSize = 16384

// recordCache keeps records of the server's own store decoded, by key,
// with the bytes they were decoded from: a record read again with the
// same bytes is not decoded again, one whose bytes changed (another
// replica wrote it, or anyone else) is decoded anew, strictly, as every
// record is. It holds at most max records; when full, it forgets one at
// random. A value it returns is shared: callers must not change it.
type recordCache[T any] struct {
	mu  sync.Mutex
	max int
	m   map[string]cachedRecord[T]
}

type cachedRecord[T any] struct {
	raw []byte
	v   T
}

func newRecordCache[T any](max int) *recordCache[T] {
	return &recordCache[T]{max: max, m: map[string]cachedRecord[T]{}}
}

// get returns the value decoded from raw under key, if it is kept.
func (c *recordCache[T]) get(key string, raw []byte) (T, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || !bytes.Equal(e.raw, raw) {
		var zero T
		return zero, false
	}
	return e.v, true
}

// put keeps v, decoded from raw under key (raw is copied).
func (c *recordCache[T]) put(key string, raw []byte, v T) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[key]; !ok && len(c.m) >= c.max {
		for k := range c.m {
			delete(c.m, k)
			break
		}
	}
	c.m[key] = cachedRecord[T]{raw: bytes.Clone(raw), v: v}
}

// len is the number of records kept.
func (c *recordCache[T]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

// decodeCached returns rec decoded strictly (decodeRecord) into a T, or
// as c kept it when rec's bytes were decoded before. The value is shared:
// callers must not change what it points to.
func decodeCached[T any](c *recordCache[T], rec converge.StoreRecord, format func(*T) int) (T, error) {
	if v, ok := c.get(rec.Key, rec.Value); ok {
		return v, nil
	}
	var v T
	if err := decodeRecord(rec.Key, rec.Value, &v, func() int { return format(&v) }); err != nil {
		var zero T
		return zero, err
	}
	c.put(rec.Key, rec.Value, v)
	return v, nil
}
