package converge_test

import (
	"bytes"
	"encoding/json"
	"errors"
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

func FuzzStatusDesiredConfigJSON(f *testing.F) {
	for _, s := range statusFuzzSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { statusRoundTrip[converge.DesiredConfig](t, data) })
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
