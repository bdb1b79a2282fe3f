package convergetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// Schedule is one randomized run of controller replicas on one shared
// store under faults, for RunSchedule: replicas are cut off (calls fail
// or hang), healed, slowed, killed and restarted, and their wall clocks
// stepped, at random times drawn from Seed, while every handler run is
// recorded. The zero value is not valid: Stores needs two handles at
// least.
type Schedule struct {
	// Seed draws the faults, their times and the handlers' work.
	Seed uint64
	// Kind is the controller kind of the run; empty means "sched" and the
	// seed. Runs on one storage with different kinds do not meet.
	Kind string
	// Stores are the replicas' handles on one shared storage, one per
	// replica: the same MemStore, bolt store or database. Each is wrapped
	// in a FaultStore.
	Stores []converge.Queue
	// Links, when set, has one Link per store, cut and slowed instead of
	// the FaultStores: a TCP proxy between a replica and its database
	// server, say. The FaultStores then only step the replicas' clocks.
	Links []Link
	// Objects is the number of objects; 0 means 6.
	Objects int
	// LeaseTTL is the replicas' controller.Config.LeaseTTL (their
	// RenewDeadline is its default, two thirds of it); 0 means one
	// second. Handlers work up to half of it, faults come every eighth to
	// whole of it.
	LeaseTTL time.Duration
	// Length is how long faults are injected; 0 means ten LeaseTTLs.
	// Then every link is healed and the replicas are stopped.
	Length time.Duration
	// Limit, when positive, limits the handlers of objects in the state
	// LimitedState to Limit at once across the replicas
	// (controller.Config.Limits, Limit.Concurrent), and the result says
	// the most seen (ScheduleResult.MostAtOnce), which Err checks.
	Limit int
	// Every, when positive, limits the rate at which objects enter
	// LimitedState to Burst in any span of Burst×Every
	// (controller.Config.Limits, Limit.Every and Limit.Burst), and the
	// result counts the entries (ScheduleResult.Entries) and the most
	// made in one such span (MostInWindow), which Err checks. Entries are
	// timed on the store's clock, beneath the faults: from the call that
	// made one to the store's answer, as time.Now reads them (see
	// Entries.MostIn), whatever the replicas' stepped clocks say.
	Every time.Duration
	// Burst is the rate limit's Burst (see Every); 0 means 1.
	Burst int
}

// LimitedState is the state of a schedule's objects whose handlers
// Schedule.Limit limits. The objects move between the states "a" and
// LimitedState.
const LimitedState = "b"

// ScheduleResult is what a RunSchedule saw.
type ScheduleResult struct {
	// Runs is the number of handler runs recorded and checked.
	Runs int
	// Overlaps are the runs of one object that overlapped: there must be
	// none.
	Overlaps []Overlap
	// Faults is the number of faults injected (cuts, slowdowns, kills,
	// clock steps); Partitions, Slowdowns, Kills and ClockSteps count
	// them by kind.
	Faults                                   int
	Partitions, Slowdowns, Kills, ClockSteps int
	// Limit is Schedule.Limit, and MostAtOnce the most handler runs of
	// objects in LimitedState seen at one time, across every replica
	// (Runs.MostAtOnce). It must not be above Limit.
	Limit, MostAtOnce int
	// Every and Burst are the schedule's (Burst at least 1 when Every is
	// set); Entries is the number of entries into LimitedState the store
	// made, and MostInWindow the most of them made in one span of
	// Burst×Every (Entries.MostIn). It must not be above Burst.
	Every        time.Duration
	Burst        int
	Entries      int
	MostInWindow int
	// Overruns is the number of handler runs the controllers reported in
	// controller.MetricHandlerOverruns. The handlers of a schedule honour
	// their context, so it must be 0.
	Overruns int
	// Events says what was done when, for a failure message.
	Events []string
}

// ErrOverlap is matched by the error of a ScheduleResult whose runs
// overlapped or whose handlers overran their leases.
var ErrOverlap = errors.New("convergetest: handler runs of one object overlapped")

