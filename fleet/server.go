package fleet

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/wire"
	"github.com/convergekit/converge/plan"
)

// Defaults of Config.
const (
	// DefaultMaxBody is the largest request body the server reads (an
	// edge report, a target) when Config.Limits.MaxBytes is 0.
	DefaultMaxBody = 1 << 20
	// DefaultMaxWait is the longest a long poll waits when Config.MaxWait
	// is 0.
	DefaultMaxWait = 60 * time.Second
	// DefaultRate is the requests per second a device may make on
	// average when Config.Rate is 0, and DefaultBurst how many at once.
	DefaultRate  = 1.0
	DefaultBurst = 10
	// DefaultStaleAfter is how long a device may go without a report
	// before it counts as stale, when Config.StaleAfter is 0.
	DefaultStaleAfter = 10 * time.Minute
)

// Action is what a request to the server's own API asks to do; an
// Authorizer is asked about each.
type Action string

// The actions of the server's own API.
const (
	// ActionRead reads a device's status or the fleet's counts.
	ActionRead Action = "read"
	// ActionEnrol enrols a device and issues its credential.
	ActionEnrol Action = "enrol"
	// ActionRevoke revokes a device's credential.
	ActionRevoke Action = "revoke"
	// ActionSetTarget sets a device's target.
	ActionSetTarget Action = "set-target"
	// ActionRollout creates, pauses, resumes or aborts a rollout.
	ActionRollout Action = "rollout"
)

// Authorizer decides whether the request r to the server's own API (under
// /v1/admin/) may do action a. It returns who is asking, for the logs,
// and nil to allow it, or an error to refuse it: the server then answers
// 403 Forbidden without saying why. It is called concurrently and should
// not block for long. Device requests never reach it: they carry their
// device's credential.
type Authorizer func(r *http.Request, a Action) (who string, err error)

// Config configures a Server. Store is required; the zero value of every
// other field means its default.
type Config struct {
	// Store keeps the devices, their hashed credentials, targets and
	// reports. Several server replicas may share one (pgstore), or one
	// server may own one (boltstore). Its Watch wakes the long polls of
	// every replica when a target changes.
	Store converge.Queue
	// Authorizer guards the server's own API; nil refuses every request
	// to it (403), so that a server without one only serves devices.
	Authorizer Authorizer
	// Tracer, when set, traces the rollouts this replica runs: a span
	// per run of a rollout (SpanRollout), the runner's per step of a wave
	// (plan.SpanStep) and one per device a wave moves (SpanMove), under
	// which the device's target is set, so the target carries its trace
	// context (Target.TraceParent) to the device; and a span per report
	// a device posts (SpanReport: device, outcome, revision), a child of
	// the span whose traceparent the report carries back. nil means none.
	Tracer converge.Tracer
	// Limits caps every request body; MaxBytes 0 means DefaultMaxBody. A
	// negative MaxBytes is refused: every body is capped.
	Limits converge.DecodeLimits
	// MaxWait bounds the wait of a long poll (the wait a device asks for
	// is cut to it); 0 means DefaultMaxWait. The http.Server's
	// WriteTimeout must be longer (see NewHTTPServer).
	MaxWait time.Duration
	// Rate is the requests per second each device may make on average,
	// Burst how many at once; a request beyond them is answered 429 with
	// a Retry-After. 0 means DefaultRate and DefaultBurst; a negative
	// Rate turns the limit off.
	Rate  float64
	Burst int
	// StaleAfter is how long a device may go without reporting before
	// Counts calls it stale; 0 means DefaultStaleAfter.
	StaleAfter time.Duration
	// Metrics receives the server's metrics (AllMetrics); nil records
	// nothing.
	Metrics converge.Metrics
	// Logger receives refusals and API actions, never a credential; nil
	// means slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// RolloutOwner names this replica in the claims of the rollouts'
	// plans (plan.RunnerConfig.Owner); "" means plan.DefaultOwner().
	// Replicas in one process, or on one host, must each set their own.
	RolloutOwner string
	// RolloutPoll is how often RunRollouts looks for rollouts and reads
	// the devices of a running wave; 0 means DefaultRolloutPoll.
	RolloutPoll time.Duration
}

