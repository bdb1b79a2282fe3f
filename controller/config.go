package controller

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// Controller defaults.
const (
	// DefaultWorkers is the number of handlers run at once when
	// Config.Workers is zero.
	DefaultWorkers = 4
	// DefaultResync is the periodic pass interval when
	// Config.Resync is zero.
	DefaultResync = 30 * time.Second
	// DefaultJitter is the periodic pass jitter when
	// Config.ResyncJitter is zero.
	DefaultJitter = 0.1
	// DefaultShutdownTimeout is how long Run lets running
	// handlers finish when Config.ShutdownTimeout is zero.
	DefaultShutdownTimeout = 10 * time.Second
	// DefaultLeaseTTL is the lease duration when
	// Config.Owner is set and LeaseTTL is zero.
	DefaultLeaseTTL = time.Minute
	// DefaultRenewDeadline is the renew deadline when Config.Owner is
	// set and both LeaseTTL and RenewDeadline are zero. A LeaseTTL set
	// with RenewDeadline zero gets two thirds of LeaseTTL, as this default
	// is two thirds of DefaultLeaseTTL.
	DefaultRenewDeadline = 40 * time.Second
	// DefaultPoll is how often a replica looks for due objects
	// when Config.Poll is zero.
	DefaultPoll = time.Second
	// DefaultHandlerHistory is how many transitions a handler sees in
	// Object.History when Config.HandlerHistory is zero.
	DefaultHandlerHistory = 10
	// DefaultFailureHistory is how many failed handler runs an object
	// keeps in Object.RecentFailures when Config.FailureHistory is zero.
	DefaultFailureHistory = 10
)

