package converge

// MetricKind says how the values of a metric combine.
type MetricKind uint8

const (
	// MetricCounter only grows: Add with a delta of zero or more.
	MetricCounter MetricKind = iota + 1
	// MetricGauge goes up and down: Add a delta, or Set a value.
	MetricGauge
	// MetricHistogram records a distribution of values with Observe.
	MetricHistogram
)

var metricKindNames = [...]string{"", "counter", "gauge", "histogram"}

// String returns "counter", "gauge" or "histogram".
func (k MetricKind) String() string { return enumString("metric kind", metricKindNames[:], uint8(k)) }

// Metric describes one metric a loop reports. The packages that report
// metrics declare theirs as package-level variables (MetricWalkItems and
// its siblings here, more in controller and docker), so that an adapter can
// register them before the first value arrives and a test can name them.
//
// Names follow Prometheus conventions: a "converge_" prefix, the unit
// ("_seconds"), and "_total" for counters. Label values come from small,
// bounded sets (an item kind, an outcome, a state, a controller's kind) and
// never from item IDs, object keys or plan IDs, so the number of series
// stays bounded however many objects there are.
type Metric struct {
	// Name is the metric's full name, such as "converge_walk_items_total".
	Name string
	// Help is one sentence saying what is measured.
	Help string
	// Kind says how values combine.
	Kind MetricKind
	// Labels are the names of the metric's labels, in the order their
	// values are passed to Metrics.
	Labels []string
	// Buckets are the upper bounds of a histogram's buckets, ascending;
	// nil means the adapter's default.
	Buckets []float64
}

// Metrics receives the measurements of every loop: walks, target
// reconcilers, plan runners, controllers and adapters. Label values are
// given in the order of Metric.Labels. Implementations must be safe for
// concurrent use and cheap: they are called on the loops' hot paths.
// converge has no implementation beyond MetricsNop; the prometheus module
// provides one on client_golang.
type Metrics interface {
	// Add adds delta to a counter or a gauge.
	Add(m *Metric, delta float64, labels ...string)
	// Set sets a gauge to value.
	Set(m *Metric, value float64, labels ...string)
	// Observe records one value of a histogram.
	Observe(m *Metric, value float64, labels ...string)
}

// MetricsNop is the Metrics that records nothing, used wherever no Metrics
// is configured. The zero value is ready.
type MetricsNop struct{}

var _ Metrics = MetricsNop{}

// Add implements Metrics and does nothing.
func (MetricsNop) Add(*Metric, float64, ...string) {}

// Set implements Metrics and does nothing.
func (MetricsNop) Set(*Metric, float64, ...string) {}

// Observe implements Metrics and does nothing.
func (MetricsNop) Observe(*Metric, float64, ...string) {}

// MarshalText encodes k by name; an undeclared value is a *NameError.
func (k MetricKind) MarshalText() ([]byte, error) {
	return enumMarshal("metric kind", metricKindNames[:], uint8(k))
}

// UnmarshalText decodes a name written by MarshalText; an unknown name is a
// *NameError.
func (k *MetricKind) UnmarshalText(b []byte) error {
	return enumUnmarshal(k, "metric kind", metricKindNames[:], b)
}

// Buckets of the core's duration histograms, in seconds: from a millisecond
// (an item that reads a file) to ten minutes (a walk that pulls images).
var (
	metricItemBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300}
	metricWalkBuckets = []float64{0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600}
)