// Server is the fleet's HTTP server, an http.Handler a central program
// mounts at its root (or under a prefix with http.StripPrefix). Devices
// read their target and post their reports; the program (or an operator
// through the Authorizer) enrols and revokes devices and sets targets.
// Build one with NewServer and end it with Close.
//
// Routes, for a device (bearer credential of the device in the path):
//
//	GET      /v1/devices/{id}/target   the target; ETag "revision"; with If-None-Match
//	                                   and ?wait=30s a long poll, 304 when the wait runs out
//	PUT/POST /v1/devices/{id}/report   the device's EdgeReport (JSON), 204
//
// and for the program (through the Authorizer):
//
//	POST /v1/admin/devices/{id}/enrol   {"labels": {...}} (or no body) -> 201 {"token": "..."}, shown once
//	POST /v1/admin/devices/{id}/revoke  204
//	PUT  /v1/admin/devices/{id}/target  {"items": [...], "payload": {...}} -> {"revision": n}
//	GET  /v1/admin/devices/{id}         the device's DeviceStatus
//	GET  /v1/admin/counts               the fleet's Counts
//	POST /v1/admin/rollouts             a RolloutSpec -> 201 its RolloutStatus
//	GET  /v1/admin/rollouts             {"rollouts": [RolloutStatus...]}
//	GET  /v1/admin/rollouts/{rollout}   its RolloutStatus
//	POST /v1/admin/rollouts/{rollout}/pause   {"reason": "..."} (optional) -> RolloutStatus
//	POST /v1/admin/rollouts/{rollout}/resume  -> RolloutStatus
//	POST /v1/admin/rollouts/{rollout}/abort   {"reason": "...", "restore": true} (optional) -> RolloutStatus
//
// Errors are answered as {"error": "..."} with 400 (malformed), 401
// (credential), 403, 404, 409 (a report out of order), 413 (too large) or
// 429 (rate).
type Server struct {
	cfg     Config
	maxBody int64
	mux     *http.ServeMux
	limit   *limiter
	stop    func()

	stopOnce sync.Once

	mu        sync.Mutex
	waiters   map[string]chan struct{} // closed when the device's target may have changed
	parked    map[string][]*parkedPoll // long polls off net/http's goroutine, by device
	closed    bool                     // polls end: Close, or the http.Server's Shutdown
	answering sync.WaitGroup           // parked polls being answered

	runner      *plan.Runner
	owner       string // RolloutOwner, or plan.DefaultOwner()
	rolloutPoll time.Duration
	kick        chan struct{}
	targets     *recordCache[targetDoc] // stored targets, decoded
	devices     *recordCache[deviceDoc] // stored devices, decoded
	movedMu     sync.Mutex
	moved       map[string]uint64 // rollout device records known to be moved, by key
}

