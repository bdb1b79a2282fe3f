package converge

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// edgeStrings are IDs and messages that exercise every branch of the
// string encoder: plain ASCII, what encoding/json escapes, non-ASCII and
// invalid UTF-8.
var edgeStrings = []string{"a", "app/container/web", `q"uote`, `back\\slash`, "<html>&", "tab\there", "nl\n", "\x01ctl",
	"é", "emoji 😀", "\u2028line", "bad\xffutf8", ""}

// randomEdgeReport builds a valid edge report from a seed.
func randomEdgeReport(seed uint64) EdgeReport {
	r := rand.New(rand.NewPCG(seed, seed))
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+1800), time.FixedZone("y", -7*3600)}
	at := func() time.Time {
		if r.IntN(4) == 0 {
			return time.Time{}
		}
		return time.Unix(r.Int64N(4e9), r.Int64N(1e9)*int64(r.IntN(2))).In(zones[r.IntN(len(zones))])
	}
	e := EdgeReport{Revision: r.Uint64N(1<<63) + 1, Time: at()}
	n := r.IntN(6)
	for i := range n {
		id := ID(fmt.Sprintf("%s-%d", edgeStrings[r.IntN(len(edgeStrings)-1)], i))
		it := EdgeItem{ID: id, State: EdgeState(1 + r.IntN(len(edgeStateNames)-1)), Time: at()}
		if it.State == EdgeWaitingForDependencies && i > 0 {
			it.WaitingFor = []ID{e.Items[r.IntN(i)].ID}
		}
		if r.IntN(2) == 0 {
			it.Message = edgeStrings[r.IntN(len(edgeStrings))]
		}
		e.Items = append(e.Items, it)
	}
	return e
}

// reflectEdgeJSON is how the report was encoded before appendJSON: the
// wire struct through encoding/json.
func reflectEdgeJSON(r EdgeReport) ([]byte, error) {
	w := edgeWire{Revision: r.Revision, Time: r.Time, Items: make([]edgeItemWire, len(r.Items))}
	for i, it := range r.Items {
		w.Items[i] = edgeItemWire(it)
	}
	return json.Marshal(w)
}

func TestEdgeReportEncoderWritesWhatEncodingJSONWrites(t *testing.T) {
	for seed := range uint64(2000) {
		e := randomEdgeReport(seed)
		require.NoError(t, e.Validate(), "seed %d", seed)
		want, err := reflectEdgeJSON(e)
		require.NoError(t, err)
		got, err := e.MarshalJSON()
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "seed %d", seed)
	}
}

func TestEdgeReportFastDecodeMatchesTheExactReader(t *testing.T) {
	for seed := range uint64(2000) {
		data, err := json.Marshal(randomEdgeReport(seed))
		require.NoError(t, err)
		fast, ok := decodeEdgeFast(data)
		require.True(t, ok, "a document we wrote takes the fast path: %s", data)
		exact, err := decodeEdgeExact(data)
		require.NoError(t, err)
		require.Equal(t, exact, fast, "seed %d", seed)
	}
}

// FuzzEdgeReportFastAndExactAgree: whatever the input, the fast path
// either declines or gives exactly what the exact reader gives.
func FuzzEdgeReportFastAndExactAgree(f *testing.F) {
	for seed := range uint64(8) {
		data, _ := json.Marshal(randomEdgeReport(seed))
		f.Add(data)
	}
	for _, s := range []string{
		`{"revision":1,"items":[{"id":"a","state":"present","ID":"b"}]}`,
		`{"revision":1,"items":[{"id":"a","state":"present","message":null}]}`,
		`{"revision":1,"items":[{"id":"a","state":"present","id":"b"}]}`,
		`{"revision":1,"items":[{"id":"a","state":"not-reported"}]}`,
		`{"revision":1,"items":[]}`, `{"revision":1,"items":null}`, `{"revision":1}`,
		`{"Revision":1,"items":[]}`, `{"revision":1,"items":[{"id":"a","state":"present","waitingFor":[]}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := decodeEdgeFast(data)
		exact, err := decodeEdgeExact(data)
		if !ok {
			return
		}
		require.NoError(t, err, "the fast path accepted what the exact reader refuses: %s", data)
		assert.Equal(t, exact, fast)
	})
}