// ErrLimitExceeded is matched by the error of a ScheduleResult that saw
// more handlers run at once in the limited state than Schedule.Limit.
var ErrLimitExceeded = errors.New("convergetest: more handlers ran at once in a limited state than its limit")

// ErrRateExceeded is matched by the error of a ScheduleResult that saw
// more entries into the limited state in one span of Burst×Every than
// Schedule.Burst.
var ErrRateExceeded = errors.New("convergetest: more objects entered a limited state in one span than its entry rate allows")

// Err returns nil when the schedule showed no overlap, no overrun, no
// more handlers at once in LimitedState than its limit and no more
// entries into it in one span than its rate allows, and otherwise an
// error matching ErrOverlap, ErrLimitExceeded or ErrRateExceeded that
// lists every overlap and the schedule's events, for a failure message.
func (r ScheduleResult) Err() error {
	exceeded := r.Limit > 0 && r.MostAtOnce > r.Limit
	fast := r.Every > 0 && r.MostInWindow > r.Burst
	if len(r.Overlaps) == 0 && r.Overruns == 0 && !exceeded && !fast {
		return nil
	}
	var b strings.Builder
	if exceeded {
		fmt.Fprintf(&b, "%d handlers at once in state %q, above its limit of %d; ", r.MostAtOnce, LimitedState, r.Limit)
	}
	if fast {
		fmt.Fprintf(&b, "%d entries into state %q within %s, above its burst of %d; ", r.MostInWindow, LimitedState, time.Duration(r.Burst)*r.Every, r.Burst)
	}
	fmt.Fprintf(&b, "%d overlaps, %d overruns:\n", len(r.Overlaps), r.Overruns)
	for _, o := range r.Overlaps {
		b.WriteString(o.String() + "\n")
	}
	b.WriteString("events:\n" + strings.Join(r.Events, "\n"))
	if len(r.Overlaps) == 0 && r.Overruns == 0 {
		if !exceeded {
			return fmt.Errorf("%w: %s", ErrRateExceeded, b.String())
		}
		return fmt.Errorf("%w: %s", ErrLimitExceeded, b.String())
	}
	return fmt.Errorf("%w: %s", ErrOverlap, b.String())
}

// RunSchedule runs the replicas of s, records every handler run as an
// interval (Runs) and returns what it saw; it fails only when the run
// cannot be set up (a store that fails before any fault, an invalid
// Schedule). Time passes as the schedule says (Length plus the time to
// stop the replicas), on the clock of time.Sleep: run it inside a
// testing/synctest bubble when the stores are in memory, for a run that
// takes no real time. The handlers honour their contexts, as a handler
// must; so a result with overlaps means converge let two replicas handle
// one object at once.
func RunSchedule(ctx context.Context, s Schedule) (ScheduleResult, error) {
	if len(s.Stores) < 2 {
		return ScheduleResult{}, errors.New("convergetest: schedule needs two stores at least")
	}
	if s.Links != nil && len(s.Links) != len(s.Stores) {
		return ScheduleResult{}, fmt.Errorf("convergetest: schedule has %d links for %d stores", len(s.Links), len(s.Stores))
	}
	ttl := s.LeaseTTL
	if ttl <= 0 {
		ttl = time.Second
	}
	length := s.Length
	if length <= 0 {
		length = 10 * ttl
	}
	objects := s.Objects
	if objects <= 0 {
		objects = 6
	}
	kind := s.Kind
	if kind == "" {
		kind = fmt.Sprintf("sched%d", s.Seed)
	}
	if s.Limit < 0 || s.Every < 0 || s.Burst < 0 || (s.Burst > 0 && s.Every == 0) {
		return ScheduleResult{}, fmt.Errorf("convergetest: schedule limits Limit=%d Every=%s Burst=%d are not valid", s.Limit, s.Every, s.Burst)
	}
	burst := s.Burst
	if s.Every > 0 {
		burst = max(burst, 1)
	}
	sc := &schedule{ttl: ttl, kind: kind, limit: s.Limit, every: s.Every, burst: burst, rng: rand.New(rand.NewPCG(s.Seed, 0x5eed))}
	for i, st := range s.Stores {
		if s.Every > 0 {
			st = entryStore{Queue: st, prefix: kind + "/", entries: &sc.entries}
		}
		fs := NewFaultStore(st)
		r := &replica{id: i, fs: fs, link: Link(fs)}
		if s.Links != nil {
			r.link = s.Links[i]
		}
		sc.replicas = append(sc.replicas, r)
	}
	first, err := sc.controller(sc.replicas[0])
	if err != nil {
		return ScheduleResult{}, err
	}
	for i := range objects {
		if err := first.Add(ctx, fmt.Sprintf("o%d", i), "a", nil); err != nil {
			return ScheduleResult{}, err
		}
	}
	for _, r := range sc.replicas {
		if err := sc.start(ctx, r); err != nil {
			sc.stopAll()
			return ScheduleResult{}, err
		}
	}
	for t0 := time.Now(); time.Since(t0) < length; {
		time.Sleep(sc.between(ttl/8, ttl))
		if err := sc.fault(ctx); err != nil {
			sc.stopAll()
			return ScheduleResult{}, err
		}
	}
	sc.stopAll()
	res := ScheduleResult{
		Runs:     sc.runs.Len(),
		Overlaps: sc.runs.Overlaps(),
		Faults:   sc.faults,
		Overruns: int(sc.overruns.Load()),
		Events:   sc.events,
		Limit:    s.Limit,
	}
	res.Partitions, res.Slowdowns, res.Kills, res.ClockSteps = sc.partitions, sc.slowdowns, sc.kills, sc.steps
	if s.Limit > 0 {
		res.MostAtOnce = sc.runs.MostAtOnce(LimitedState)
	}
	if s.Every > 0 {
		res.Every, res.Burst = s.Every, burst
		res.Entries = sc.entries.Len()
		res.MostInWindow = sc.entries.MostIn(time.Duration(burst) * s.Every)
	}
	return res, nil
}