// NewServer checks cfg and returns a Server watching cfg.Store for target
// changes. A bad field is a *converge.ConfigError naming it.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil {
		return nil, &converge.ConfigError{Field: "Store", Reason: "is required"}
	}
	if cfg.Limits.MaxBytes < 0 {
		return nil, &converge.ConfigError{Field: "Limits.MaxBytes", Reason: "must not be negative: every body is capped"}
	}
	if cfg.Limits.MaxBytes == 0 {
		cfg.Limits.MaxBytes = DefaultMaxBody
	}
	if cfg.MaxWait < 0 || cfg.StaleAfter < 0 || cfg.Burst < 0 {
		return nil, &converge.ConfigError{Field: "MaxWait, StaleAfter, Burst", Reason: "must not be negative"}
	}
	if cfg.RolloutPoll < 0 {
		return nil, &converge.ConfigError{Field: "RolloutPoll", Reason: "must not be negative"}
	}
	ownClock := cfg.Now
	cfg.MaxWait = cmpOr(cfg.MaxWait, DefaultMaxWait)
	cfg.StaleAfter = cmpOr(cfg.StaleAfter, DefaultStaleAfter)
	if cfg.Rate == 0 {
		cfg.Rate = DefaultRate
	}
	cfg.Burst = cmpOr(cfg.Burst, DefaultBurst)
	if cfg.Metrics == nil {
		cfg.Metrics = converge.MetricsNop{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, maxBody: cfg.Limits.MaxBytes, limit: newLimiter(cfg.Rate, cfg.Burst, cfg.Now), waiters: map[string]chan struct{}{},
		parked: map[string][]*parkedPoll{}, targets: newRecordCache[targetDoc](recordCacheSize),
		devices:     newRecordCache[deviceDoc](recordCacheSize),
		rolloutPoll: cmpOr(cfg.RolloutPoll, DefaultRolloutPoll), kick: make(chan struct{}, 1), moved: map[string]uint64{},
		owner: cmpOr(cfg.RolloutOwner, plan.DefaultOwner())}
	runner, err := plan.NewRunner(cfg.Store, plan.RunnerConfig{
		Handlers: map[string]plan.CommandHandler{WaveKind: waveHandler{s}},
		Owner:    cfg.RolloutOwner, PollInterval: s.rolloutPoll, Now: ownClock,
		Logger: cfg.Logger, Tracer: cfg.Tracer,
	})
	if err != nil {
		return nil, err
	}
	s.runner = runner
	stop, err := cfg.Store.Watch(context.Background(), keyTargets, s.changed)
	if err != nil {
		return nil, errf("fleet: watch targets: %w", err)
	}
	s.stop = stop
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/devices/{id}/target", s.device(s.getTarget))
	mux.HandleFunc("PUT /v1/devices/{id}/report", s.device(s.putReport))
	mux.HandleFunc("POST /v1/devices/{id}/report", s.device(s.putReport))
	mux.HandleFunc("POST /v1/admin/devices/{id}/enrol", s.admin(ActionEnrol, s.apiEnrol))
	mux.HandleFunc("POST /v1/admin/devices/{id}/revoke", s.admin(ActionRevoke, s.apiRevoke))
	mux.HandleFunc("PUT /v1/admin/devices/{id}/target", s.admin(ActionSetTarget, s.apiSetTarget))
	mux.HandleFunc("GET /v1/admin/devices/{id}", s.admin(ActionRead, s.apiStatus))
	mux.HandleFunc("GET /v1/admin/counts", s.admin(ActionRead, s.apiCounts))
	mux.HandleFunc("POST /v1/admin/rollouts", s.admin(ActionRollout, s.apiCreateRollout))
	mux.HandleFunc("GET /v1/admin/rollouts", s.admin(ActionRead, s.apiRollouts))
	mux.HandleFunc("GET /v1/admin/rollouts/{rollout}", s.admin(ActionRead, s.apiRollout))
	mux.HandleFunc("POST /v1/admin/rollouts/{rollout}/{op}", s.admin(ActionRollout, s.apiRolloutOp))
	s.mux = mux
	return s, nil
}

