package converge_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// TestEdgeReportAssertStep mirrors openDuT's configuration/state loop,
// step "3. Assert" (eclipse-opendut/opendut
// doc/src/architecture/carl/peer/configuration-state-loop.md, and EDGAR's
// opendut-edgar/src/service/service_runner.rs, where an error of the check
// after the change is DetermineSystemStateAfter, reported as
// CheckPresentFailed / CheckAbsentFailed; commit
// a0c6a490767d9de4a3bc6c7d6caa5bb96d5f150f): a walk whose check after
// Apply fails reports the item's state unknown, CheckPresentFailed or
// CheckAbsentFailed, and only an item read again and still not converged
// is CreatingFailed or RemovingFailed. The central status follows.
func TestEdgeReportAssertStep(t *testing.T) {
	boom := errors.New("netlink: timeout")
	tests := []struct {
		name     string
		presence converge.Presence
		item     func() *convergetest.Item
		edge     converge.EdgeState
		status   converge.Status
	}{
		{"check after create fails", converge.Present,
			func() *convergetest.Item {
				return (&convergetest.Item{Key: "br0", Goal: "up"}).FailAt(converge.PhaseVerify, 1, boom)
			},
			converge.EdgeCheckPresentFailed, converge.StatusCheckPresentFailed},
		{"check after remove fails", converge.Absent,
			func() *convergetest.Item {
				return (&convergetest.Item{Key: "br0", Goal: "up", Value: "up"}).FailAt(converge.PhaseVerify, 1, boom)
			},
			converge.EdgeCheckAbsentFailed, converge.StatusCheckAbsentFailed},
		{"created but still differs", converge.Present,
			func() *convergetest.Item { return &convergetest.Item{Key: "br0", Goal: "up", Stuck: true} },
			converge.EdgeCreatingFailed, converge.StatusCreatingFailed},
		{"removed but still there", converge.Absent,
			func() *convergetest.Item { return &convergetest.Item{Key: "br0", Goal: "up", Value: "up", Stuck: true} },
			converge.EdgeRemovingFailed, converge.StatusRemovingFailed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := converge.NewGraph()
			it := tc.item()
			g.Add(it.Node(), tc.presence)
			rep, err := converge.Apply(t.Context(), g)
			require.Error(t, err)
			require.Equal(t, converge.PhaseVerify, rep.Items[0].Phase)
			edge, err := converge.EdgeReportFrom(rep, 3, time.Now())
			require.NoError(t, err)
			assert.Equal(t, tc.edge, edge.Items[0].State)
			st, err := converge.DeriveStatus(converge.Desired{Revision: 3, Items: []converge.DesiredItem{{ID: "br0", Presence: tc.presence}}}, edge, nil)
			require.NoError(t, err)
			item, _ := st.Item("br0")
			assert.Equal(t, tc.status, item.Status)
			assert.Equal(t, converge.AttentionNeeded, item.Attention)
		})
	}
}

// edgeReportOfItems returns an edge report document of n items, about 30
// bytes an item.
func edgeReportOfItems(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"revision":7,"items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"id":"i%07d","state":"present"}`, i)
	}
	b.WriteString(`]}`)
	return b.Bytes()
}

// TestEdgeReportRefusedWhenTooLarge: an edge report of one million items
// (about 30 MB), the input a central server takes from devices it does not
// control, is refused with a *LimitError before it is read, allocating a
// small part of the cap (reading it allocated 1.47 GB).
func TestEdgeReportRefusedWhenTooLarge(t *testing.T) {
	doc := edgeReportOfItems(1_000_000)
	require.Greater(t, len(doc), 30<<20)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := converge.DecodeEdgeReport(doc, converge.DecodeLimits{})
	runtime.ReadMemStats(&after)
	require.ErrorIs(t, err, converge.ErrTooLarge)
	var le *converge.LimitError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, converge.LimitError{Doc: "edge report", Limit: "MaxBytes", Max: converge.DefaultMaxDocumentBytes, Size: int64(len(doc))}, *le)
	assert.Equal(t, fmt.Sprintf("converge: edge report: %d bytes, more than the limit of %d (DecodeLimits.MaxBytes)", len(doc), converge.DefaultMaxDocumentBytes), err.Error())
	n := after.TotalAlloc - before.TotalAlloc
	t.Logf("refusing %d bytes allocated %d bytes", len(doc), n)
	assert.Less(t, n, uint64(converge.DefaultMaxDocumentBytes))

	var e converge.EdgeReport
	require.ErrorIs(t, json.Unmarshal(doc, &e), converge.ErrTooLarge, "UnmarshalJSON has the default cap")
	var d converge.Desired
	require.ErrorIs(t, json.Unmarshal(doc, &d), converge.ErrTooLarge)
	var s converge.StatusReport
	require.ErrorIs(t, json.Unmarshal(doc, &s), converge.ErrTooLarge)

	// A program raises the cap, or lifts it, for what it trusts.
	small := edgeReportOfItems(1000)
	_, err = converge.DecodeEdgeReport(small, converge.DecodeLimits{MaxBytes: int64(len(small)) - 1})
	require.ErrorIs(t, err, converge.ErrTooLarge)
	got, err := converge.DecodeEdgeReport(small, converge.DecodeLimits{MaxBytes: int64(len(small))})
	require.NoError(t, err)
	assert.Len(t, got.Items, 1000)
	got, err = converge.DecodeEdgeReport(small, converge.DecodeLimits{MaxBytes: -1})
	require.NoError(t, err)
	assert.Len(t, got.Items, 1000)
}

// TestStatusDocumentsRefuseInvalidUTF8: invalid UTF-8 in a status
// document is refused, naming the field, where it was read as U+FFFD.
func TestStatusDocumentsRefuseInvalidUTF8(t *testing.T) {
	for _, tc := range []struct {
		name, doc, field string
		decode           func([]byte) error
	}{
		{"edge report id", "{\"revision\":1,\"items\":[{\"id\":\"a\xff\",\"state\":\"present\"}]}", "items[0].id",
			func(b []byte) error { _, err := converge.DecodeEdgeReport(b, converge.DecodeLimits{}); return err }},
		{"edge report message", "{\"revision\":1,\"items\":[{\"id\":\"a\",\"state\":\"present\",\"message\":\"\xc3\"}]}", "items[0].message",
			func(b []byte) error { _, err := converge.DecodeEdgeReport(b, converge.DecodeLimits{}); return err }},
		{"desired id", "{\"revision\":1,\"items\":[{\"id\":\"\xfe\",\"presence\":\"present\"}]}", "items[0].id",
			func(b []byte) error { _, err := converge.DecodeDesired(b, converge.DecodeLimits{}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.decode([]byte(tc.doc))
			require.ErrorIs(t, err, converge.ErrStatusInvalid)
			var fe *converge.StatusFieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tc.field, fe.Field)
		})
	}
}
