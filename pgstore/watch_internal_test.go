package pgstore

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestWatcherQueueCoalesces(t *testing.T) {
	w := &watcher{wake: make(chan struct{}, 1), pending: map[string]struct{}{}}
	w.push("a")
	w.push("b")
	w.push("a")
	keys, reset := w.take()
	assert.Equal(t, []string{"a", "b"}, keys)
	assert.False(t, reset)

	keys, reset = w.take()
	assert.Empty(t, keys)
	assert.False(t, reset)

	// "" drops what is queued: fn("") covers it.
	w.push("a")
	w.push("")
	w.push("c")
	keys, reset = w.take()
	assert.Empty(t, keys)
	assert.True(t, reset)

	// Too many keys for a slow fn become one fn("").
	for i := range maxPending + 1 {
		w.push(fmt.Sprint(i))
	}
	keys, reset = w.take()
	assert.Empty(t, keys)
	assert.True(t, reset)
}