func cmpOr[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Close stops watching the store and ends the long polls waiting: they
// answer 304 Not Modified at once, those parked off net/http's goroutine
// before Close returns. It does not close the store. Calling it again
// does nothing.
func (s *Server) Close() error {
	s.stopOnce.Do(s.stop)
	s.endPolls()
	return nil
}

// endPolls ends the long polls waiting, and those to come, which answer
// at once; it returns when the parked polls are answered. NewHTTPServer
// registers it with the http.Server's RegisterOnShutdown: Shutdown does
// not wait for hijacked connections.
func (s *Server) endPolls() {
	s.mu.Lock()
	s.closed = true
	for id, ch := range s.waiters {
		close(ch)
		delete(s.waiters, id)
	}
	for id, ps := range s.parked {
		s.wakeLocked(ps)
		delete(s.parked, id)
	}
	s.mu.Unlock()
	s.answering.Wait()
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// changed is the store watch's callback: wake the long polls of the
// device whose target key changed, or all of them for "".
func (s *Server) changed(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if key == "" {
		for id, ch := range s.waiters {
			close(ch)
			delete(s.waiters, id)
		}
		for id, ps := range s.parked {
			s.wakeLocked(ps)
			delete(s.parked, id)
		}
		return
	}
	id := strings.TrimPrefix(key, keyTargets)
	if ch, ok := s.waiters[id]; ok {
		close(ch)
		delete(s.waiters, id)
	}
	if ps, ok := s.parked[id]; ok {
		s.wakeLocked(ps)
		delete(s.parked, id)
	}
}

// waitChan returns a channel closed when id's target may have changed
// (at once when the server is closed).
func (s *Server) waitChan(id string) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	ch, ok := s.waiters[id]
	if !ok {
		ch = make(chan struct{})
		s.waiters[id] = ch
	}
	return ch
}

// device wraps a device route: ID, credential, rate.
func (s *Server) device(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if err := CheckDeviceID(id); err != nil {
			s.fail(w, err)
			return
		}
		if err := s.authenticate(r, id); err != nil {
			s.fail(w, err)
			return
		}
		if ok, wait := s.limit.allow(id); !ok {
			s.cfg.Metrics.Add(MetricRefused, 1, "rate_limited")
			w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
			s.fail(w, errf("fleet: device %q: %w", id, ErrRateLimited))
			return
		}
		h(w, r, id)
	}
}

// authenticate checks the request's bearer credential against device id.
// A credential of another enrolled device is refused with ErrForbidden,
// anything else that is not id's own with an *AuthError; both are counted.
func (s *Server) authenticate(r *http.Request, id string) error {
	refuse := func(reason AuthReason) error {
		s.cfg.Metrics.Add(MetricRefused, 1, string(reason))
		s.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "fleet: device request refused",
			slog.String("device", id), slog.String("reason", string(reason)), slog.String("remote", r.RemoteAddr))
		return &AuthError{Device: id, Reason: reason}
	}
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || tok == "" {
		return refuse(AuthMissing)
	}
	owner := tokenDevice(tok)
	dev, err := s.readDevice(r.Context(), id)
	switch {
	case errors.Is(err, ErrDeviceNotFound):
		return refuse(AuthUnknown)
	case err != nil:
		return err
	}
	if !tokenMatches(tok, dev.hash()) {
		if owner != id && owner != "" && s.ownsToken(r.Context(), owner, tok) {
			s.cfg.Metrics.Add(MetricRefused, 1, "other_device")
			s.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "fleet: device asked for another device's resources",
				slog.String("device", owner), slog.String("asked", id))
			return errf("fleet: device %q asked for device %q: %w", owner, id, ErrForbidden)
		}
		return refuse(AuthMismatch)
	}
	if !dev.Revoked.IsZero() {
		return refuse(AuthRevoked)
	}
	return nil
}

// ownsToken says whether tok is the valid, unrevoked credential of owner.
func (s *Server) ownsToken(ctx context.Context, owner, tok string) bool {
	if CheckDeviceID(owner) != nil {
		return false
	}
	dev, err := s.readDevice(ctx, owner)
	return err == nil && dev.Revoked.IsZero() && tokenMatches(tok, dev.hash())
}

// tokenDevice returns the device a credential names ("id.secret").
func tokenDevice(tok string) string {
	i := strings.LastIndexByte(tok, '.')
	if i <= 0 {
		return ""
	}
	return tok[:i]
}

