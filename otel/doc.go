// Package otel traces converge's work with OpenTelemetry: a
// TargetReconciler's passes, their stages, walks and items, the docker
// module's engine calls for an item, a controller's handler runs, a plan's
// steps and signals, and the fleet link, whose W3C trace context joins a
// rollout on the server and a device's pass in one trace.
//
// converge's packages import no OpenTelemetry: they start their spans
// through converge.Tracer, which New implements over a TracerProvider.
// A program opts in by setting it:
//
//	tr := otel.New(tp) // tp: an sdktrace.TracerProvider with its exporter
//	walk := converge.WalkerConfig{Tracer: tr}
//	rec, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[T]{Walk: walk, ...})
//	ctl, err := controller.New(controller.Config{Tracer: tr, ...})
//
// Without a Tracer nothing changes and nothing is spent. With one whose
// sampler drops a walk's span, a walk costs one span and its items none
// (see converge.Span's Recording).
//
// The spans and their attributes (keys in the converge package: AttrItem,
// AttrOutcome, ...):
//
//	converge.pass   target, revision, pass, intermediate, forced, outcome (finished, failed, preempted, cancelled)
//	converge.stage  stage, round (walks in the stage)
//	converge.walk   mode, dry, items; not_run and waiting when not all ran
//	converge.item   item, presence, outcome, phase (when it failed); events apply and verify
//	docker.<Op>     the Engine method (docker.ContainerCreate, ...), for an item's engine calls
//	controller.handle  kind, state, attempt, replica, outcome (a verdict, error, terminal, cancelled)
//	plan.step       plan, command, kind, state, next: a step's handler call, parent of the signals it sends
//	fleet.rollout   rollout: a replica's run of a rollout (fleet.Config.Tracer)
//	fleet.move      device: a wave moving a device, under which its target is set
//	fleet.report    device, outcome (accepted, invalid, out_of_order, too_large, refused), revision: a device's report post on the server
//
// The fleet link carries the W3C trace context: fleet.Server.SetTarget
// stores the traceparent of its context's span with the target, the agent
// receives it (fleet.Target.TraceParent) and sends it back on its report
// (whose fleet.report span on the server is then a child of the span that
// set the target), and a device reconciler given TraceParent: fleet.TargetTraceParent makes
// its passes children of it. One trace then runs from a rollout on the
// server to an engine call on the device.
//
// A plan's signals carry the trace too: autopilot.Signal.TraceParent is
// the traceparent of the step that sent it, and a node that starts its
// work from it (converge.WithTraceParent) joins the plan's trace.
//
// The store's calls on PostgreSQL are traced by pgx's own instrumentation:
// give pgstore.Options.Tracer otelpgx.NewTracer() (github.com/exaring/otelpgx)
// on the same TracerProvider, and the statements a handler's or a move's
// store call makes are spans under that handler run or move.
//
// Attributes are bounded: identifiers and names the program chose, enums
// and counts; never a state, a target or a secret. A failed item, pass,
// handler run or call has the status Error with the error's text.
package otel