type schedule struct {
	ttl      time.Duration
	kind     string
	replicas []*replica
	runs     Runs
	faults   int
	limit    int
	every    time.Duration
	burst    int
	entries  Entries
	// The faults by kind.
	partitions, slowdowns, kills, steps int
	events                              []string
	overruns                            atomic.Int64
	t0                                  time.Time

	mu  sync.Mutex // guards rng, which handlers use too
	rng *rand.Rand
}

type replica struct {
	id     int
	fs     *FaultStore
	link   Link
	gen    int
	cancel context.CancelFunc
	done   chan struct{}
}

// between returns a random duration in [lo, hi).
func (sc *schedule) between(lo, hi time.Duration) time.Duration {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return lo + time.Duration(sc.rng.Int64N(int64(hi-lo)))
}

func (sc *schedule) intN(n int) int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.rng.IntN(n)
}

func (sc *schedule) event(format string, args ...any) {
	if sc.t0.IsZero() {
		sc.t0 = time.Now()
	}
	sc.events = append(sc.events, fmt.Sprintf("%8s ", time.Since(sc.t0).Round(time.Millisecond))+fmt.Sprintf(format, args...))
}

// controller makes the controller of r's current generation.
func (sc *schedule) controller(r *replica) (*controller.Controller, error) {
	owner := fmt.Sprintf("r%d.%d", r.id, r.gen)
	ttl := sc.ttl
	var limits map[controller.State]controller.Limit
	if sc.limit > 0 || sc.every > 0 {
		limits = map[controller.State]controller.Limit{LimitedState: {Concurrent: sc.limit, Every: sc.every, Burst: sc.burst}}
	}
	return controller.New(controller.Config{
		Limits: limits,
		Kind:   sc.kind, Store: r.fs, Owner: owner, LeaseTTL: ttl,
		Poll: ttl / 4, Resync: ttl, Workers: 2, ShutdownTimeout: ttl / 4,
		Backoff:        converge.Backoff{Base: ttl / 20, Max: ttl / 2, Jitter: 0.2},
		HandlerHistory: -1,
		Now:            r.fs.Now,
		Metrics:        overrunCounter{&sc.overruns},
		Handler: controller.HandlerFunc(func(ctx context.Context, o controller.Object) (controller.Result, error) {
			defer sc.runs.BeginIn(o.Key, owner, string(o.State))()
			t := time.NewTimer(sc.between(0, ttl/2))
			defer t.Stop()
			select {
			case <-ctx.Done():
				return controller.Result{}, context.Cause(ctx)
			case <-t.C:
			}
			if sc.intN(5) == 0 {
				next := controller.State("a")
				if o.State == "a" {
					next = LimitedState
				}
				return controller.Transition(next), nil
			}
			return controller.NoChange().After(sc.between(ttl/8, ttl/2)), nil
		}),
	})
}