// admin wraps a route of the server's own API with the Authorizer.
func (s *Server) admin(a Action, h func(http.ResponseWriter, *http.Request, string, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.cfg.Authorizer == nil {
			s.fail(w, errf("fleet: %s: no Authorizer: %w", a, ErrForbidden))
			return
		}
		who, err := s.cfg.Authorizer(r, a)
		if err != nil {
			s.cfg.Logger.LogAttrs(r.Context(), slog.LevelWarn, "fleet: API request refused", slog.String("action", string(a)))
			s.fail(w, errf("fleet: %s: %w", a, ErrForbidden))
			return
		}
		id := r.PathValue("id")
		if id != "" || strings.Contains(r.Pattern, "{id}") {
			if err := CheckDeviceID(id); err != nil {
				s.fail(w, err)
				return
			}
		}
		h(w, r, id, who)
	}
}

// fail answers err with its status code and {"error": ...}.
func (s *Server) fail(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	var ae *AuthError
	switch {
	case errors.As(err, &ae):
		code = http.StatusUnauthorized
		w.Header().Set("WWW-Authenticate", `Bearer realm="fleet"`)
	case errors.Is(err, ErrForbidden):
		code = http.StatusForbidden
	case errors.Is(err, converge.ErrTooLarge):
		code = http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, ErrDeviceNotFound), errors.Is(err, ErrNoTarget), errors.Is(err, ErrRolloutNotFound):
		code = http.StatusNotFound
	case errors.Is(err, ErrDeviceExists), errors.Is(err, ErrStaleReport), errors.Is(err, ErrRolloutExists), errors.Is(err, ErrRolloutState):
		code = http.StatusConflict
	case errors.Is(err, ErrRateLimited):
		code = http.StatusTooManyRequests
	}
	msg := err.Error()
	if code == http.StatusInternalServerError {
		s.cfg.Logger.Error("fleet: request failed", slog.String("error", msg))
		msg = "fleet: internal error"
	}
	writeJSON(w, code, errorBody{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"fleet: internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// readBody reads a request body up to the server's cap; a larger body is
// a *RequestError wrapping a *converge.LimitError naming doc.
func (s *Server) readBody(r *http.Request, doc string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, s.maxBody+1))
	if err != nil {
		return nil, &RequestError{Field: "body", Reason: "read failed", Err: err}
	}
	if err := s.cfg.Limits.Check(doc, len(b)); err != nil {
		return nil, &RequestError{Field: "body", Err: err}
	}
	return b, nil
}

// ETag returns the entity tag of a target revision: the revision, quoted.
func ETag(revision uint64) string { return `"` + strconv.FormatUint(revision, 10) + `"` }

// etagMatches says whether the If-None-Match header inm names revision
// rev: one of its entity tags (weak or strong, as RFC 9110 compares them
// for If-None-Match) is ETag(rev), or it is "*" and a target is set.
func etagMatches(inm string, rev uint64) bool {
	if inm == "" {
		return false
	}
	want := ETag(rev)
	for tag := range strings.SplitSeq(inm, ",") {
		tag = strings.TrimPrefix(strings.TrimSpace(tag), "W/")
		if tag == want || tag == "*" && rev > 0 {
			return true
		}
	}
	return false
}

// parseWait reads the wait query parameter (a Go duration such as "30s",
// or whole seconds), cut to the server's MaxWait.
func (s *Server) parseWait(r *http.Request) (time.Duration, error) {
	v := r.URL.Query().Get("wait")
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.ParseUint(v, 10, 32)
		if nerr != nil {
			return 0, &RequestError{Field: "wait", Reason: fmt.Sprintf("%q is not a duration", v)}
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, &RequestError{Field: "wait", Reason: "negative"}
	}
	return min(d, s.cfg.MaxWait), nil
}

