package controller

import (
	"context"
	"maps"
	"time"

	"github.com/convergekit/converge"
)

// The metrics a Controller reports through Config.Metrics, named after
// controller-runtime's and client-go's workqueue habits. Every one has a
// "controller" label (Config.Kind); most have a "state" label, the
// lifecycle state of the object; none has an object key, so the number of
// series is bounded by the number of kinds, states and halt causes however
// many objects there are. The state label is empty for an error not tied
// to an object's state: a stored record that cannot be decoded, or a
// replica's failed claim.
//
// MetricQueueDepth, MetricQueueAdds (of a controller's own queue),
// MetricReconciles and MetricLastSuccess are counted on the hot path and
// handed to Config.Metrics in batches: every 64 successes or failures, whenever the
// queue runs empty, and when Run returns. A scrape sees them at most 64
// runs old, and exact whenever the controller is idle. In a controller on
// its own (no Config.Owner), each worker also holds the values of
// MetricHandlerDuration and MetricQueueDuration for its own runs and
// hands them over with its counts: every 64 of its runs, whenever it
// finds the queue empty, at the start or the end of a run once it has
// held them for a millisecond, and when Run returns. Every value is
// recorded, as measured; only when it reaches Config.Metrics is batched.
var (
	// MetricObjects is the number of objects known to the controller in
	// each state (a gauge). A replica counts the objects of its view,
	// which follows the store every Resync.
	MetricObjects = &converge.Metric{
		Name: "converge_controller_objects", Kind: converge.MetricGauge,
		Help:   "Objects of a controller in each lifecycle state.",
		Labels: []string{"controller", "state"},
	}
	// MetricAboveSLA is the number of objects that have been in a state
	// longer than its SLA (Config.SLA), as found by the handler runs (a
	// gauge).
	MetricAboveSLA = &converge.Metric{
		Name: "converge_controller_objects_above_sla", Kind: converge.MetricGauge,
		Help:   "Objects that have been in their state longer than the state's SLA.",
		Labels: []string{"controller", "state"},
	}
	// MetricErrors counts the failed handler runs and the store errors of
	// objects in each state (a counter).
	MetricErrors = &converge.Metric{
		Name: "converge_controller_errors_total", Kind: converge.MetricCounter,
		Help:   "Handler and store errors of objects in each state.",
		Labels: []string{"controller", "state"},
	}
	// MetricTerminalErrors counts the handler runs that returned a
	// terminal error (see Terminal), in each state (a counter). They are
	// counted in MetricErrors too.
	MetricTerminalErrors = &converge.Metric{
		Name: "converge_controller_terminal_errors_total", Kind: converge.MetricCounter,
		Help:   "Handler runs that returned a terminal error, in each state.",
		Labels: []string{"controller", "state"},
	}
	// MetricStateEntered counts the objects entering each state, by Add, a
	// transition, or being found in the store (a counter).
	MetricStateEntered = &converge.Metric{
		Name: "converge_controller_state_entered_total", Kind: converge.MetricCounter,
		Help:   "Objects entering each state.",
		Labels: []string{"controller", "state"},
	}
	// MetricStateExited counts the objects leaving each state, by a
	// transition or being deleted (a counter).
	MetricStateExited = &converge.Metric{
		Name: "converge_controller_state_exited_total", Kind: converge.MetricCounter,
		Help:   "Objects leaving each state.",
		Labels: []string{"controller", "state"},
	}
	// MetricTimeInState is how long objects stayed in a state, observed
	// when they leave it (a histogram, in seconds, from a second to a day).
	MetricTimeInState = &converge.Metric{
		Name: "converge_controller_time_in_state_seconds", Kind: converge.MetricHistogram,
		Help:    "How long objects stayed in a state, observed when they leave it.",
		Labels:  []string{"controller", "state"},
		Buckets: []float64{1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600},
	}
	// MetricHandlerDuration is how long one handler run took for an
	// object in each state (a histogram, in seconds).
	MetricHandlerDuration = &converge.Metric{
		Name: "converge_controller_handler_duration_seconds", Kind: converge.MetricHistogram,
		Help:    "How long one handler run took, by the state of the object.",
		Labels:  []string{"controller", "state"},
		Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
	}
	// MetricQueueDepth is the number of objects ready to be handled and
	// waiting for a worker (a gauge): in the controller's queue, or, for a
	// replica, claimed from the store and not started yet.
	MetricQueueDepth = &converge.Metric{
		Name: "converge_controller_queue_depth", Kind: converge.MetricGauge,
		Help:   "Objects ready to be handled and waiting for a worker.",
		Labels: []string{"controller"},
	}
	// MetricQueueAdds counts the objects that became ready to be handled
	// (a counter): an add merged with one already waiting is not counted.
	// A replica counts the objects it claims from the store.
	MetricQueueAdds = &converge.Metric{
		Name: "converge_controller_queue_adds_total", Kind: converge.MetricCounter,
		Help:   "Objects that became ready to be handled (merged adds count once).",
		Labels: []string{"controller"},
	}
	// MetricRetries counts the handler runs scheduled again with backoff
	// after a handler or store error (a counter).
	MetricRetries = &converge.Metric{
		Name: "converge_controller_retries_total", Kind: converge.MetricCounter,
		Help:   "Objects scheduled again with backoff after an error.",
		Labels: []string{"controller"},
	}
	// MetricHalted is the number of objects the controller does not run
	// any more (see Object.Halted), in each state and for each cause,
	// "terminal" or "quarantined" (a gauge).
	MetricHalted = &converge.Metric{
		Name: "converge_controller_halted_objects", Kind: converge.MetricGauge,
		Help:   "Objects halted by a terminal error or a quarantine, in each state.",
		Labels: []string{"controller", "state", "cause"},
	}
	// MetricReconciles counts the handler runs by result, as
	// controller-runtime's controller_runtime_reconcile_total does:
	// "success" when the handler's verdict was stored, "error" when the
	// handler failed (MetricErrors splits those by state). A run whose
	// verdict could not be stored (a stale write, a lost lease, a
	// stopping controller) is neither (a counter).
	MetricReconciles = &converge.Metric{
		Name: "converge_controller_reconciles_total", Kind: converge.MetricCounter,
		Help:   "Handler runs, by result: success (the verdict was stored) or error.",
		Labels: []string{"controller", "result"},
	}
	// MetricLastSuccess is when a handler run of the controller last
	// succeeded (its verdict was stored), in seconds since the Unix epoch
	// (Config.Now's clock); no series before the first success. An alert
	// on time() minus it finds a controller that has made no progress
	// for too long (a gauge).
	MetricLastSuccess = &converge.Metric{
		Name: "converge_controller_last_success_timestamp_seconds", Kind: converge.MetricGauge,
		Help:   "When a handler run of the controller last succeeded, in seconds since the Unix epoch.",
		Labels: []string{"controller"},
	}
	// MetricQueueDuration is how long objects waited between becoming
	// due and a worker taking them (a histogram, in seconds), as
	// client-go's workqueue_queue_duration_seconds: in a controller's own
	// queue, from when the object became ready (an add, or the time of
	// a delayed one) to its hand-out; for a replica, from the due time
	// the store returns with the claim (converge.Claimed.Due, by the
	// store's clock, so a skew between the replica's clock and the
	// database's shifts it) to the start of the worker's turn on it.
	MetricQueueDuration = &converge.Metric{
		Name: "converge_controller_queue_duration_seconds", Kind: converge.MetricHistogram,
		Help:    "How long objects waited between becoming due and a worker taking them.",
		Labels:  []string{"controller"},
		Buckets: []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300},
	}
	// MetricActiveWorkers is the number of handlers running now (a
	// gauge), as controller-runtime's controller_runtime_active_workers:
	// of a replica, those running in its process. It and the two gauges
	// below are updated every MetricsInterval while Run runs, and set to
	// zero when it returns.
	MetricActiveWorkers = &converge.Metric{
		Name: "converge_controller_active_workers", Kind: converge.MetricGauge,
		Help:   "Handlers running now.",
		Labels: []string{"controller"},
	}
	// MetricUnfinishedWork is how long the handlers running now have run,
	// added up, in seconds (a gauge), as client-go's
	// workqueue_unfinished_work_seconds: a value that grows while
	// MetricActiveWorkers stays the same means stuck handlers.
	MetricUnfinishedWork = &converge.Metric{
		Name: "converge_controller_unfinished_work_seconds", Kind: converge.MetricGauge,
		Help:   "How long the handlers running now have run, added up, in seconds.",
		Labels: []string{"controller"},
	}
	// MetricLongestRunning is how long the handler that has run longest
	// of those running now has run, in seconds (a gauge), as client-go's
	// workqueue_longest_running_processor_seconds.
	MetricLongestRunning = &converge.Metric{
		Name: "converge_controller_longest_running_handler_seconds", Kind: converge.MetricGauge,
		Help:   "How long the longest-running handler running now has run, in seconds.",
		Labels: []string{"controller"},
	}
	// MetricLimited counts the objects put off by their state's limit
	// (Config.Limits), by state and by limit (a counter): "concurrent"
	// (LimitConcurrent) for a handler run not started because every
	// slot of the object's state was held, "rate" (LimitRate) for a
	// transition into the state deferred for want of a token. A rate that
	// grows for long means work waits on the limit.
	MetricLimited = &converge.Metric{
		Name: "converge_controller_limited_total", Kind: converge.MetricCounter,
		Help:   "Handler runs put off because every slot of their state's concurrency limit was held, and transitions deferred by the entry rate of their next state.",
		Labels: []string{"controller", "state", "limit"},
	}
	// MetricLimitedObjects is the number of objects waiting on their
	// state's limit now (a gauge), as client-go's workqueue_depth is of
	// a queue, by state and limit: "concurrent" for objects in the state
	// whose handler run was put off for want of a slot, "rate" for
	// objects whose transition into the state waits for a token. A
	// replica counts the objects it put off (for twice Poll, or twice the
	// limit's Every, after it last did): sum it across replicas. It is
	// updated every MetricsInterval while Run runs, and set to zero when
	// it returns. A value that stays high means the limit holds work
	// back longer than meant.
	MetricLimitedObjects = &converge.Metric{
		Name: "converge_controller_limited_objects", Kind: converge.MetricGauge,
		Help:   "Objects waiting on their state's limit now: for a concurrency slot, or for a token of the entry rate.",
		Labels: []string{"controller", "state", "limit"},
	}
	// MetricHandlerOverruns counts the handler runs of a replica that went
	// on after the replica cancelled them at its renew deadline
	// (Config.RenewDeadline) until the lease may have expired, so another
	// replica may have run the object's handler at the same time: the
	// handler ignored its context (a counter).
	MetricHandlerOverruns = &converge.Metric{
		Name: "converge_controller_handler_overruns_total", Kind: converge.MetricCounter,
		Help:   "Handler runs still going when their lost lease may have expired: the handler ignored its cancelled context.",
		Labels: []string{"controller", "state"},
	}
)

