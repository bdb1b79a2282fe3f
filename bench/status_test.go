package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/convergekit/converge"
)

// statusDocs builds a desired configuration of n items and an edge report
// answering it with a mix of states, messages and waits, plus a few stray
// entries the central side drops.
func statusDocs(n int) (converge.Desired, *converge.EdgeReport) {
	desired := converge.Desired{Revision: 7}
	edge := &converge.EdgeReport{Revision: 7, Time: time.Unix(1_800_000_000, 0).UTC()}
	states := []converge.EdgeState{converge.EdgePresent, converge.EdgeAbsent, converge.EdgeCreatingFailed, converge.EdgeWaitingForDependencies}
	for i := range n {
		id := converge.ID(fmt.Sprintf("app/container/item-%05d", i))
		desired.Items = append(desired.Items, converge.DesiredItem{ID: id, Presence: converge.Presence(i % 2)})
		it := converge.EdgeItem{ID: id, State: states[i%len(states)], Time: time.Unix(1_800_000_000+int64(i), 0).UTC()}
		switch it.State {
		case converge.EdgeCreatingFailed:
			it.Message = "hostcfg: /etc/app/app.conf: permission denied"
		case converge.EdgeWaitingForDependencies:
			it.WaitingFor = []converge.ID{desired.Items[max(0, i-1)].ID}
			it.Message = "waiting for dependencies"
		}
		edge.Items = append(edge.Items, it)
	}
	for i := range n / 100 {
		edge.Items = append(edge.Items, converge.EdgeItem{ID: converge.ID(fmt.Sprintf("stray-%d", i)), State: converge.EdgeAbsent})
	}
	return desired, edge
}

// stdEdgeReport has the wire shape of converge.EdgeReport with plain Go
// types and struct tags only: what encoding/json does for the same data
// with no validation and no custom marshalling — the baseline.
type stdEdgeReport struct {
	Revision uint64        `json:"revision"`
	Time     time.Time     `json:"time"`
	Items    []stdEdgeItem `json:"items"`
}

type stdEdgeItem struct {
	ID         string    `json:"id"`
	State      string    `json:"state"`
	WaitingFor []string  `json:"waitingFor,omitempty"`
	Message    string    `json:"message,omitempty"`
	Time       time.Time `json:"time"`
}

const statusItems = 10_000

// BenchmarkStatusEdgeReportJSON encodes and decodes (validating) an edge
// report of 10,000 items; MB/s counts the document once.
func BenchmarkStatusEdgeReportJSON(b *testing.B) {
	_, edge := statusDocs(statusItems)
	data, err := json.Marshal(edge)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := json.Marshal(edge)
		if err != nil {
			b.Fatal(err)
		}
		var e converge.EdgeReport
		if err := json.Unmarshal(out, &e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStatusEdgeReportStdJSON is the baseline of
// BenchmarkStatusEdgeReportJSON: the same document through plain
// encoding/json structs.
func BenchmarkStatusEdgeReportStdJSON(b *testing.B) {
	_, edge := statusDocs(statusItems)
	data, err := json.Marshal(edge)
	if err != nil {
		b.Fatal(err)
	}
	var std stdEdgeReport
	if err := json.Unmarshal(data, &std); err != nil {
		b.Fatal(err)
	}
	if len(std.Items) != len(edge.Items) || std.Items[3].State != "waiting-for-dependencies" {
		b.Fatalf("the baseline does not read the same document: %d items, %+v", len(std.Items), std.Items[3])
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		out, err := json.Marshal(std)
		if err != nil {
			b.Fatal(err)
		}
		var e stdEdgeReport
		if err := json.Unmarshal(out, &e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDeriveStatus10k derives the status of 10,000 items from their
// desired presence and an edge report; the goal is under 1 µs per item.
func BenchmarkDeriveStatus10k(b *testing.B) {
	desired, edge := statusDocs(statusItems)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	b.ReportAllocs()
	for b.Loop() {
		st, err := converge.DeriveStatus(desired, edge, log)
		if err != nil || len(st.Items) != statusItems {
			b.Fatalf("derive: %v", err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/statusItems, "ns/item")
}