// getTarget answers a device's read of its target, long-polling when
// asked. A long poll of HTTP/1.x that has to wait leaves net/http's
// goroutine (park); one that cannot (HTTP/2, a ResponseWriter that
// cannot hijack) waits here.
func (s *Server) getTarget(w http.ResponseWriter, r *http.Request, id string) {
	wait, err := s.parseWait(r)
	if err != nil {
		s.fail(w, err)
		return
	}
	inm := r.Header.Get("If-None-Match")
	var (
		timeout  <-chan time.Time
		deadline time.Time
		parked   bool
	)
	if wait > 0 && inm != "" {
		deadline = time.Now().Add(wait)
		s.cfg.Metrics.Add(MetricLongPolls, 1)
		defer func() {
			if !parked {
				s.cfg.Metrics.Add(MetricLongPolls, -1)
			}
		}()
	}
	for {
		changed := s.waitChan(id)
		raw, rev, err := s.readTargetRaw(r.Context(), id)
		if err != nil && !errors.Is(err, ErrNoTarget) {
			s.fail(w, err)
			return
		}
		if !etagMatches(inm, rev) {
			s.writeTarget(w, id, raw, rev)
			return
		}
		if deadline.IsZero() {
			notModified(w, rev)
			return
		}
		if timeout == nil {
			if parked = s.park(w, r, id, inm, rev, deadline, changed); parked {
				return
			}
			t := time.NewTimer(time.Until(deadline))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
			if s.isClosed() {
				deadline = time.Time{}
			}
		case <-timeout:
			deadline = time.Time{}
		case <-r.Context().Done():
			return
		}
	}
}

// writeTarget answers a read of device id's target: raw at revision rev,
// or 404 when the device has none (rev 0).
func (s *Server) writeTarget(w http.ResponseWriter, id string, raw []byte, rev uint64) {
	if rev == 0 {
		s.fail(w, errf("fleet: device %q: %w", id, ErrNoTarget))
		return
	}
	w.Header().Set("ETag", ETag(rev))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(raw)
}

// notModified answers 304 naming the current revision rev.
func notModified(w http.ResponseWriter, rev uint64) {
	w.Header().Set("ETag", ETag(rev))
	w.WriteHeader(http.StatusNotModified)
}

func (s *Server) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// putReport stores a device's EdgeReport, in a span of its own
// (SpanReport) when the server has a Tracer: a child of the span whose
// trace context the report carries back (its traceparent header), so a
// device's report joins the trace of the rollout that set its target.
func (s *Server) putReport(w http.ResponseWriter, r *http.Request, id string) {
	ctx := r.Context()
	var sp converge.Span = converge.NopSpan{}
	if t := s.cfg.Tracer; t != nil {
		tp := r.Header.Get("traceparent")
		if len(tp) > MaxTraceParent {
			tp = ""
		}
		ctx, sp = t.Start(converge.WithTraceParent(ctx, t, tp), SpanReport, converge.StringAttr(AttrDevice, id))
	}
	b, err := s.readBody(r, "edge report")
	var st DeviceStatus
	if err == nil {
		st, err = s.StoreReport(ctx, id, b)
	}
	if err != nil {
		outcome := "refused"
		switch {
		case errors.Is(err, converge.ErrTooLarge):
			outcome = "too_large"
		case errors.Is(err, ErrInvalid):
			outcome = "invalid"
		case errors.Is(err, ErrStaleReport):
			outcome = "out_of_order"
		}
		s.cfg.Metrics.Add(MetricReports, 1, outcome)
		sp.SetAttrs(converge.StringAttr(converge.AttrOutcome, outcome))
		sp.End(err)
		s.fail(w, err)
		return
	}
	s.cfg.Metrics.Add(MetricReports, 1, "accepted")
	sp.SetAttrs(converge.StringAttr(converge.AttrOutcome, "accepted"), converge.IntAttr(converge.AttrRevision, int64(st.Reported)))
	sp.End(nil)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) apiEnrol(w http.ResponseWriter, r *http.Request, id, who string) {
	b, err := s.readBody(r, "enrol request")
	var in enrolIn
	if err == nil && len(b) > 0 {
		if pr := wire.Decode(b, &in); pr != nil {
			err = &RequestError{Field: "body" + dotPath(pr.Path), Err: pr.Err}
		}
	}
	var tok string
	if err == nil {
		tok, err = s.Enrol(r.Context(), id, in.Labels)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	s.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "fleet: device enrolled", slog.String("device", id), slog.String("by", who))
	writeJSON(w, http.StatusCreated, struct {
		Token string `json:"token"`
	}{tok})
}