// Config configures a Controller. Kind and Handler are required;
// every other zero field takes its default.
type Config struct {
	// Kind names the object type. Objects are stored under "Kind/key".
	Kind string
	// Handler decides what happens to each object.
	Handler Handler
	// Store keeps the objects and their history; nil means a new
	// converge.MemStore, which forgets them when the process ends. A
	// controller that must come back with every object's state after a
	// restart passes a durable store: boltstore (one file, one process),
	// or pgstore (PostgreSQL) for several replicas, each with its own
	// Owner. History is bounded per object by the store's
	// converge.Retention.
	Store converge.Store
	// Workers is the most handlers run at once; 0 means
	// DefaultWorkers.
	Workers int
	// Resync is the interval of the periodic pass; 0 means
	// DefaultResync.
	Resync time.Duration
	// ResyncJitter is the fraction (0..1) of Resync added at random to each
	// object's periodic pass, so objects spread out; 0 means
	// DefaultJitter. Negative disables jitter.
	ResyncJitter float64
	// Backoff is the per-object backoff after errors; the zero value means
	// converge.DefaultBackoff.
	Backoff converge.Backoff
	// SLA is the longest an object should stay in a state; states without
	// an entry have none. Objects over it are reported by AboveSLA,
	// MetricAboveSLA and OnSLA. The time in the state is measured on the
	// monotonic clock (Monotonic) from when this controller saw the object
	// enter it, so a step of the wall clock neither reports a breach early
	// nor hides one. For an object that entered its state before this
	// controller saw it (after a restart, or from another replica), the
	// time before is taken from the wall clock (now minus Object.Since,
	// never negative) once, when the controller first sees it: an SLA that
	// started again with every restart would hide breaches, and a replica
	// whose clock runs ahead of the one that stamped Since can report such
	// an object that much early.
	SLA map[State]time.Duration
	// OnSLA, when set, is called once when an object is found above its
	// state's SLA (Breached true: when the SLA runs out, or for a replica
	// at its next Poll after that), and once more when that object leaves
	// the state or is deleted by its handler (Breached false). The breach is stored with
	// the object (Object.SLABreached) before OnSLA is called, so neither a
	// periodic pass, nor another replica, nor a restarted controller
	// reports it again: each event is reported once across replicas,
	// unless the process ends between storing it and calling OnSLA, when
	// it is lost (at most once). OnSLA is called from the controller's
	// workers and must not block for long.
	OnSLA func(SLAEvent)
	// QuarantineAfter is how many handler failures in a row, in one
	// state, quarantine an object: it is no longer run (Object.Halted is
	// HaltQuarantined, and an entry with ReasonQuarantined goes to its
	// history) until Controller.Release or Release. 0 never quarantines.
	QuarantineAfter int
	// QuarantineAfterIn overrides QuarantineAfter for the states it names;
	// 0 never quarantines in that state.
	QuarantineAfterIn map[State]int
	// Limits bounds the objects of the states it names, across every
	// controller sharing the store: how many are handled at once
	// (Limit.Concurrent) and how fast objects enter the state
	// (Limit.Every, Limit.Burst), enforced by the store's leases. A state
	// without an entry has no limit, and costs nothing for it. An object
	// put off by a limit is not failing: see Limit and MetricLimited.
	Limits map[State]Limit
	// HandlerHistory is how many of an object's newest transitions the
	// handler sees in Object.History; 0 means DefaultHandlerHistory, and
	// a negative value none. The controller reads them from the store
	// when it has not written them itself, and keeps them in memory with
	// the object (about 80 bytes per transition): a controller whose
	// handlers do not look at History saves that with a negative value.
	HandlerHistory int
	// FailureHistory is how many of an object's newest failed handler
	// runs are stored with it, in Object.RecentFailures (each costs the
	// length of its error, at most MaxErrorText bytes, in the stored
	// object); 0 means DefaultFailureHistory, and a negative value keeps
	// none.
	FailureHistory int
	// Metrics receives the controller's measurements, the metrics
	// declared in this package (MetricObjects, MetricErrors, ... see
	// AllMetrics), with the controller's Kind as their "controller" label;
	// nil means converge.MetricsNop. A Metrics that also has the method
	// Observer(d *converge.Metric, labels ...string) (func(float64), error),
	// as the prometheus module's has, times handler runs
	// (MetricHandlerDuration) through the function it returns, asked for
	// once per state; where it returns an error, the controller calls
	// Observe instead.
	Metrics converge.Metrics
	// Logger, when set, receives a record of every handler run and of
	// what followed, with the attributes "controller" (Kind), "key",
	// "state", "outcome" (a Verdict's name, "error", "terminal",
	// "quarantined", or "store-error" when what followed could not be
	// stored) and "error", and "next" for a transition; nil logs nothing.
	// Transitions and deletions are logged at Info, handler errors and
	// store errors at Warn, halts at Error, everything else (and a write
	// that lost to a concurrent one) at Debug. Messages and errors are logged as
	// the handler returned them: a handler must not put secrets in them.
	Logger *slog.Logger
	// ShutdownTimeout is how long Run lets running handlers finish after
	// its context is cancelled, before cancelling theirs; 0 means
	// DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Owner, when set, names this controller among replicas that share
	// one Store, which must then implement converge.Queue (MemStore and
	// the durable stores do). The store is the queue: each replica claims
	// due objects in batches (converge.Queue.ClaimDue, 2×Workers at a
	// time, once none of the objects it holds waits to start and it holds
	// at most 2×Workers), handles them under a lease renewed from the
	// claim on, fencing every write, and finishes the lease with the time
	// the object is due next. At most Workers handlers run at once,
	// started in the order the objects were due; an object holds a worker
	// only while its handler runs, not while the write of what it
	// returned commits, so the writes of the objects a replica holds go
	// to the store together while other objects' handlers run. A replica
	// thus holds up to 4×Workers objects, of which at most 2×Workers wait
	// to start. A
	// replica's Enqueue or Request wakes the replica that will run the
	// object (through converge.Queue.Watch), and the objects of a replica
	// that died are taken over when their leases expire. Owners must be
	// unique among the replicas (a host name plus a process ID, say).
	Owner string
	// Tracer, when set, starts a span per handler run (SpanHandle: kind,
	// state, attempt, replica, outcome), whose context the handler gets,
	// so the spans it starts through converge.StartSpan are its children.
	// A failed run has the status Error; a cancelled one (Cancel) the
	// outcome "cancelled". nil means none.
	Tracer converge.Tracer
	// LeaseTTL is how long a claim lasts without renewal, so how soon a
	// dead replica's objects are taken over; 0 means DefaultLeaseTTL.
	LeaseTTL time.Duration
	// RenewDeadline is how long a replica (Owner set) keeps handling an
	// object after the start of the last store call that claimed or
	// renewed its lease, when no renewal succeeds (the store fails, is
	// slow, or cannot be reached): at the deadline the replica cancels the
	// handler's context and writes nothing more for the object, so it
	// has stopped asking before the lease can expire in the store and
	// another replica take the object over (client-go's leader election
	// has RenewDeadline < LeaseDuration for the same reason). It is
	// measured on this process's monotonic clock, so neither Now nor a
	// step of the wall clock moves it. Renewals start when half of it has
	// passed since the last success, and failed ones are tried again every
	// tenth of it. It must be below LeaseTTL, leaving room for the
	// handler to return once cancelled and for the clocks of the store
	// and the replica to run at slightly different rates; 0 means two
	// thirds of LeaseTTL (DefaultRenewDeadline with the default LeaseTTL).
	//
	// The guarantee is the handler's to keep too: converge stops asking
	// at the deadline, but a handler that ignores its cancelled context
	// goes on beside the replica that takes the object over. Such a
	// handler, still running when the lease may have expired, is
	// reported with MetricHandlerOverruns and a log record at Error.
	RenewDeadline time.Duration
	// Poll is how often a replica (Owner set) asks the store for due
	// objects when nothing woke it; 0 means DefaultPoll.
	Poll time.Duration
	// Now returns the current time; nil means time.Now. It stamps what is
	// stored (Object.Since, history, failures): those times are for people.
	Now func() time.Time
	// Monotonic returns the time elapsed since an origin of its choosing
	// on a clock that never steps; the time an object has been in its
	// state, for the SLA, is measured on it (see Config.SLA). nil means
	// the process's monotonic clock when Now is nil or time.Now, and Now
	// itself otherwise (a test's fake clock then drives both). Set it with
	// Now to test a step of the wall clock.
	Monotonic func() time.Duration
}

