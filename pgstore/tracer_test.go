package pgstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/pgstore"
	"github.com/convergekit/converge/pgstore/pgtest"
)

// callKey marks the context of one Store call, so that the tracer can
// tell which statements that call made.
type callKey struct{}

// recordingTracer records the statements it sees, with the call (from
// the context) that made each one.
type recordingTracer struct {
	mu     sync.Mutex
	byCall map[string][]string
}

func (r *recordingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	call, _ := ctx.Value(callKey{}).(string)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.byCall[call] = append(r.byCall[call], data.SQL)
	return ctx
}

func (r *recordingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *recordingTracer) calls(call string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.byCall[call]...)
}

// TestTracerSeesEveryCallWithItsContext: Options.Tracer is called for the
// statements of each Store call with the caller's context (where a span
// of the caller would be), and not at all without one.
func TestTracerSeesEveryCallWithItsContext(t *testing.T) {
	dsn := pgtest.DSN(t)
	tr := &recordingTracer{byCall: map[string][]string{}}
	s := open(t, dsn, pgstore.Options{Tracer: tr})
	call := func(name string) context.Context { return context.WithValue(t.Context(), callKey{}, name) }

	v, err := s.Put(call("put"), converge.StoreRecord{Key: "traced/a", Value: []byte(`{"n":1}`)})
	require.NoError(t, err)
	_, err = s.Get(call("get"), "traced/a")
	require.NoError(t, err)
	require.NoError(t, s.Delete(call("delete"), "traced/a", v))

	for _, c := range []string{"put", "get", "delete"} {
		assert.NotEmpty(t, tr.calls(c), "the statements of %s are traced with its context", c)
	}
	for _, q := range tr.calls("get") {
		assert.NotContains(t, q, "INSERT", "a read's statements are its own")
	}

	// Without a Tracer, nothing is traced: the same calls on a store of
	// the same database leave the tracer as it was.
	before := len(tr.calls("untraced"))
	plain := open(t, dsn, pgstore.Options{})
	_, err = plain.Put(call("untraced"), converge.StoreRecord{Key: "traced/b", Value: []byte(`{}`)})
	require.NoError(t, err)
	assert.Len(t, tr.calls("untraced"), before)
}