func (s *Server) apiRevoke(w http.ResponseWriter, r *http.Request, id, who string) {
	if err := s.Revoke(r.Context(), id); err != nil {
		s.fail(w, err)
		return
	}
	s.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "fleet: device revoked", slog.String("device", id), slog.String("by", who))
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) apiSetTarget(w http.ResponseWriter, r *http.Request, id, who string) {
	b, err := s.readBody(r, "target request")
	if err != nil {
		s.fail(w, err)
		return
	}
	t, err := decodeSetTarget(b, s.cfg.Limits)
	if err == nil {
		t.Desired.Revision, err = s.SetTarget(r.Context(), id, t)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	s.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "fleet: target set", slog.String("device", id),
		slog.Uint64("revision", t.Desired.Revision), slog.String("by", who))
	writeJSON(w, http.StatusOK, struct {
		Revision uint64 `json:"revision"`
	}{t.Desired.Revision})
}

func (s *Server) apiStatus(w http.ResponseWriter, r *http.Request, id, _ string) {
	st, err := s.DeviceStatus(r.Context(), id)
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) apiCounts(w http.ResponseWriter, r *http.Request, _, _ string) {
	c, err := s.Counts(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

// hashHex is the stored form of a credential's hash.
func hashHex(h []byte) string { return hex.EncodeToString(h) }

func (s *Server) apiCreateRollout(w http.ResponseWriter, r *http.Request, _, who string) {
	b, err := s.readBody(r, "rollout")
	var st RolloutStatus
	if err == nil {
		var sp RolloutSpec
		if sp, err = decodeRolloutSpec(b); err == nil {
			st, err = s.CreateRollout(r.Context(), sp)
		}
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	s.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "fleet: rollout created by", slog.String("rollout", st.ID), slog.String("by", who))
	writeJSON(w, http.StatusCreated, st)
}

func (s *Server) apiRollouts(w http.ResponseWriter, r *http.Request, _, _ string) {
	rs, err := s.Rollouts(r.Context())
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Rollouts []RolloutStatus `json:"rollouts"`
	}{rs})
}

func (s *Server) apiRollout(w http.ResponseWriter, r *http.Request, _, _ string) {
	st, err := s.Rollout(r.Context(), r.PathValue("rollout"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// rolloutOpIn is the optional body of a pause or an abort.
type rolloutOpIn struct {
	Reason  string `json:"reason,omitempty"`
	Restore bool   `json:"restore,omitempty"`
}

func (s *Server) apiRolloutOp(w http.ResponseWriter, r *http.Request, _, who string) {
	id, op := r.PathValue("rollout"), r.PathValue("op")
	b, err := s.readBody(r, "rollout request")
	var in rolloutOpIn
	if err == nil && len(b) > 0 {
		if pr := wire.Decode(b, &in); pr != nil {
			err = &RequestError{Field: "body" + dotPath(pr.Path), Err: pr.Err}
		}
	}
	if err == nil {
		switch op {
		case "pause":
			err = s.PauseRollout(r.Context(), id, cmpOr(in.Reason, "paused by "+who))
		case "resume":
			err = s.ResumeRollout(r.Context(), id)
		case "abort":
			err = s.AbortRollout(r.Context(), id, cmpOr(in.Reason, "aborted by "+who), in.Restore)
		default:
			err = errf("fleet: rollout %q: no operation %q: %w", id, op, ErrRolloutNotFound)
		}
	}
	var st RolloutStatus
	if err == nil {
		st, err = s.Rollout(r.Context(), id)
	}
	if err != nil {
		s.fail(w, err)
		return
	}
	s.cfg.Logger.LogAttrs(r.Context(), slog.LevelInfo, "fleet: rollout "+op, slog.String("rollout", id), slog.String("by", who))
	writeJSON(w, http.StatusOK, st)
}