// AllMetrics returns every metric a Controller reports, for an adapter to
// register before the first value arrives.
func AllMetrics() []*converge.Metric {
	return []*converge.Metric{
		MetricObjects, MetricAboveSLA, MetricErrors, MetricTerminalErrors,
		MetricStateEntered, MetricStateExited, MetricTimeInState,
		MetricHandlerDuration, MetricQueueDepth, MetricQueueAdds,
		MetricRetries, MetricHalted, MetricHandlerOverruns,
		MetricReconciles, MetricLastSuccess,
		MetricActiveWorkers, MetricUnfinishedWork, MetricLongestRunning,
		MetricQueueDuration, MetricLimited, MetricLimitedObjects,
	}
}

// observeQueued records that an object waited d before a worker took it
// (MetricQueueDuration), through a series resolved once; a worker of a
// controller on its own (w not nil) records it with its next hand-over
// (see workerObs).
func (c *Controller) observeQueued(w *workerSlot, d time.Duration) {
	c.queueObsOnce.Do(func() {
		c.queueObs = func(v float64) { c.metrics.Observe(MetricQueueDuration, v, c.kindLabels...) }
		if so, ok := c.metrics.(seriesObserver); ok {
			if f, err := so.Observer(MetricQueueDuration, c.kindLabels...); err == nil {
				c.queueObs = f
			}
		}
	})
	v := max(d, 0).Seconds()
	if w == nil {
		c.queueObs(v)
		return
	}
	w.obs.record(c, c.queueObs, v)
}