// start runs a new generation of r.
func (sc *schedule) start(ctx context.Context, r *replica) error {
	r.gen++
	c, err := sc.controller(r)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	r.cancel, r.done = cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		_ = c.Run(rctx) // ErrShutdownTimeout is expected after a kill
	}(r.done)
	return nil
}

// fault injects one random fault.
func (sc *schedule) fault(ctx context.Context) error {
	r := sc.replicas[sc.intN(len(sc.replicas))]
	alive := r.cancel != nil
	switch k := sc.intN(8); {
	case k == 0:
		r.link.Partition(PartitionFail)
		sc.partitions++
		sc.event("r%d cut off (calls fail)", r.id)
	case k == 1:
		r.link.Partition(PartitionHang)
		sc.partitions++
		sc.event("r%d cut off (calls hang)", r.id)
	case k == 2 || k == 3:
		r.link.Partition(PartitionNone)
		r.link.Delay(0)
		sc.event("r%d healed", r.id)
		if !alive {
			<-r.done // a killed replica is restarted once healed
			if err := sc.start(ctx, r); err != nil {
				return err
			}
			sc.event("r%d restarted as r%d.%d", r.id, r.id, r.gen)
		}
		return nil
	case k == 4:
		d := sc.between(0, sc.ttl)
		r.link.Delay(d)
		sc.slowdowns++
		sc.event("r%d slow (%s)", r.id, d.Round(time.Millisecond))
	case k == 5 && alive:
		// Killed: cut off first, so it can hand nothing back.
		r.link.Partition(PartitionHang)
		r.cancel()
		r.cancel = nil
		sc.kills++
		sc.event("r%d killed", r.id)
	case k == 6 || k == 7:
		d := sc.between(-5*sc.ttl, 5*sc.ttl)
		r.fs.Step(d)
		sc.steps++
		sc.event("r%d clock stepped %s", r.id, d.Round(time.Millisecond))
	default:
		return nil
	}
	sc.faults++
	return nil
}

// stopAll heals every link and stops every replica.
func (sc *schedule) stopAll() {
	for _, r := range sc.replicas {
		r.link.Partition(PartitionNone)
		r.link.Delay(0)
		if r.cancel != nil {
			r.cancel()
			r.cancel = nil
		}
	}
	for _, r := range sc.replicas {
		if r.done != nil {
			<-r.done
		}
	}
}

// overrunCounter counts controller.MetricHandlerOverruns.
type overrunCounter struct{ n *atomic.Int64 }

func (o overrunCounter) Add(m *converge.Metric, delta float64, _ ...string) {
	if m == controller.MetricHandlerOverruns {
		o.n.Add(int64(delta))
	}
}

func (overrunCounter) Set(*converge.Metric, float64, ...string)     {}
func (overrunCounter) Observe(*converge.Metric, float64, ...string) {}

// entryStore records in entries the writes of the objects under prefix
// that enter LimitedState (a history entry into it from another state),
// timed around the call to the store it wraps.
type entryStore struct {
	converge.Queue
	prefix  string
	entries *Entries
}

func (s entryStore) Put(ctx context.Context, rec converge.StoreRecord, history ...converge.HistoryEntry) (uint64, error) {
	asked := time.Now()
	v, err := s.Queue.Put(ctx, rec, history...)
	if err != nil {
		return v, err
	}
	answered := time.Now()
	if key, ok := strings.CutPrefix(rec.Key, s.prefix); ok {
		for _, h := range history {
			if h.To == LimitedState && h.From != LimitedState {
				s.entries.Add(key, asked, answered)
				break
			}
		}
	}
	return v, nil
}
