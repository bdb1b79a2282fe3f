package controller

import "time"

// Metrics receives the measurements of a Controller. Every method is called
// with the controller's kind and a lifecycle state, so that an adapter (for
// example Prometheus) maps each method to one metric with "kind" and
// "state" labels. Methods are called from the controller's workers, in
// parallel, and must not block.
//
// A Metrics that also implements HaltMetrics counts the objects the
// controller stopped running, too.
type Metrics interface {
	// ObjectsInState adds delta to the number of objects in state (a gauge).
	ObjectsInState(kind string, state State, delta int)
	// AboveSLA adds delta to the number of objects that have been in state
	// longer than its SLA (a gauge).
	AboveSLA(kind string, state State, delta int)
	// HandlerError counts a handler or store error of an object in state.
	HandlerError(kind string, state State)
	// StateEntered counts an object entering state.
	StateEntered(kind string, state State)
	// StateExited counts an object leaving state after timeInState.
	StateExited(kind string, state State, timeInState time.Duration)
	// HandlerLatency observes how long one handler run took for an object
	// in state.
	HandlerLatency(kind string, state State, d time.Duration)
}

// HaltMetrics is implemented by a Metrics that counts the objects a
// Controller does not run any more (see Object.Halted): the controller
// checks for it with a type assertion, so a Metrics written before it
// keeps working.
type HaltMetrics interface {
	// Halted adds delta to the number of objects in state halted for
	// cause (a gauge per kind, state and cause): a terminal error, or a
	// quarantine.
	Halted(kind string, state State, cause Halt, delta int)
}

// MetricsNop is the Metrics that records nothing; a Controller without
// Metrics uses it. The zero value is ready.
type MetricsNop struct{}

var (
	_ Metrics     = MetricsNop{}
	_ HaltMetrics = MetricsNop{}
)

// ObjectsInState implements Metrics and does nothing.
func (MetricsNop) ObjectsInState(string, State, int) {}

// AboveSLA implements Metrics and does nothing.
func (MetricsNop) AboveSLA(string, State, int) {}

// HandlerError implements Metrics and does nothing.
func (MetricsNop) HandlerError(string, State) {}

// StateEntered implements Metrics and does nothing.
func (MetricsNop) StateEntered(string, State) {}

// StateExited implements Metrics and does nothing.
func (MetricsNop) StateExited(string, State, time.Duration) {}

// HandlerLatency implements Metrics and does nothing.
func (MetricsNop) HandlerLatency(string, State, time.Duration) {}

// Halted implements HaltMetrics and does nothing.
func (MetricsNop) Halted(string, State, Halt, int) {}