// observeHandler records that a handler run on an object in state took d
// (MetricHandlerDuration); a worker of a controller on its own (w not
// nil) records it with its next hand-over (see workerObs), through the
// series it used last when state is the same.
func (c *Controller) observeHandler(w *workerSlot, state State, d time.Duration) {
	if w == nil {
		c.handlerObserver(state)(d.Seconds())
		return
	}
	o := &w.obs
	if o.lastObs == nil || o.lastState != state {
		o.lastState, o.lastObs = state, c.handlerObserver(state)
	}
	o.record(c, o.lastObs, d.Seconds())
}

// workerObs is what one worker of a controller on its own gathers about
// its handler runs before handing it over to the controller's counts
// and to Metrics (flush): the runs by result, its last success, and the
// histogram values of its runs (queue and handler durations). A run then
// writes memory of its worker's own, and the cache lines that every
// worker shares (the controller's counts, a histogram's buckets and sum)
// are written once per hand-over rather than once per run. Only its
// worker touches it.
//
// A worker hands over every publishEvery runs, before it waits for the
// queue or stops, and at the start or the end of a run when it has held
// something for holdAtMost: a scrape sees a worker's figures at most
// publishEvery of its runs late, or holdAtMost and the handler run going
// on, and every figure whenever the controller is idle.
type workerObs struct {
	success, errors int64
	lastSuccess     int64         // as ctrlStats.lastSuccess; 0: none held
	since           time.Duration // the monotonic reading of the start of the oldest run held
	held            bool          // since is set: something is held, or a run started
	n               int           // values held in vals
	vals            [2 * publishEvery]heldValue

	// lastState and lastObs are the state of the worker's last handler
	// run and the function that records its durations, so that a worker
	// on a run of objects in one state looks nothing up.
	lastState State
	lastObs   func(float64)
}