// Validate reports the first field out of range as a *converge.ConfigError.
func (c Config) Validate() error {
	switch {
	case c.Kind == "":
		return &converge.ConfigError{Field: "Kind", Reason: "must not be empty"}
	case strings.Contains(c.Kind, "/"):
		return &converge.ConfigError{Field: "Kind", Reason: fmt.Sprintf("must not contain '/', got %q", c.Kind)}
	case c.Handler == nil:
		return &converge.ConfigError{Field: "Handler", Reason: "must not be nil"}
	case c.Workers < 0:
		return &converge.ConfigError{Field: "Workers", Reason: fmt.Sprintf("must not be negative, got %d", c.Workers)}
	case c.Resync < 0:
		return &converge.ConfigError{Field: "Resync", Reason: fmt.Sprintf("must not be negative, got %s", c.Resync)}
	case c.ResyncJitter > 1:
		return &converge.ConfigError{Field: "ResyncJitter", Reason: fmt.Sprintf("must be at most 1, got %g", c.ResyncJitter)}
	case c.ShutdownTimeout < 0:
		return &converge.ConfigError{Field: "ShutdownTimeout", Reason: fmt.Sprintf("must not be negative, got %s", c.ShutdownTimeout)}
	case c.LeaseTTL < 0:
		return &converge.ConfigError{Field: "LeaseTTL", Reason: fmt.Sprintf("must not be negative, got %s", c.LeaseTTL)}
	case c.RenewDeadline < 0:
		return &converge.ConfigError{Field: "RenewDeadline", Reason: fmt.Sprintf("must not be negative, got %s", c.RenewDeadline)}
	case c.RenewDeadline > 0 && c.RenewDeadline >= c.leaseTTL():
		return &converge.ConfigError{Field: "RenewDeadline", Reason: fmt.Sprintf("must be below LeaseTTL (%s), got %s", c.leaseTTL(), c.RenewDeadline)}
	case c.Poll < 0:
		return &converge.ConfigError{Field: "Poll", Reason: fmt.Sprintf("must not be negative, got %s", c.Poll)}
	case c.QuarantineAfter < 0:
		return &converge.ConfigError{Field: "QuarantineAfter", Reason: fmt.Sprintf("must not be negative, got %d", c.QuarantineAfter)}
	}
	for s, n := range c.QuarantineAfterIn {
		if n < 0 {
			return &converge.ConfigError{Field: "QuarantineAfterIn", Reason: fmt.Sprintf("state %q: must not be negative, got %d", s, n)}
		}
	}
	for s, l := range c.Limits {
		if err := l.validate(s); err != nil {
			return err
		}
	}
	if _, ok := c.Store.(converge.Queue); c.Owner != "" && c.Store != nil && !ok {
		return &converge.ConfigError{Field: "Store", Reason: fmt.Sprintf("%T does not implement converge.Queue, which replicas (Owner set) need", c.Store)}
	}
	for s, d := range c.SLA {
		if d <= 0 {
			return &converge.ConfigError{Field: "SLA", Reason: fmt.Sprintf("state %q: must be positive, got %s", s, d)}
		}
	}
	return c.Backoff.Validate()
}

// leaseTTL returns LeaseTTL or its default.
func (c Config) leaseTTL() time.Duration {
	if c.LeaseTTL == 0 {
		return DefaultLeaseTTL
	}
	return c.LeaseTTL
}

// renewDeadline returns RenewDeadline or its default for the lease TTL.
func (c Config) renewDeadline() time.Duration {
	switch {
	case c.RenewDeadline > 0:
		return c.RenewDeadline
	case c.LeaseTTL == 0:
		return DefaultRenewDeadline
	}
	return c.LeaseTTL * 2 / 3
}
