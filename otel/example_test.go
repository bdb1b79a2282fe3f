package otel_test

import (
	"context"
	"fmt"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
	"github.com/convergekit/converge/otel"
)

// A walk traced into an in-memory exporter: one span for the walk, one
// per item, the items' children of the walk's. A program passes its own
// TracerProvider, exporting over OTLP.
func ExampleNew() {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer func() { _ = tp.Shutdown(context.Background()) }()

	g := converge.NewGraph()
	g.Add((&convergetest.Item{Key: "config", Goal: "v1"}).Node(), converge.Present)
	w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: 1, Tracer: otel.New(tp)})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := w.Apply(context.Background(), g); err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range exp.GetSpans() {
		fmt.Println(s.Name, s.Attributes[0].Value.Emit(), s.Parent.IsValid())
	}
	// Output:
	// converge.item config true
	// converge.walk apply false
}