// The metrics of walks (WalkerConfig.Metrics). The label "target" is the
// walker's WalkerConfig.Name: a TargetReconciler's Name for its walks, empty for
// a Walker of its own. The label "kind" is an item's kind
// (ID.Kind: "file", "container", or "item" when its ID has no kind prefix),
// "outcome" an Outcome's name, "phase" a Phase's name, and "mode" the walk's
// mode, with "-dry" for a dry run: "apply", "apply-dry", "clean",
// "clean-dry".
var (
	// MetricWalkItems counts the items walks resolved, by kind and
	// outcome: checked items end "unchanged", "changed", "would-change"
	// or "failed"; "waiting" and "not-run" items did not run. The items
	// of a walk are counted when it ends, in one Add per kind and outcome.
	MetricWalkItems = &Metric{
		Name:   "converge_walk_items_total",
		Help:   "Items resolved by walks, by item kind and outcome.",
		Kind:   MetricCounter,
		Labels: []string{"target", "kind", "outcome"},
	}
	// MetricWalkItemFailures counts the items that failed, by kind and the
	// phase that failed, when the walk ends.
	MetricWalkItemFailures = &Metric{
		Name:   "converge_walk_item_failures_total",
		Help:   "Items that failed in a walk, by item kind and phase.",
		Kind:   MetricCounter,
		Labels: []string{"target", "kind", "phase"},
	}
	// MetricWalkApplyDuration observes how long an item's Apply (ApplyDry
	// in a dry run) took, by kind, for the items that needed work,
	// whether it failed or not.
	MetricWalkApplyDuration = &Metric{
		Name:    "converge_walk_apply_duration_seconds",
		Help:    "Duration of an item's Apply, by item kind.",
		Kind:    MetricHistogram,
		Labels:  []string{"target", "kind"},
		Buckets: metricItemBuckets,
	}
	// MetricWalks counts finished walks by mode and result: "success"
	// (every item converged), "error" (an item failed) or "interrupted"
	// (items were not run: the walk was cancelled or preempted). success
	// and error are controller-runtime's names for a reconcile's result.
	MetricWalks = &Metric{
		Name:   "converge_walks_total",
		Help:   "Finished walks, by mode and result.",
		Kind:   MetricCounter,
		Labels: []string{"target", "mode", "result"},
	}
	// MetricWalkDuration observes how long walks took, by mode.
	MetricWalkDuration = &Metric{
		Name:    "converge_walk_duration_seconds",
		Help:    "Duration of a walk, by mode.",
		Kind:    MetricHistogram,
		Labels:  []string{"target", "mode"},
		Buckets: metricWalkBuckets,
	}
	// MetricWalkEventsDropped counts the progress events an Observer lost
	// because it was too slow (Report.EventsDropped).
	MetricWalkEventsDropped = &Metric{
		Name:   "converge_walk_events_dropped_total",
		Help:   "Progress events dropped because the walk's Observer was too slow.",
		Kind:   MetricCounter,
		Labels: []string{"target"},
	}
)

// The metrics of target reconcilers (TargetReconcilerConfig.Walk.Metrics). The label
// "target" is the reconciler's name (TargetReconcilerConfig.Name, TargetDefaultName
// when empty), which its walks' series carry too: one series per
// reconciler in the program, however many targets it is given.
var (
	// MetricTargetPasses counts finished passes by result: "success"
	// (every stage converged), "error" or "preempted" (a new or an
	// intermediate target ended it); success and error are
	// controller-runtime's names. Passes of intermediate targets count too; a pass
	// cut short because Run stopped does not.
	MetricTargetPasses = &Metric{
		Name:   "converge_target_passes_total",
		Help:   "Finished passes of a target reconciler, by result.",
		Kind:   MetricCounter,
		Labels: []string{"target", "result"},
	}
	// MetricTargetLastSuccess is when the last pass of the reconciler's
	// own (not intermediate) target succeeded, in seconds since the Unix
	// epoch (Walk.Now's clock); no series before the first success. An
	// alert on time() minus it finds a reconciler that has not converged
	// for too long, whatever the reason.
	MetricTargetLastSuccess = &Metric{
		Name:   "converge_target_last_success_timestamp_seconds",
		Help:   "When a target reconciler's last pass succeeded, in seconds since the Unix epoch.",
		Kind:   MetricGauge,
		Labels: []string{"target"},
	}
	// MetricTargetPassDuration observes how long passes took, whatever
	// their result.
	MetricTargetPassDuration = &Metric{
		Name:    "converge_target_pass_duration_seconds",
		Help:    "Duration of a target reconciler's pass.",
		Kind:    MetricHistogram,
		Labels:  []string{"target"},
		Buckets: metricWalkBuckets,
	}
	// MetricTargetFailures is the number of passes that failed in a row;
	// 0 after a pass that succeeded or a new target.
	MetricTargetFailures = &Metric{
		Name:   "converge_target_consecutive_failures",
		Help:   "Passes of a target reconciler that failed in a row.",
		Kind:   MetricGauge,
		Labels: []string{"target"},
	}
	// MetricTargetBackoff is the delay before the next attempt after a
	// failed pass, in seconds; 0 when the reconciler is not backing off.
	MetricTargetBackoff = &Metric{
		Name:   "converge_target_backoff_seconds",
		Help:   "Delay before a target reconciler's next attempt after a failed pass.",
		Kind:   MetricGauge,
		Labels: []string{"target"},
	}
	// MetricTargetRevision is the revision of the reconciler's current
	// target (TargetReconciler.Revision).
	MetricTargetRevision = &Metric{
		Name:   "converge_target_revision",
		Help:   "Revision of a target reconciler's current target.",
		Kind:   MetricGauge,
		Labels: []string{"target"},
	}
	// MetricTargetLocked is 1 while the last pass failed because an update
	// lock is held (ErrLocked), else 0.
	MetricTargetLocked = &Metric{
		Name:   "converge_target_locked",
		Help:   "1 when a target reconciler's last pass was refused by an update lock.",
		Kind:   MetricGauge,
		Labels: []string{"target"},
	}
	// MetricTargetPendingActions is the number of host actions items
	// asked for that have not happened yet (TargetReconciler.PendingActions),
	// by action ("reboot", "shutdown"): an alert on it finds a device
	// that waits for a reboot. Set whenever the pending actions are read
	// or change, for every action (0 when none is pending).
	MetricTargetPendingActions = &Metric{
		Name:   "converge_target_pending_actions",
		Help:   "Host actions a target reconciler's items asked for that have not happened yet, by action.",
		Kind:   MetricGauge,
		Labels: []string{"target", "action"},
	}
)

