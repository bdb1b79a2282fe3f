package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/convergekit/converge"
)

// DefaultAgentWait is the long poll an Agent asks for when
// AgentConfig.Wait is 0.
const DefaultAgentWait = 30 * time.Second

// DefaultAgentBackoff is how an Agent waits between failed requests when
// AgentConfig.Backoff is zero: 1 s doubling up to 2 minutes, half of it
// jittered, so that a fleet coming back to a server that was away does not
// come back all at once.
var DefaultAgentBackoff = converge.Backoff{Base: time.Second, Max: 2 * time.Minute, Jitter: 0.5}

// AgentConfig configures an Agent. Server, Device, Token and Reconciler
// are required.
type AgentConfig struct {
	// Server is the fleet server's base URL ("https://fleet.example:8443").
	Server string
	// Device is the device's ID and Token its credential (Server.Enrol).
	Device string
	Token  string
	// Reconciler converges the device to the targets the agent receives.
	// Its Store keeps the last target with the server's revision in it,
	// so a restarted agent resumes both the target and its long poll.
	// The program runs it (Reconciler.Run) beside Agent.Run. Every pass
	// reports, and the server counts a device without a report for its
	// StaleAfter as stale: give the reconciler an Interval below it. Do not turn
	// on its RollbackAfter: a target rolled back to would report an older
	// server revision than the one the server holds, and be refused.
	Reconciler *converge.TargetReconciler[Target]
	// Client sends the requests; nil means a client whose timeout is the
	// wait plus a minute, so a silent server never holds the agent.
	Client *http.Client
	// Wait is the long poll asked of the server (cut to its MaxWait); 0
	// means DefaultAgentWait.
	Wait time.Duration
	// Backoff spaces the retries of failed requests (poll and report
	// alike); the zero value means DefaultAgentBackoff.
	Backoff converge.Backoff
	// Limits caps the target documents read; the zero value means the
	// core's default.
	Limits converge.DecodeLimits
	// Logger receives failures and targets received, never the token;
	// nil means slog.Default().
	Logger *slog.Logger
}

// Agent is the device side of the fleet link, a target source for a
// converge.TargetReconciler[Target]: it long-polls the server for the
// device's target and sets every newer one on the reconciler, and it
// reports the result of every pass back to the server.
//
// Two revisions are at play. The server's revision of a target
// (Target.Desired.Revision, the ETag) numbers the targets the server gave
// this device; the reconciler's revision (Reconciler.Revision, assigned by
// its Store) numbers the targets the device stored. The agent sets a
// target on the reconciler only when its server revision is above the one
// of the current target, so both grow together: the reconciler's revision
// is higher for every newer server revision, and never moves for an old
// or repeated one. A report names the server's revision of the target its
// pass converged, read from the target of that pass, so the server never
// takes a report of an old target for a new one.
//
// While the server is away the agent retries with jittered backoff and
// the reconciler keeps converging its last stored target; reports wait,
// only the latest one is kept (a newer pass replaces an unsent report),
// and it is sent once the server answers again.
type Agent struct {
	cfg  AgentConfig
	base *url.URL

	mu      sync.Mutex
	pending *converge.EdgeReport // latest report not yet accepted
	wake    chan struct{}        // a token: pending changed
}

// NewAgent checks cfg and returns an Agent; a bad field is a
// *converge.ConfigError naming it.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	u, err := url.Parse(cfg.Server)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
		return nil, &converge.ConfigError{Field: "Server", Reason: "must be an http or https URL"}
	case CheckDeviceID(cfg.Device) != nil:
		return nil, &converge.ConfigError{Field: "Device", Reason: CheckDeviceID(cfg.Device).Error()}
	case cfg.Token == "":
		return nil, &converge.ConfigError{Field: "Token", Reason: "is required"}
	case cfg.Reconciler == nil:
		return nil, &converge.ConfigError{Field: "Reconciler", Reason: "is required"}
	case cfg.Wait < 0:
		return nil, &converge.ConfigError{Field: "Wait", Reason: "must not be negative"}
	}
	if err := cfg.Backoff.Validate(); err != nil {
		return nil, err
	}
	if cfg.Backoff == (converge.Backoff{}) {
		cfg.Backoff = DefaultAgentBackoff
	}
	cfg.Wait = cmpOr(cfg.Wait, DefaultAgentWait)
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Wait + time.Minute}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Agent{cfg: cfg, base: u, wake: make(chan struct{}, 1)}, nil
}