// heldValue is a histogram value held by a worker, and the function
// that records it.
type heldValue struct {
	observe func(float64)
	v       float64
}

// record holds v for observe, handing over first when the values are
// full.
func (o *workerObs) record(c *Controller, observe func(float64), v float64) {
	if o.n == len(o.vals) {
		c.flush(o)
	}
	o.vals[o.n] = heldValue{observe, v}
	o.n++
}

// holdAtMost is how long a worker holds its figures at most before a
// handler run starts or after one ends: a handler that runs for long
// keeps back no more than this much of its worker's earlier runs, and a
// worker whose runs take a millisecond or more hands over at each.
const holdAtMost = time.Millisecond

// starting notes that a handler run starts at start (the monotonic
// reading), first handing over what the worker has held for holdAtMost.
func (o *workerObs) starting(c *Controller, start time.Duration) {
	if o.held && start-o.since >= holdAtMost {
		c.flush(o)
	}
	if !o.held {
		o.since, o.held = start, true
	}
}

// ran counts a run that succeeded (ok) or failed, ended at end (the
// monotonic reading), and hands over what the worker holds when it holds
// publishEvery runs or has held some for holdAtMost.
func (o *workerObs) ran(c *Controller, ok bool, end time.Duration) {
	if ok {
		o.success++
		o.lastSuccess = int64(end) + 1
	} else {
		o.errors++
	}
	if o.success+o.errors >= publishEvery || o.held && end-o.since >= holdAtMost {
		c.flush(o)
	}
}