// The metrics of plan runners (plan.RunnerConfig.Metrics). The label "kind" is a
// command's kind and "state" a plan.State or plan.TargetState as stored
// ("Completed", "SignalSent"): both come from the handlers' fixed sets.
// Transitions count what the runner stored (plan.Runner.Run), or what Step
// returned for its caller to store.
var (
	// MetricPlanSteps counts steps of the plan machine by result:
	// "changed" (the status changed), "unchanged" or "error" (the step
	// failed and changed nothing).
	MetricPlanSteps = &Metric{
		Name:   "converge_plan_steps_total",
		Help:   "Steps of the plan machine, by result.",
		Kind:   MetricCounter,
		Labels: []string{"result"},
	}
	// MetricPlanStepDuration observes how long steps took, handlers
	// included, storing excluded.
	MetricPlanStepDuration = &Metric{
		Name:    "converge_plan_step_duration_seconds",
		Help:    "Duration of a step of the plan machine.",
		Kind:    MetricHistogram,
		Buckets: metricItemBuckets,
	}
	// MetricPlanTransitions counts the plans that entered a state.
	MetricPlanTransitions = &Metric{
		Name:   "converge_plan_transitions_total",
		Help:   "Plans that entered a state.",
		Kind:   MetricCounter,
		Labels: []string{"state"},
	}
	// MetricPlanCommandTransitions counts the commands that entered a
	// state, by command kind.
	MetricPlanCommandTransitions = &Metric{
		Name:   "converge_plan_command_transitions_total",
		Help:   "Plan commands that entered a state, by command kind.",
		Kind:   MetricCounter,
		Labels: []string{"kind", "state"},
	}
	// MetricPlanTargetTransitions counts the targets of commands that
	// entered a state, by command kind: a target first appears (in
	// NewPlan) in its first state.
	MetricPlanTargetTransitions = &Metric{
		Name:   "converge_plan_target_transitions_total",
		Help:   "Targets of plan commands that entered a state, by command kind.",
		Kind:   MetricCounter,
		Labels: []string{"kind", "state"},
	}
)

// AllMetrics returns the descriptors of every metric the root package
// reports (walks, target reconcilers, plan runners), so that an adapter can
// register them up front.
func AllMetrics() []*Metric {
	return []*Metric{
		MetricWalkItems, MetricWalkItemFailures, MetricWalkApplyDuration, MetricWalks, MetricWalkDuration,
		MetricWalkEventsDropped,
		MetricTargetPasses, MetricTargetLastSuccess, MetricTargetPassDuration, MetricTargetFailures, MetricTargetBackoff,
		MetricTargetRevision, MetricTargetLocked, MetricTargetPendingActions,
		MetricPlanSteps, MetricPlanStepDuration, MetricPlanTransitions, MetricPlanCommandTransitions,
		MetricPlanTargetTransitions,
	}
}