// Run polls and reports until ctx ends, and returns ctx's error. It loads
// the reconciler's stored target first (Reconciler.Load), so the first
// poll asks for nothing older than what the device has.
func (a *Agent) Run(ctx context.Context) error {
	if _, err := a.cfg.Reconciler.Load(ctx); err != nil {
		a.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "fleet: agent: stored target not loaded", slog.String("error", err.Error()))
	}
	unsub := a.cfg.Reconciler.Subscribe(a.passEnded)
	defer unsub()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); a.reportLoop(ctx) }()
	a.pollLoop(ctx)
	wg.Wait()
	return ctx.Err()
}

// current returns the reconciler's target and the server revision of it
// (0 without a target).
func (a *Agent) current() (Target, uint64) {
	t, ok := a.cfg.Reconciler.Target()
	if !ok {
		return Target{}, 0
	}
	return t, t.Desired.Revision
}

func (a *Agent) url(leaf string) string {
	return a.base.JoinPath("v1", "devices", a.cfg.Device, leaf).String()
}

// backOff logs err and waits the backoff of the failures-th failure in a
// row (at least a 429's Retry-After), with jitter; it reports whether ctx
// is still live.
func (a *Agent) backOff(ctx context.Context, msg string, failures int, err error) bool {
	d := a.cfg.Backoff.Delay(failures, rand.Float64())
	var ra *retryAfter
	if errors.As(err, &ra) {
		d = max(d, ra.d)
	}
	a.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, msg,
		slog.String("device", a.cfg.Device), slog.String("error", err.Error()), slog.Duration("retry", d))
	return sleep(ctx, d)
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func (a *Agent) pollLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		err := a.poll(ctx)
		if err == nil {
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		failures++
		if !a.backOff(ctx, "fleet: agent: target poll failed", failures, err) {
			return
		}
	}
}

// retryAfter is a 429's Retry-After.
type retryAfter struct {
	d   time.Duration
	err error
}

func (e *retryAfter) Error() string { return e.err.Error() }
func (e *retryAfter) Unwrap() error { return e.err }

// StatusError is the error of a request the server answered with an
// unexpected status: Code, and the server's message.
type StatusError struct {
	Code    int
	Message string
}

// Error names the status.
func (e *StatusError) Error() string {
	return fmt.Sprintf("fleet: server answered %d %s: %s", e.Code, http.StatusText(e.Code), strings.TrimPrefix(e.Message, "fleet: "))
}

// Is makes a StatusError match the sentinel of its status: 401
// ErrUnauthorized, 403 ErrForbidden, 409 ErrStaleReport, 429
// ErrRateLimited, 400 and 413 ErrInvalid.
func (e *StatusError) Is(target error) bool {
	switch e.Code {
	case http.StatusUnauthorized:
		return target == ErrUnauthorized
	case http.StatusForbidden:
		return target == ErrForbidden
	case http.StatusConflict:
		return target == ErrStaleReport
	case http.StatusTooManyRequests:
		return target == ErrRateLimited
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return target == ErrInvalid
	}
	return false
}

// statusError reads the error answer of res.
func statusError(res *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	var eb errorBody
	msg := string(b)
	if json.Unmarshal(b, &eb) == nil && eb.Error != "" {
		msg = eb.Error
	}
	err := error(&StatusError{Code: res.StatusCode, Message: msg})
	if res.StatusCode == http.StatusTooManyRequests {
		s, _ := strconv.Atoi(res.Header.Get("Retry-After"))
		err = &retryAfter{d: time.Duration(s) * time.Second, err: err}
	}
	return err
}

// poll makes one long poll and sets a newer target on the reconciler.
func (a *Agent) poll(ctx context.Context) error {
	_, rev := a.current()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.url("target")+"?wait="+a.cfg.Wait.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.cfg.Token)
	req.Header.Set("If-None-Match", ETag(rev))
	res, err := a.cfg.Client.Do(req)
	if err != nil {
		return errf("fleet: poll target: %w", err)
	}
	defer res.Body.Close()
	switch res.StatusCode {
	case http.StatusNotModified:
		return nil
	case http.StatusOK:
	default:
		return statusError(res)
	}
	lim := a.cfg.Limits
	limit := lim.MaxBytes
	if limit <= 0 {
		limit = converge.DefaultMaxDocumentBytes
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, limit+1))
	if err != nil {
		return errf("fleet: poll target: %w", err)
	}
	t, err := DecodeTarget(b, lim)
	if err != nil {
		return err
	}
	if t.Desired.Revision <= rev {
		// Never go back; a server behind the device is waited for.
		return errf("fleet: server offered revision %d, device %q has %d: %w", t.Desired.Revision, a.cfg.Device, rev, ErrOlderTarget)
	}
	if err := a.cfg.Reconciler.SetTarget(ctx, t); err != nil {
		return errf("fleet: set target: %w", err)
	}
	a.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "fleet: agent: target received",
		slog.String("device", a.cfg.Device), slog.Uint64("revision", t.Desired.Revision))
	return nil
}

