package converge

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
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
		` { "revision" : 1 , "time" : "2024-02-29T23:59:59.5Z" , "items" : [ { "state" : "waiting-for-dependencies" , "waitingFor" : [ "b" , "c\u00e9" ] , "id" : "a" } ] } `,
		`{"revision":1,"items":[{"id":"a\"b","state":"present","message":"\ud83d\ude00 x\n"},{"id":"\u0061","state":"absent"}]}`,
		`{"revision":1,"items":[{"id":"a","state":"present"},{"id":"\u0061","state":"absent"}]}`,
		`{"revision":1,"items":[{"id":"bad\xffutf8","state":"present","message":"é"}]}`,
		`{"revision":1,"time":"2023-02-29T00:00:00Z","items":[]}`,
		`{"revision":1,"time":"0000-01-01T00:00:00.000000001Z","items":[]}`,
		`{"revision":1,"time":"9999-12-31T23:59:59.1234567891Z","items":[]}`,
		`{"revision":1,"time":"2026-11-22T10:00:00+00:00","items":[]}`,
		`{"revision":1,"time":"2026-11-22T10:00:00.Z","items":[]}`,
		`{"revision":1,"time":"2026-11-22T24:00:00Z","items":[]}`,
		`{"revision":1,"time":"2026-11-22t10:00:00z","items":[]}`,
		`{"revision":1,"items":[{"id":"a","state":"waiting-for-dependencies","waitingFor":["b",""]}]}`,
		`{"revision":1,"items":[{"id":"","state":"present"}]}`,
		`{"revision":0,"items":[]}`,
		`{"revision":1,"items":[{"id":"a","state":"present"}]}x`,
		`{"revision":1,"items":[{"id":"a","state":"present","ID":"b"}]}`,
		`{"revision":1,"items":[{"id":"a","state":"present","message":null}]}`,
		`{"revision":1,"items":[{"id":"a","state":"present","id":"b"}]}`,
		`{"revision":1,"items":[{"id":"a","state":"not-reported"}]}`,
		`{"revision":1,"items":[]}`, `{"revision":1,"items":null}`, `{"revision":1}`,
		`{"Revision":1,"items":[]}`, `{"revision":1,"items":[{"id":"a","state":"present","waitingFor":[]}]}`,
	} {
		f.Add([]byte(s))
	}
	// Long lists with a repeated ID far down, which the hash table finds.
	for _, dup := range []bool{false, true} {
		var b []byte
		b = append(b, `{"revision":3,"items":[`...)
		for i := range 40 {
			if i > 0 {
				b = append(b, ',')
			}
			id := i
			if dup && i == 33 {
				id = 21
			}
			b = fmt.Appendf(b, `{"id":"item-%d","state":"present"}`, id)
		}
		f.Add(append(b, "]}"...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast, ok := decodeEdgeFast(data)
		exact, err := decodeEdgeExact(data)
		if !ok {
			return
		}
		require.NoError(t, err, "the fast path accepted what the exact reader refuses: %s", data)
		assert.Equal(t, exact, fast)
		require.NoError(t, fast.Validate())
		// What encoding/json itself accepts agrees too (the exact reader
		// relies on it for syntax).
		require.True(t, json.Valid(data), "the fast path accepted invalid JSON: %q", data)
	})
}

// TestEdgeReportFastDecodeDeclines: what the fast path cannot decide it
// leaves to the exact reader, which names the problem.
func TestEdgeReportFastDecodeDeclines(t *testing.T) {
	long := func(dupAt, of int) string {
		b := []byte(`{"revision":3,"items":[`)
		for i := range 40 {
			if i > 0 {
				b = append(b, ',')
			}
			id := i
			if i == dupAt {
				id = of
			}
			b = fmt.Appendf(b, `{"id":"item-%d","state":"present"}`, id)
		}
		return string(append(b, "]}"...))
	}
	tests := []struct {
		name, in string
		want     error
		field    string
	}{
		{"repeat far down a long list", long(33, 21), ErrStatusDuplicateID, "items[33].id"},
		{"repeat of the first", long(39, 0), ErrStatusDuplicateID, "items[39].id"},
		{"repeat written with an escape", `{"revision":1,"items":[{"id":"a","state":"present"},{"id":"\u0061","state":"absent"}]}`, ErrStatusDuplicateID, "items[1].id"},
		{"empty waitingFor entry", `{"revision":1,"items":[{"id":"a","state":"waiting-for-dependencies","waitingFor":["b",""]}]}`, ErrStatusEmptyID, "items[0].waitingFor[1]"},
		{"no such day", `{"revision":1,"time":"2023-02-29T00:00:00Z","items":[]}`, ErrStatusMalformed, "time"},
		{"hour 24", `{"revision":1,"items":[{"id":"a","state":"present","time":"2026-11-22T24:00:00Z"}]}`, ErrStatusMalformed, "items[0].time"},
		{"revision 0", `{"revision":0,"items":[]}`, ErrStatusNoRevision, "revision"},
		{"trailing data", `{"revision":1,"items":[]}x`, ErrStatusMalformed, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, ok := decodeEdgeFast([]byte(tt.in))
			assert.False(t, ok)
			var e EdgeReport
			err := e.UnmarshalJSON([]byte(tt.in))
			require.ErrorIs(t, err, tt.want)
			var fe *StatusFieldError
			require.ErrorAs(t, err, &fe)
			assert.Equal(t, tt.field, fe.Field)
		})
	}
}

