package bench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/plan"
)

// The decode benchmarks come in pairs: converge's strict
// reader of a document, and plain encoding/json (through sigs.k8s.io/yaml
// for YAML) on structs of the same shape with tags only: no strictness,
// no paths in errors, no validation. MB/s counts the document once.

// stdPlanDoc has the wire shape of the plan document of planDecodeDoc.
type stdPlanDoc struct {
	Spec struct {
		ID       string `json:"id"`
		Commands []struct {
			K0supdate struct {
				Version   string `json:"version"`
				Platforms map[string]struct {
					URL string `json:"url"`
				} `json:"platforms"`
				Targets map[string]struct {
					Discovery struct {
						Static struct {
							Nodes []string `json:"nodes"`
						} `json:"static"`
					} `json:"discovery"`
					Limits struct {
						Concurrent int `json:"concurrent"`
					} `json:"limits"`
				} `json:"targets"`
			} `json:"k0supdate"`
		} `json:"commands"`
	} `json:"spec"`
	Status struct {
		State    string `json:"state"`
		Commands []struct {
			ID        int    `json:"id"`
			State     string `json:"state"`
			K0supdate map[string][]struct {
				Name                 string    `json:"name"`
				State                string    `json:"state"`
				LastUpdatedTimestamp time.Time `json:"lastUpdatedTimestamp"`
			} `json:"k0supdate"`
		} `json:"commands"`
	} `json:"status"`
}

// planDecodeDoc returns the YAML (as autopilot.Encode writes it) and JSON
// documents of a 1,000-host plan with its status, the document of
// BenchmarkPlanDecode.
func planDecodeDoc(b *testing.B) (yamlDoc, jsonDoc []byte) {
	hosts := planHosts(1000)
	bus := autopilot.NewBus(hosts...)
	r, err := plan.NewRunner(nil, plan.RunnerConfig{Handlers: map[string]plan.CommandHandler{"k0supdate": &autopilot.CommandHandler{Sender: bus}}})
	if err != nil {
		b.Fatal(err)
	}
	doc := planDoc("decode", hosts, 50)
	if _, err := r.Step(context.Background(), doc); err != nil { // NewPlan fills the status
		b.Fatal(err)
	}
	if yamlDoc, err = autopilot.Encode(doc); err != nil {
		b.Fatal(err)
	}
	if jsonDoc, err = json.Marshal(doc); err != nil {
		b.Fatal(err)
	}
	var std stdPlanDoc
	if err := json.Unmarshal(jsonDoc, &std); err != nil || len(std.Status.Commands[0].K0supdate["workers"]) != 1000 {
		b.Fatalf("the baseline does not read the same document: %v", err)
	}
	return yamlDoc, jsonDoc
}

// benchDecode measures decode on data; MB/s counts data once.
func benchDecode(b *testing.B, data []byte, decode func([]byte) error) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if err := decode(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanDecodeStdYAML is the baseline of BenchmarkPlanDecode: the
// same YAML document through sigs.k8s.io/yaml into plain structs.
func BenchmarkPlanDecodeStdYAML(b *testing.B) {
	data, _ := planDecodeDoc(b)
	benchDecode(b, data, func(d []byte) error { return yaml.Unmarshal(d, new(stdPlanDoc)) })
}

// BenchmarkPlanDecodeJSON decodes the JSON document of the plan with
// autopilot.Decode (strict, validated).
func BenchmarkPlanDecodeJSON(b *testing.B) {
	_, data := planDecodeDoc(b)
	benchDecode(b, data, func(d []byte) error { _, err := autopilot.Decode(d); return err })
}

// BenchmarkPlanDecodeStdJSON is the baseline of BenchmarkPlanDecodeJSON:
// encoding/json into plain structs.
func BenchmarkPlanDecodeStdJSON(b *testing.B) {
	_, data := planDecodeDoc(b)
	benchDecode(b, data, func(d []byte) error { return json.Unmarshal(d, new(stdPlanDoc)) })
}

// edgeDecodeDoc is the document of the edge report of 10,000 items of
// BenchmarkStatusEdgeReportJSON.
func edgeDecodeDoc(b *testing.B) []byte {
	_, edge := statusDocs(statusItems)
	data, err := json.Marshal(edge)
	if err != nil {
		b.Fatal(err)
	}
	return data
}

// BenchmarkStatusEdgeReportDecode decodes (strictly, validating) the edge
// report of 10,000 items.
func BenchmarkStatusEdgeReportDecode(b *testing.B) {
	benchDecode(b, edgeDecodeDoc(b), func(d []byte) error { return json.Unmarshal(d, new(converge.EdgeReport)) })
}

// BenchmarkStatusEdgeReportDecodeStdJSON is the baseline of
// BenchmarkStatusEdgeReportDecode: encoding/json into plain structs.
func BenchmarkStatusEdgeReportDecodeStdJSON(b *testing.B) {
	benchDecode(b, edgeDecodeDoc(b), func(d []byte) error { return json.Unmarshal(d, new(stdEdgeReport)) })
}