// flush hands what o holds over: its values to their histograms, its
// runs to the controller's counts, which it then publishes (see
// publish).
func (c *Controller) flush(o *workerObs) {
	for i := range o.vals[:o.n] {
		h := &o.vals[i]
		h.observe(h.v)
	}
	o.n, o.held = 0, false
	if o.success+o.errors == 0 {
		c.publish(false)
		return
	}
	if o.success > 0 {
		c.stats.success.Add(o.success)
		for {
			// The newest success wins: workers hand over in any order.
			old := c.stats.lastSuccess.Load()
			if old >= o.lastSuccess || c.stats.lastSuccess.CompareAndSwap(old, o.lastSuccess) {
				break
			}
		}
	}
	if o.errors > 0 {
		c.stats.error.Add(o.errors)
	}
	o.success, o.errors, o.lastSuccess = 0, 0, 0
	c.publish(false)
}

// MetricsInterval is how often a running Controller updates the gauges
// of its running handlers (MetricActiveWorkers, MetricUnfinishedWork,
// MetricLongestRunning), as client-go's workqueue updates its own
// every 500 ms.
const MetricsInterval = 500 * time.Millisecond

// reportRunning updates the gauges of the running handlers every
// MetricsInterval until ctx ends, then sets them to zero. It does
// nothing without metrics.
func (c *Controller) reportRunning(ctx context.Context) {
	if !c.timed {
		return
	}
	t := time.NewTicker(MetricsInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			for _, m := range []*converge.Metric{MetricActiveWorkers, MetricUnfinishedWork, MetricLongestRunning} {
				c.metrics.Set(m, 0, c.kindLabels...)
			}
			c.reportLimitedObjects(true)
			return
		case <-t.C:
		}
		active, total, longest := c.runs.running(c.mono())
		c.metrics.Set(MetricActiveWorkers, float64(active), c.kindLabels...)
		c.metrics.Set(MetricUnfinishedWork, total.Seconds(), c.kindLabels...)
		c.metrics.Set(MetricLongestRunning, longest.Seconds(), c.kindLabels...)
		c.reportLimitedObjects(false)
	}
}

// seriesObserver is a Metrics that can find a histogram series once and
// hand back a function that records values into it, as the prometheus
// module's Metrics does with its Observer method. A controller whose
// Config.Metrics has it times its handler runs through such functions,
// one per state, and not through Observe, which looks the series up on
// every call.
type seriesObserver interface {
	Observer(d *converge.Metric, labels ...string) (func(float64), error)
}

// handlerObserver returns the function that records how long a handler
// run took for an object in state (MetricHandlerDuration, labels {Kind,
// state}), made once per state, for up to maxCachedStates states.
func (c *Controller) handlerObserver(state State) func(float64) {
	old := c.handlerObs.Load()
	if old != nil {
		if f, ok := (*old)[state]; ok {
			return f
		}
		if len(*old) >= maxCachedStates {
			return c.newHandlerObserver(state) // the cache is full: no lock
		}
	}
	// A miss: under the lock, look again (another worker may have just
	// resolved it), then resolve it once and publish a new map.
	c.handlerObsMu.Lock()
	defer c.handlerObsMu.Unlock()
	old = c.handlerObs.Load()
	if old != nil {
		if f, ok := (*old)[state]; ok {
			return f
		}
	}
	f := c.newHandlerObserver(state)
	if old != nil && len(*old) >= maxCachedStates {
		return f
	}
	next := map[State]func(float64){}
	if old != nil {
		maps.Copy(next, *old)
	}
	next[state] = f
	c.handlerObs.Store(&next)
	return f
}

// maxCachedStates bounds handlerObserver's cache.
const maxCachedStates = 64

// newHandlerObserver makes handlerObserver's function for state: the
// Metrics' own when it is a seriesObserver that accepts the series, else
// one that calls Observe (which panics on what Observer rejected).
func (c *Controller) newHandlerObserver(state State) func(float64) {
	labels := []string{c.cfg.Kind, string(state)}
	if so, ok := c.metrics.(seriesObserver); ok {
		if f, err := so.Observer(MetricHandlerDuration, labels...); err == nil {
			return f
		}
	}
	return func(v float64) { c.metrics.Observe(MetricHandlerDuration, v, labels...) }
}
