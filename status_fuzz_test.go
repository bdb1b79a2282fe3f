package converge_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/convergekit/converge"
)

// statusFuzzSeeds are valid and nearly valid documents of all three kinds.
var statusFuzzSeeds = []string{
	statusDesiredJSON,
	statusEdgeJSON,
	statusReportJSON,
	`{"revision":1,"items":[]}`,
	`{"revision":1,"items":null}`,
	`{"revision":1,"items":[{"id":"a","presence":"absent"}],"items":[]}`,
	`{"revision":18446744073709551615,"items":[{"id":"\u00e9\ud83d\ude00","presence":"present"}]}`,
	`{"revision":2,"time":"2026-11-22T10:00:00.123456789+05:30","items":[{"id":"a","state":"not-run","message":"<&>"}]}`,
	`{"revision":2,"edgeRevision":0,"reported":false,"ready":true,"items":[],"dropped":[]}`,
	`{"revision":1,"items":[{"id":"a","state":"waiting-for-dependencies","waitingFor":[]}]}`,
	`{"revision":1,"items":[{"id":"a","desired":"absent","edge":"not-reported","status":"removing","review":"no"}]}`,
	`null`, `[]`, `{}`, `{"revision":1.5}`, `{"revision":"1"}`,
}

// statusRoundTrip decodes data into a new T; when that succeeds, encoding
// must succeed, and decoding and encoding again must give the same bytes.
// Every decoding error must be a *StatusFieldError.
func statusRoundTrip[T any](t *testing.T, data []byte) {
	var v T
	err := json.Unmarshal(data, &v)
	if err != nil {
		var fe *converge.StatusFieldError
		var syn *json.SyntaxError
		if !errors.As(err, &fe) && !errors.As(err, &syn) {
			t.Fatalf("decode error %T is neither a *StatusFieldError nor a JSON syntax error: %v", err, err)
		}
		if fe != nil && !errors.Is(err, converge.ErrStatusInvalid) {
			t.Fatalf("decode error does not match ErrStatusInvalid: %v", err)
		}
		return
	}
	first, err := json.Marshal(&v)
	if err != nil {
		t.Fatalf("encode of a decoded %T failed: %v\ninput: %q", v, err, data)
	}
	var w T
	if err := json.Unmarshal(first, &w); err != nil {
		t.Fatalf("re-decode failed: %v\nencoded: %s", err, first)
	}
	second, err := json.Marshal(&w)
	if err != nil {
		t.Fatalf("re-encode failed: %v", err)
	}
	if !bytes.Equal(first, second) {
		t.Fatalf("round trip changed the document:\n first: %s\nsecond: %s", first, second)
	}
}

func FuzzStatusDesiredJSON(f *testing.F) {
	for _, s := range statusFuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { statusRoundTrip[converge.Desired](t, data) })
}

func FuzzStatusEdgeReportJSON(f *testing.F) {
	for _, s := range statusFuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { statusRoundTrip[converge.EdgeReport](t, data) })
}

func FuzzStatusReportJSON(f *testing.F) {
	for _, s := range statusFuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		statusRoundTrip[converge.StatusReport](t, data)
		// A decoded report's derived views never panic and agree.
		var s converge.StatusReport
		if json.Unmarshal(data, &s) == nil {
			if s.Ready() != (len(s.Transitional())+len(s.Failed()) == 0) {
				t.Fatalf("ready %v, transitional %v, failed %v", s.Ready(), s.Transitional(), s.Failed())
			}
			_ = s.Summary()
		}
	})
}

// FuzzStatusDerive builds a desired configuration and an edge report from
// the input and checks the invariants of DeriveStatus: one status per desired
// item in order, each by the table; dropped entries exactly the stray edge
// entries; readiness; and a JSON round trip of the result.
func FuzzStatusDerive(f *testing.F) {
	f.Add([]byte{1, 1, 0x10, 0x21, 0x32, 0x43}, []byte{0x11, 0x25, 0x37, 0x48})
	f.Add([]byte{2, 0x00, 0x11}, []byte{1, 0x01, 0x12, 0x73})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, d, e []byte) {
		id := func(b byte) converge.ID { return converge.ID(fmt.Sprintf("i%d", b>>4&7)) }
		desired := converge.Desired{Revision: 1}
		seen := map[converge.ID]bool{}
		for _, b := range d {
			if !seen[id(b)] {
				seen[id(b)] = true
				desired.Items = append(desired.Items, converge.DesiredItem{ID: id(b), Presence: converge.Presence(b & 1)})
			}
		}
		var edge *converge.EdgeReport
		if len(e) > 0 {
			edge = &converge.EdgeReport{Revision: uint64(e[0]%2) + 1}
			eseen := map[converge.ID]bool{}
			for _, b := range e[1:] {
				st := converge.EdgeState(b%8 + 1) // never EdgeNotReported
				if eseen[id(b)] {
					continue
				}
				eseen[id(b)] = true
				it := converge.EdgeItem{ID: id(b), State: st}
				if st == converge.EdgeWaitingForDependencies {
					it.WaitingFor = []converge.ID{"dep"}
				}
				edge.Items = append(edge.Items, it)
			}
		}
		st, err := converge.DeriveStatus(desired, edge, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Items) != len(desired.Items) {
			t.Fatalf("%d items for %d desired", len(st.Items), len(desired.Items))
		}
		ready := true
		for i, it := range st.Items {
			if it.ID != desired.Items[i].ID {
				t.Fatalf("item %d is %s, want %s", i, it.ID, desired.Items[i].ID)
			}
			want := converge.EdgeNotReported
			if e, ok := edge.Item(it.ID); ok && st.Reported {
				want = e.State
			}
			if it.Edge != want {
				t.Fatalf("%s: edge %s, want %s", it.ID, it.Edge, want)
			}
			s, r := converge.DeriveItemStatus(it.Desired, it.Edge)
			if it.Status != s || it.Attention != r || !s.Valid() {
				t.Fatalf("%s: %s/%s, table says %s/%s", it.ID, it.Status, it.Attention, s, r)
			}
			ready = ready && s.Final()
		}
		if st.Ready() != ready {
			t.Fatalf("ready %v, want %v", st.Ready(), ready)
		}
		wantDropped := 0
		if st.Reported {
			for _, it := range edge.Items {
				if !seen[it.ID] {
					wantDropped++
				}
			}
		}
		if len(st.Dropped) != wantDropped {
			t.Fatalf("%d dropped, want %d", len(st.Dropped), wantDropped)
		}
		data, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		var back converge.StatusReport
		if err := json.Unmarshal(data, &back); err != nil {
			t.Fatalf("%v\n%s", err, data)
		}
		if back.Summary() != st.Summary() || len(back.Items) != len(st.Items) || len(back.Dropped) != len(st.Dropped) {
			t.Fatalf("round trip changed the report:\n%s\n%s", st.Summary(), back.Summary())
		}
	})
}