// passEnded is the reconciler's subscriber: it turns the end of a pass
// into the latest report.
func (a *Agent) passEnded(e converge.TargetEvent) {
	if e.Kind != converge.TargetPassFinished && e.Kind != converge.TargetPassFailed || e.Intermediate {
		return
	}
	if a.cfg.Reconciler.Revision() != e.Revision {
		return // a newer target came: its own pass reports
	}
	t, rev := a.current()
	if a.cfg.Reconciler.Revision() != e.Revision || rev == 0 {
		return
	}
	rep := PassReport(t.Desired, e)
	rep.Revision = rev
	a.mu.Lock()
	a.pending = rep
	a.mu.Unlock()
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// PassReport is the EdgeReport of a pass of desired that ended with e: on
// TargetPassFinished every item is at its desired presence; on
// TargetPassFailed the items named by the pass's *converge.ItemError
// errors failed (their check failed, or their change did), and the rest
// count as not run. Its Revision is desired's and its time e's end; the
// IDs of desired must be those of the reconciler's items.
func PassReport(desired converge.Desired, e converge.TargetEvent) *converge.EdgeReport {
	failed := map[converge.ID]converge.Phase{}
	if e.Kind == converge.TargetPassFailed {
		for _, ie := range itemErrors(e.Err) {
			failed[ie.ID] = ie.Phase
		}
	}
	rep := &converge.EdgeReport{Revision: desired.Revision, Time: time.Now().UTC(), Items: make([]converge.EdgeItem, 0, len(desired.Items))}
	for _, d := range desired.Items {
		present := d.Presence == converge.Present
		st := converge.EdgeAbsent
		if present {
			st = converge.EdgePresent
		}
		if e.Kind == converge.TargetPassFailed {
			st = converge.EdgeNotRun
			if ph, ok := failed[d.ID]; ok {
				switch {
				case ph <= converge.PhaseCheck && present:
					st = converge.EdgeCheckPresentFailed
				case ph <= converge.PhaseCheck:
					st = converge.EdgeCheckAbsentFailed
				case present:
					st = converge.EdgeCreatingFailed
				default:
					st = converge.EdgeRemovingFailed
				}
			}
		}
		rep.Items = append(rep.Items, converge.EdgeItem{ID: d.ID, State: st, Time: rep.Time})
	}
	return rep
}

// itemErrors collects the *converge.ItemError values in err's tree.
func itemErrors(err error) []*converge.ItemError {
	var out []*converge.ItemError
	var walk func(error)
	walk = func(err error) {
		if err == nil {
			return
		}
		if ie, ok := err.(*converge.ItemError); ok {
			out = append(out, ie)
			return
		}
		switch u := err.(type) {
		case interface{ WrappedErrors() []error }:
			for _, e := range u.WrappedErrors() {
				walk(e)
			}
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				walk(e)
			}
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		}
	}
	walk(err)
	return out
}

// reportLoop sends the latest report, retrying with backoff, until ctx
// ends.
func (a *Agent) reportLoop(ctx context.Context) {
	failures := 0
	for {
		a.mu.Lock()
		rep := a.pending
		a.mu.Unlock()
		if rep == nil {
			select {
			case <-a.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		err := a.send(ctx, rep)
		if ctx.Err() != nil {
			return
		}
		if err == nil || errors.Is(err, ErrStaleReport) || errors.Is(err, ErrInvalid) {
			if err != nil {
				a.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "fleet: agent: report dropped",
					slog.String("device", a.cfg.Device), slog.String("error", err.Error()))
			}
			failures = 0
			a.mu.Lock()
			if a.pending == rep {
				a.pending = nil
			}
			a.mu.Unlock()
			continue
		}
		failures++
		if !a.backOff(ctx, "fleet: agent: report failed", failures, err) {
			return
		}
	}
}

func (a *Agent) send(ctx context.Context, rep *converge.EdgeReport) error {
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, a.url("report"), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.cfg.Token)
	req.Header.Set("Content-Type", "application/json")
	if t, rev := a.current(); rev == rep.Revision && t.TraceParent != "" {
		// The trace of the span that set the target this report answers.
		req.Header.Set("traceparent", t.TraceParent)
	}
	res, err := a.cfg.Client.Do(req)
	if err != nil {
		return errf("fleet: send report: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusNoContent {
		return statusError(res)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	return nil
}
