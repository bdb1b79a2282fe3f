package autopilot_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// planOfBytes returns a JSON plan document of n k0supdate commands, each
// over one worker: about 160 bytes a command.
func planOfBytes(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"apiVersion":"autopilot.k0sproject.io/v1beta2","kind":"Plan","metadata":{"name":"autopilot"},"spec":{"id":"big","timestamp":"now","commands":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"k0supdate":{"version":"v1.34.1+k0s.0","platforms":{"linux-amd64":{"url":"http://localhost/dist/k0s"}},"targets":{"workers":{"discovery":{"static":{"nodes":["worker%06d"]}}}}}}`, i)
	}
	b.WriteString(`]}}`)
	return b.Bytes()
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestDecodeRefusesOversizedPlans: a 32 MB JSON plan of 200,000 commands
// (and its YAML form) is refused with a typed error that names the cap,
// before it is read: the refusal allocates a small part of the cap, where
// reading the document allocated over 900 MB.
func TestDecodeRefusesOversizedPlans(t *testing.T) {
	big := planOfBytes(200_000)
	require.Greater(t, len(big), 30<<20)
	for _, tc := range []struct {
		name string
		in   []byte
	}{{"JSON", big}, {"YAML", append([]byte("# a plan\n"), big...)}} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := allocated(func() { _, err = autopilot.Decode(tc.in) })
			require.ErrorIs(t, err, converge.ErrTooLarge)
			require.ErrorIs(t, err, plan.ErrDecode)
			var le *converge.LimitError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, "MaxBytes", le.Limit)
			assert.Equal(t, int64(converge.DefaultMaxDocumentBytes), le.Max)
			assert.Equal(t, int64(len(tc.in)), le.Size)
			assert.Equal(t, fmt.Sprintf("plan: document: %d bytes, more than the limit of %d (DecodeLimits.MaxBytes)", len(tc.in), converge.DefaultMaxDocumentBytes), err.Error())
			t.Logf("refusing %d bytes allocated %d bytes", len(tc.in), n)
			assert.Less(t, n, uint64(converge.DefaultMaxDocumentBytes), "refused before it is read")

			var doc plan.Document
			require.ErrorIs(t, json.Unmarshal(tc.in[len(tc.in)-len(big):], &doc), converge.ErrTooLarge, "UnmarshalJSON has the same cap")
		})
	}
}

// TestDecodeWithRaisedLimits: a program raises (or lifts) the cap for
// plans it trusts; the cap also holds for the JSON that a YAML document
// becomes, which can be larger than the YAML.
func TestDecodeWithRaisedLimits(t *testing.T) {
	doc := planOfBytes(1000)
	_, err := autopilot.DecodeWith(doc, converge.DecodeLimits{MaxBytes: int64(len(doc)) - 1})
	require.ErrorIs(t, err, converge.ErrTooLarge)
	got, err := autopilot.DecodeWith(doc, converge.DecodeLimits{MaxBytes: int64(len(doc))})
	require.NoError(t, err)
	assert.Len(t, got.Spec.Commands, 1000)
	_, err = autopilot.DecodeWith(doc, converge.DecodeLimits{MaxBytes: -1})
	require.NoError(t, err)
	_, err = plan.DecodeDocument(doc, converge.DecodeLimits{MaxBytes: 100})
	require.ErrorIs(t, err, converge.ErrTooLarge)

	// 20 bytes of YAML that become a much longer JSON document.
	yaml := []byte("spec: {id: p, timestamp: now, commands: []}\nmetadata: {annotations: {a: &x aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa, b: *x, c: *x, d: *x, e: *x}}\n")
	_, err = autopilot.DecodeWith(yaml, converge.DecodeLimits{MaxBytes: int64(len(yaml))})
	var le *converge.LimitError
	require.ErrorAs(t, err, &le, "the JSON of the YAML is over the cap")
	assert.Greater(t, le.Size, int64(len(yaml)))
	_, err = autopilot.DecodeWith(yaml, converge.DecodeLimits{})
	require.NoError(t, err)
	assert.False(t, errors.Is(err, converge.ErrTooLarge))
}