// TestEdgeReportFastDecodeSharesMemory: the strings of a decoded report
// share one allocation, and so do its waitingFor lists, whose capacity
// ends with them so that appending to one never writes into another.
func TestEdgeReportFastDecodeSharesMemory(t *testing.T) {
	in := `{"revision":1,"items":[{"id":"a","state":"waiting-for-dependencies","waitingFor":["b","c"]},` +
		`{"id":"b","state":"waiting-for-dependencies","waitingFor":["c"]},{"id":"c","state":"creating-failed","message":"m"}]}`
	e, ok := decodeEdgeFast([]byte(in))
	require.True(t, ok)
	assert.Equal(t, []ID{"b", "c"}, e.Items[0].WaitingFor)
	assert.Equal(t, 2, cap(e.Items[0].WaitingFor))
	_ = append(e.Items[0].WaitingFor, "x")
	assert.Equal(t, []ID{"c"}, e.Items[1].WaitingFor)
	assert.Equal(t, "m", e.Items[2].Message)

	// 500 items, 1,500 strings: the allocations are those of the growing
	// records and the few results, none per string.
	big := EdgeReport{Revision: 1}
	for i := range 500 {
		big.Items = append(big.Items, EdgeItem{ID: ID(fmt.Sprint("item-", i)), State: EdgeWaitingForDependencies,
			WaitingFor: []ID{"x"}, Message: "waiting", Time: time.Unix(int64(i), 0).UTC()})
	}
	data, err := json.Marshal(big)
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(20, func() {
		if _, ok := decodeEdgeFast(data); !ok {
			t.Fatal("declined")
		}
	})
	assert.Less(t, allocs, 40.0)
}

// TestUTCTimeMatchesPackageTime: the UTC times this package formats and
// parses itself are exactly those of package time, over all years the
// wire format holds.
func TestUTCTimeMatchesPackageTime(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fixed := []time.Time{
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(0, 2, 29, 12, 0, 0, 0, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
		time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2000, 2, 29, 0, 0, 0, 100, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 120_000_000, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999_999_999, time.UTC),
	}
	for i := range 20000 {
		var at time.Time
		if i < len(fixed) {
			at = fixed[i]
		} else {
			at = time.Unix(r.Int64N(253402300800+62167219200)-62167219200, r.Int64N(1e9)/int64(1+r.IntN(1000))).UTC()
		}
		want, err := at.MarshalJSON()
		require.NoError(t, err)
		got, err := appendJSONTime(nil, at)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "%v", at)

		sec, nsec, ok := parseUTCTime(got[1 : len(got)-1])
		require.True(t, ok, "%s", got)
		var back time.Time
		require.NoError(t, back.UnmarshalJSON(got))
		require.Equal(t, back, time.Unix(sec, int64(nsec)).UTC(), "%s", got)
	}
	// Just outside the years the wire format holds, encoding fails as
	// encoding/json fails.
	for _, at := range []time.Time{time.Date(-1, 12, 31, 23, 59, 59, 999_999_999, time.UTC), time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)} {
		_, want := at.MarshalJSON()
		require.Error(t, want)
		_, err := appendJSONTime(nil, at)
		require.EqualError(t, err, want.Error())
	}
}

// FuzzParseUTCTime: whatever parseUTCTime accepts, time.Time's JSON
// decoding accepts as the same instant in UTC.
func FuzzParseUTCTime(f *testing.F) {
	for _, s := range []string{"2026-11-22T10:00:00Z", "2024-02-29T23:59:59.123456789Z", "2023-02-29T00:00:00Z",
		"0000-01-01T00:00:00.1Z", "2026-11-22T10:00:00+01:00", "2026-11-22T10:00:00.Z", "2026-11-22T10:00:00.1234567890Z",
		"2026-11-22 10:00:00Z", "+026-11-22T10:00:00Z", "2026-1a-22T10:00:00Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sec, nsec, ok := parseUTCTime([]byte(s))
		if !ok {
			return
		}
		var want time.Time
		require.NoError(t, want.UnmarshalJSON([]byte(`"`+s+`"`)), "%q", s)
		require.Equal(t, want, time.Unix(sec, int64(nsec)).UTC(), "%q", s)
	})
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

// plainEndByByte is plainEnd one byte at a time.
func plainEndByByte(b []byte, j int) int {
	for j < len(b) && strPlain[b[j]] {
		j++
	}
	return j
}

// TestPlainEnd: the word-at-a-time scan stops where the byte-at-a-time
// one does, for every kind of byte at every place of a word.
func TestPlainEnd(t *testing.T) {
	stops := []byte{'"', '\\', 0, 0x1f, 0x7f + 1, 0xff, 0xe2}
	for n := range 24 {
		for at := range n {
			for _, c := range append(stops, 'a', ' ', '~', 0x20, '!', '#', '[', ']') {
				b := []byte(strings.Repeat("x", n))
				b[at] = c
				for start := range n {
					require.Equal(t, plainEndByByte(b, start), plainEnd(b, start), "%q from %d", b, start)
				}
			}
		}
	}
}

func FuzzPlainEnd(f *testing.F) {
	f.Add([]byte(`app/container/item-00001","state":"present"`), 0)
	f.Add([]byte("\x01\x02\x21\x22\x5b\x5c\x5d\x7f\x80"), 1)
	f.Fuzz(func(t *testing.T, b []byte, start int) {
		if start < 0 || start > len(b) {
			return
		}
		require.Equal(t, plainEndByByte(b, start), plainEnd(b, start))
	})
}
