package converge

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// edgeStrings are IDs and messages that exercise every branch of the
// string encoding: plain ASCII, what encoding/json escapes, non-ASCII and
// invalid UTF-8.
var edgeStrings = []string{"a", "app/container/web", `q"uote`, `back\\slash`, "<html>&", "tab\there", "nl\n", "\x01ctl",
	"é", "emoji 😀", "\u2028line", "bad\xffutf8", ""}

// randomEdgeReport builds a valid edge report from a seed.
func randomEdgeReport(seed uint64) EdgeReport {
	r := rand.New(rand.NewPCG(seed, seed))
	zones := []*time.Location{time.UTC, time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -7*3600), time.FixedZone("UTC", 0)}
	// Nanoseconds with 0 to 9 significant digits.
	nsecs := func() int64 {
		v := r.Int64N(1e9)
		for range r.IntN(10) {
			v = v / 10 * 10
		}
		return v * int64(r.IntN(2))
	}
	at := func() time.Time {
		switch r.IntN(6) {
		case 0:
			return time.Time{}
		case 1: // any year the wire format holds, leap days included
			return time.Date(r.IntN(10000), time.Month(1+r.IntN(12)), 1+r.IntN(31), r.IntN(24), r.IntN(60), r.IntN(60), int(nsecs()), time.UTC)
		}
		return time.Unix(r.Int64N(4e9), nsecs()).In(zones[r.IntN(len(zones))])
	}
	e := EdgeReport{Revision: r.Uint64N(1<<63) + 1, Time: at()}
	n := r.IntN(6)
	if r.IntN(4) == 0 {
		n = 17 + r.IntN(40) // beyond the short lists checked pair by pair
	}
	for i := range n {
		id := ID(fmt.Sprintf("%s-%d", edgeStrings[r.IntN(len(edgeStrings)-1)], i))
		it := EdgeItem{ID: id, State: EdgeState(1 + r.IntN(len(edgeStateNames)-1)), Time: at()}
		if it.State == EdgeWaitingForDependencies && i > 0 {
			for range 1 + r.IntN(3) {
				it.WaitingFor = append(it.WaitingFor, e.Items[r.IntN(i)].ID)
			}
		}
		if r.IntN(2) == 0 {
			it.Message = edgeStrings[r.IntN(len(edgeStrings))]
		}
		e.Items = append(e.Items, it)
	}
	return e
}

// TestEdgeReportRoundTrip: every valid report, with every kind of string
// and time the wire format holds, is read back from its document as the
// same report and written again byte for byte.
func TestEdgeReportRoundTrip(t *testing.T) {
	for seed := range uint64(2000) {
		in := randomEdgeReport(seed)
		doc, err := json.Marshal(in)
		require.NoError(t, err)
		var out EdgeReport
		require.NoError(t, json.Unmarshal(doc, &out), "%s", doc)
		again, err := json.Marshal(out)
		require.NoError(t, err)
		if bytes.Contains(doc, []byte(`\ufffd`)) {
			// encoding/json writes invalid UTF-8 as an escaped U+FFFD, which
			// reads back as U+FFFD itself: from there on it is stable.
			doc = again
			out = EdgeReport{}
			require.NoError(t, json.Unmarshal(doc, &out))
			again, err = json.Marshal(out)
			require.NoError(t, err)
		}
		require.Equal(t, string(doc), string(again))
		require.Len(t, out.Items, len(in.Items))
		for i := range in.Items {
			assert.True(t, in.Items[i].Time.Equal(out.Items[i].Time), "items[%d].time", i)
		}
	}
}

// TestFirstRepeatedID checks the repeat finder against a map, on short
// lists (compared pair by pair) and long ones (hashed).
func TestFirstRepeatedID(t *testing.T) {
	naive := func(ids []ID) int {
		seen := map[ID]bool{}
		for i, id := range ids {
			if seen[id] {
				return i
			}
			seen[id] = true
		}
		return -1
	}
	r := rand.New(rand.NewPCG(3, 4))
	for range 3000 {
		n := r.IntN(80)
		ids := make([]ID, n)
		for i := range ids {
			ids[i] = ID(fmt.Sprint(r.IntN(4 * (n + 1))))
			if r.IntN(20) == 0 {
				ids[i] = ""
			}
		}
		require.Equal(t, naive(ids), firstRepeatedID(n, func(i int) ID { return ids[i] }), "%q", ids)
	}
}

// TestStatusUnknownMemberNamedByDigits: an unknown member whose name is
// all digits is named as a member, not as an index (see wire.Path).
func TestStatusUnknownMemberNamedByDigits(t *testing.T) {
	var d Desired
	err := d.UnmarshalJSON([]byte(`{"revision":1,"items":[],"12":1}`))
	var fe *StatusFieldError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, "12", fe.Field, "an unknown member named by digits is a name")
	assert.ErrorIs(t, err, ErrStatusUnknownField)
}
