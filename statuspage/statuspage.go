package statuspage

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/fleet"
	"github.com/convergekit/converge/plan"
)

// DefaultTitle is the page title when Options.Title is empty.
const DefaultTitle = "converge status"

// DotTimeout bounds one run of Graphviz dot.
const DotTimeout = 10 * time.Second

// DefaultTokenTTL is how long a CSRF token stays valid when
// Options.TokenTTL is zero.
const DefaultTokenTTL = 15 * time.Minute

// DefaultRefresh is how often a page reloads itself when
// Options.Refresh is zero.
const DefaultRefresh = 30 * time.Second

// DefaultPageSize is how many rows of a long list a page shows when
// Options.PageSize is zero.
const DefaultPageSize = 50

// maxForm bounds the body of an action request.
const maxForm = 64 << 10

// Action is what a request asks the page to do: read a view, or one of
// the actions that change something. The zero value is no action.
type Action string

// The actions an Authorizer is asked about.
const (
	// ActionRead is every GET (and HEAD) of every view.
	ActionRead Action = "read"
	// ActionRetry retries a failed plan (plan.Runner.RetryBy).
	ActionRetry Action = "retry"
	// ActionAbort aborts a running plan (plan.Runner.AbortBy).
	ActionAbort Action = "abort"
	// ActionRelease releases a halted object
	// (controller.Controller.ReleaseBy).
	ActionRelease Action = "release"
	// ActionCancel cancels an object: its running handler's context is
	// cancelled, on whichever replica runs it, and it is halted
	// (controller.Controller.Cancel).
	ActionCancel Action = "cancel"
)

// Authorizer decides whether the request r may do action a. It returns
// who is asking (an identity the page binds its CSRF tokens to, and that
// an action stores as converge.HistoryEntry.By) and nil to allow it, or an error to refuse it: the page then answers 403
// Forbidden (as an ErrorView when JSON was asked) without saying why.
// It is called for every read and every action, and for every action a
// view could offer, to decide whether to offer it (a viewer the
// Authorizer refuses an action never gets its button or its token). It
// is called concurrently, and should not block for long.
type Authorizer func(r *http.Request, a Action) (who string, err error)

// ErrActionsNeedAuthorizer is the reason New refuses Options.Actions
// without an Options.Authorizer: the page has no authentication of its
// own. New returns it wrapped in a *ActionsError.
var ErrActionsNeedAuthorizer = errors.New("statuspage: Options.Actions needs an Options.Authorizer")

// ActionsError is the error of New for options that turn actions on
// unsafely. It matches ErrActionsNeedAuthorizer (its Err) and
// converge.ErrInvalidConfig.
type ActionsError struct {
	// Err is the reason, ErrActionsNeedAuthorizer.
	Err error
}

// Error says why actions cannot be turned on.
func (e *ActionsError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e *ActionsError) Unwrap() error { return e.Err }

// Is makes ActionsError match converge.ErrInvalidConfig.
func (e *ActionsError) Is(target error) bool { return target == converge.ErrInvalidConfig }

// Controller is a controller the page shows.
type Controller struct {
	Controller *controller.Controller
	// States lists the lifecycle states in the order the page shows them,
	// even when no object is in them; states not listed follow, sorted by
	// name. Nil shows the states objects are in, sorted by name.
	States []controller.State
}

// Options says what a Handler shows and whether it offers actions. The
// zero value shows an empty page.
type Options struct {
	// Title is the page title; "" means DefaultTitle.
	Title string
	// Targets are the target reconcilers shown (see WatchTarget); names
	// must be unique.
	Targets []*Target
	// Controllers are the fleet controllers shown; kinds must be unique.
	Controllers []Controller
	// Plans reads the plans shown; nil shows none.
	Plans *plan.Runner
	// PlanIDs lists the plans shown (StorePlanIDs lists every plan of a
	// store); nil lists none, but a plan's page is shown at "/plans/{id}"
	// whenever Plans is set.
	PlanIDs func(ctx context.Context) ([]string, error)
	// Rollouts reads the fleet's rollouts shown on the overview, each
	// with its waves, their counts and its state (a fleet.Server's
	// Rollouts, or fleet.ReadRollouts on the fleet's store); nil shows
	// none. A paused, aborted or failed rollout is also in Needs
	// attention.
	Rollouts func(ctx context.Context) ([]fleet.RolloutStatus, error)
	// Authorizer is asked before every read and every action (see
	// Authorizer). The page has no authentication of its own: nil lets
	// every request that reaches it read every view, so it must then sit
	// behind the program's own authentication, and Actions cannot be set.
	Authorizer Authorizer
	// Actions, when true, offers the actions that change something:
	// retry and abort a plan (plan.Runner.RetryBy and AbortBy)
	// and release a halted object (controller.Controller.ReleaseBy), to
	// the viewers Authorizer allows them, on the overview's Needs
	// attention list and on the object's or plan's page. The history
	// entries an action stores name the Authorizer's who in By. Each is a POST carrying the page's
	// CSRF token, from the page's own origin. It needs an Authorizer (New
	// fails with a *ActionsError otherwise). False (the default) makes
	// the page read-only: every POST fails with 403 Forbidden.
	Actions bool
	// Secret signs the CSRF tokens; nil means 32 random bytes made by New
	// (a key of this Handler alone), so no token outlives the Handler. It
	// must be at least 16 bytes. Handlers sharing it (replicas, or a
	// program after a restart) take each other's tokens, and each token is
	// still good once across all of them: it is bound to the stored
	// version of what it acts on (see the package's Actions).
	Secret []byte
	// Refresh is how often an HTML page reloads itself (a meta refresh,
	// no JavaScript); the viewer turns it off for a page with the query
	// parameter refresh=off, which the page's own links keep. Zero means
	// DefaultRefresh; a negative value never reloads.
	Refresh time.Duration
	// PageSize is how many rows of a long list (the objects of a state,
	// the plans) a page shows at a time; zero means DefaultPageSize. It
	// must not be negative.
	PageSize int
	// Now returns the current time, which the pages show as their "as
	// of" time and count ages from; nil means time.Now.
	Now func() time.Time
	// TokenTTL is how long a CSRF token the page renders stays valid;
	// zero means DefaultTokenTTL. It must not be negative.
	TokenTTL time.Duration
	// ShowData, when true, shows each object's data (controller.Object.Data)
	// and each target's current target (TargetReconciler.Target, as JSON)
	// on their pages and in their JSON views. False (the default) hides
	// them, as data may hold what not every viewer should read. Even then
	// the page never shows a secret: the value of a member whose name is
	// secret (converge.IsSecretEnv, or SecretKeys) becomes MaskSecret,
	// as do the value of a "NAME=value" entry of a list and of a
	// {"name": NAME, "value": ...} object with a secret NAME (an
	// environment, as Compose and Kubernetes write it) and the password
	// of a URL; a sealed value becomes MaskSealed.
	ShowData bool
	// SecretKeys are names whose values are secret besides those
	// converge.IsSecretEnv finds by its pattern (exact names, as its
	// extra), masked wherever ShowData shows data.
	SecretKeys []string
	// Dot is the path of Graphviz dot, which draws a target's graphs as
	// SVG; "" means "dot" found on PATH, if any, and "-" never draws them
	// (the page then lists the items and shows the Mermaid text).
	// At most one dot runs at a time, for all requests of the Handler;
	// each picture is drawn once per target revision and outcomes of its
	// items, and kept.
	Dot string
}

// Handler is the status page: an http.Handler that shows targets,
// controllers and plans as HTML, or as JSON (the view types) when the
// request accepts application/json. GET never changes anything. Create
// it with New; the zero value is not usable. It is safe for concurrent
// use, and may be mounted under a prefix with http.StripPrefix: its links
// are relative.
type Handler struct {
	opts        Options
	secret      []byte
	ttl         time.Duration
	usedMu      sync.Mutex
	used        map[string]spent // the tokens in use or used, by MAC, until they expire
	dot         string
	mux         *http.ServeMux
	targets     map[string]*Target
	controllers map[string]Controller
	cop         *http.CrossOriginProtection
	mask        masker
	// dotRun is held by the one run of dot allowed at a time.
	dotRun chan struct{}
	svgMu  sync.Mutex
	svgs   map[svgKey]svgEntry
}

// svgKey names one stage's picture of one target.
type svgKey struct {
	target string
	stage  int
}

// svgEntry is a drawn picture, good for one revision of its target and
// one DOT text (the outcomes of the last pass).
type svgEntry struct {
	revision uint64
	sum      [sha256.Size]byte
	svg      []byte
}

// New validates opts and returns the Handler. Invalid options fail with a
// *converge.ConfigError (matching converge.ErrInvalidConfig).
func New(opts Options) (*Handler, error) {
	h := &Handler{
		opts:        opts,
		targets:     map[string]*Target{},
		controllers: map[string]Controller{},
		cop:         http.NewCrossOriginProtection(),
		mux:         http.NewServeMux(),
		dotRun:      make(chan struct{}, 1),
		svgs:        map[svgKey]svgEntry{},
	}
	if h.opts.Title == "" {
		h.opts.Title = DefaultTitle
	}
	for i, t := range opts.Targets {
		field := fmt.Sprintf("statuspage.Options.Targets[%d]", i)
		if t == nil {
			return nil, &converge.ConfigError{Field: field, Reason: "is nil"}
		}
		if _, dup := h.targets[t.name]; dup {
			return nil, &converge.ConfigError{Field: field, Reason: fmt.Sprintf("names target %q twice", t.name)}
		}
		h.targets[t.name] = t
	}
	for i, c := range opts.Controllers {
		field := fmt.Sprintf("statuspage.Options.Controllers[%d]", i)
		if c.Controller == nil {
			return nil, &converge.ConfigError{Field: field, Reason: "has no Controller"}
		}
		if _, dup := h.controllers[c.Controller.Kind()]; dup {
			return nil, &converge.ConfigError{Field: field, Reason: fmt.Sprintf("names kind %q twice", c.Controller.Kind())}
		}
		h.controllers[c.Controller.Kind()] = c
	}
	if opts.Actions && opts.Authorizer == nil {
		return nil, &ActionsError{Err: ErrActionsNeedAuthorizer}
	}
	if opts.PlanIDs != nil && opts.Plans == nil {
		return nil, &converge.ConfigError{Field: "statuspage.Options.PlanIDs", Reason: "is set without Plans"}
	}
	switch {
	case opts.Secret == nil:
		h.secret = make([]byte, 32)
		if _, err := rand.Read(h.secret); err != nil {
			return nil, fmt.Errorf("statuspage: make the CSRF secret: %w", err)
		}
	case len(opts.Secret) < 16:
		return nil, &converge.ConfigError{Field: "statuspage.Options.Secret", Reason: "is shorter than 16 bytes"}
	default:
		h.secret = slices.Clone(opts.Secret)
	}
	switch {
	case opts.TokenTTL < 0:
		return nil, &converge.ConfigError{Field: "statuspage.Options.TokenTTL", Reason: "is negative"}
	case opts.TokenTTL == 0:
		h.ttl = DefaultTokenTTL
	default:
		h.ttl = opts.TokenTTL
	}
	switch {
	case opts.PageSize < 0:
		return nil, &converge.ConfigError{Field: "statuspage.Options.PageSize", Reason: "is negative"}
	case opts.PageSize == 0:
		h.opts.PageSize = DefaultPageSize
	}
	if opts.Refresh == 0 {
		h.opts.Refresh = DefaultRefresh
	}
	if opts.Now == nil {
		h.opts.Now = time.Now
	}
	h.used = map[string]spent{}
	h.mask = masker{extra: slices.Clone(opts.SecretKeys)}
	switch opts.Dot {
	case "-":
	case "":
		h.dot, _ = exec.LookPath("dot")
	default:
		h.dot = opts.Dot
	}
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	h.mux.HandleFunc("GET /{$}", h.overview)
	h.mux.HandleFunc("GET /targets/{name}", h.target)
	h.mux.HandleFunc("GET /targets/{name}/graph", h.graph)
	h.mux.HandleFunc("GET /targets/{name}/graph.svg", h.graphSVG)
	h.mux.HandleFunc("GET /controllers/{kind}", h.controller)
	h.mux.HandleFunc("GET /controllers/{kind}/states/{state}", h.state)
	h.mux.HandleFunc("GET /controllers/{kind}/objects", h.state)
	h.mux.HandleFunc("GET /controllers/{kind}/objects/{key}", h.object)
	h.mux.HandleFunc("POST /controllers/{kind}/objects/{key}/release", h.action(h.release))
	h.mux.HandleFunc("POST /controllers/{kind}/objects/{key}/cancel", h.action(h.cancel))
	h.mux.HandleFunc("GET /plans", h.plans)
	h.mux.HandleFunc("GET /plans/{id}", h.plan)
	h.mux.HandleFunc("POST /plans/{id}/retry", h.action(h.retry))
	h.mux.HandleFunc("POST /plans/{id}/abort", h.action(h.abort))
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Add("Vary", "Accept")
	if r.Method != http.MethodPost {
		if _, ok := h.authorize(r, ActionRead); !ok {
			h.fail(w, r, http.StatusForbidden, "statuspage: read refused")
			return
		}
	}
	if _, pattern := h.mux.Handler(r); pattern == "" {
		// No route: the mux would answer in plain text. Answer in the
		// form asked for, with the status it would have given (404, or
		// 405 with its Allow header).
		sw := &statusOnly{header: http.Header{}}
		hd, _ := h.mux.Handler(r)
		hd.ServeHTTP(sw, r)
		if allow := sw.header.Get("Allow"); allow != "" {
			w.Header().Set("Allow", allow)
		}
		msg := fmt.Sprintf("statuspage: no page at %s", r.URL.Path)
		if sw.status == http.StatusMethodNotAllowed {
			msg = fmt.Sprintf("statuspage: %s not allowed at %s", r.Method, r.URL.Path)
		}
		h.fail(w, r, cmp.Or(sw.status, http.StatusNotFound), msg)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// statusOnly is an http.ResponseWriter that keeps the status and header
// and drops the body.
type statusOnly struct {
	header http.Header
	status int
}

func (s *statusOnly) Header() http.Header { return s.header }
func (s *statusOnly) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return len(b), nil
}
func (s *statusOnly) WriteHeader(status int) {
	if s.status == 0 {
		s.status = status
	}
}

// authorize asks Options.Authorizer whether r may do a, and returns who
// asks; without an Authorizer every read is allowed and every action
// refused.
func (h *Handler) authorize(r *http.Request, a Action) (string, bool) {
	if h.opts.Authorizer == nil {
		return "", a == ActionRead
	}
	who, err := h.opts.Authorizer(r, a)
	return who, err == nil
}

// StorePlanIDs returns the Options.PlanIDs that lists every plan stored in
// store (under plan.KeyPrefix), sorted.
func StorePlanIDs(store converge.Store) func(ctx context.Context) ([]string, error) {
	return func(ctx context.Context) ([]string, error) {
		recs, err := store.List(ctx, plan.KeyPrefix)
		if err != nil {
			return nil, fmt.Errorf("statuspage: list plans: %w", err)
		}
		ids := make([]string, 0, len(recs))
		for _, rec := range recs {
			ids = append(ids, strings.TrimPrefix(rec.Key, plan.KeyPrefix))
		}
		return ids, nil
	}
}

// wantsJSON reports whether the request prefers application/json to HTML.
func wantsJSON(r *http.Request) bool {
	var qJSON, qHTML float64 = -1, -1
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if v, err := strconv.ParseFloat(s, 64); err == nil {
				q = v
			}
		}
		switch mt {
		case "application/json":
			qJSON = max(qJSON, q)
		case "text/html":
			qHTML = max(qHTML, q)
		}
	}
	return qJSON > 0 && qJSON >= qHTML
}

// root is the relative path from the request's page to the handler's
// root, so links work under any prefix.
func root(r *http.Request) string {
	n := strings.Count(r.URL.EscapedPath(), "/") - 1
	if n <= 0 {
		return "./"
	}
	return strings.Repeat("../", n)
}

// page is what every HTML template gets.
type page struct {
	Title   string
	Root    string
	Actions bool
	// Plans is true when the page lists plans (Options.PlanIDs), so the
	// navigation links to them.
	Plans bool
	View  any
	// Now is the page's "as of" time, which ages count from.
	Now time.Time
	// Refresh is the meta refresh in seconds, 0 for none; Keep is the
	// query that the page's links carry ("?refresh=off" or ""), and
	// Toggle the link that turns the refresh off or on again.
	Refresh      int
	Keep, Toggle string
}

// sub is what a nested template gets: the root, the "as of" time, the
// query the links keep and a part of the view.
type sub struct {
	Root string
	Now  time.Time
	Keep string
	V    any
}

// refreshOff reports whether the request turned the page's refresh off.
func refreshOff(r *http.Request) bool { return r.URL.Query().Get("refresh") == "off" }

// write renders v as JSON or with the named template.
func (h *Handler) write(w http.ResponseWriter, r *http.Request, status int, name string, v any) {
	if wantsJSON(r) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(v)
		return
	}
	p := page{Title: h.opts.Title, Root: root(r), Actions: h.opts.Actions, Plans: h.opts.PlanIDs != nil, View: v, Now: h.opts.Now()}
	if h.opts.Refresh > 0 && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		// Not after a POST: reloading its answer would ask again.
		q := r.URL.Query()
		if refreshOff(r) {
			p.Keep = "?refresh=off"
			q.Del("refresh")
		} else {
			p.Refresh = max(int(h.opts.Refresh/time.Second), 1)
			q.Set("refresh", "off")
		}
		p.Toggle = "?" + q.Encode()
	}
	var buf bytes.Buffer
	if err := templates().ExecuteTemplate(&buf, name, p); err != nil {
		http.Error(w, "statuspage: render "+name+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail writes an error response in the form the request asks for.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.write(w, r, status, "error", ErrorView{Status: status, Error: msg})
}

// failErr writes err with the status its kind calls for.
func (h *Handler) failErr(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	var se *statusError
	switch {
	case errors.As(err, &se):
		status = se.status
	case errors.Is(err, controller.ErrObjectNotFound), errors.Is(err, converge.ErrStoreNotFound):
		status = http.StatusNotFound
	case errors.Is(err, plan.ErrNotFailed), errors.Is(err, plan.ErrFinished), errors.Is(err, plan.ErrAborted):
		status = http.StatusConflict
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status = http.StatusServiceUnavailable
	}
	h.fail(w, r, status, err.Error())
}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	v := OverviewView{Title: h.opts.Title, AsOf: h.opts.Now(), NeedsAttention: []AttentionItem{},
		Targets: []TargetView{}, Controllers: []ControllerSummary{}, Plans: []PlanSummary{}, Rollouts: []fleet.RolloutStatus{}}
	for _, t := range h.opts.Targets {
		tv := t.view()
		v.Targets = append(v.Targets, tv)
		if item, ok := targetAttention(tv); ok {
			v.NeedsAttention = append(v.NeedsAttention, item)
		}
		if item, ok := rollbackAttention(tv); ok {
			v.NeedsAttention = append(v.NeedsAttention, item)
		}
		v.NeedsAttention = append(v.NeedsAttention, pendingAttention(tv)...)
	}
	for _, c := range h.opts.Controllers {
		objs := c.Controller.Objects()
		above := aboveSLA(c.Controller)
		v.Controllers = append(v.Controllers, summarize(c, objs, above))
		items, err := h.controllerAttention(r, c.Controller, objs, above)
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		v.NeedsAttention = append(v.NeedsAttention, items...)
	}
	plans, docs, err := h.planSummaries(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	v.Plans = plans
	for i, s := range plans {
		if item, ok := h.planAttention(r, s, docs[i]); ok {
			v.NeedsAttention = append(v.NeedsAttention, item)
		}
	}
	if h.opts.Rollouts != nil {
		rs, err := h.opts.Rollouts(r.Context())
		if err != nil {
			h.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("statuspage: rollouts: %v", err))
			return
		}
		v.Rollouts = rs
		for _, ro := range rs {
			if item, ok := rolloutAttention(ro); ok {
				v.NeedsAttention = append(v.NeedsAttention, item)
			}
		}
	}
	h.write(w, r, http.StatusOK, "overview", v)
}

func (h *Handler) target(w http.ResponseWriter, r *http.Request) {
	t, ok := h.targets[r.PathValue("name")]
	if !ok {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("statuspage: no target %q", r.PathValue("name")))
		return
	}
	v := t.view()
	v.AsOf = h.opts.Now()
	v.Waterfall = t.waterfall()
	if h.opts.ShowData {
		raw, err := t.data()
		if err != nil {
			h.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("statuspage: target %q: %v", t.name, err))
			return
		}
		v.Data = h.mask.data(raw)
	}
	h.write(w, r, http.StatusOK, "target", v)
}

// stages builds the graphs of target name, or writes why it cannot.
func (h *Handler) stages(w http.ResponseWriter, r *http.Request) (*Target, []converge.TargetStage, bool) {
	t, ok := h.targets[r.PathValue("name")]
	if !ok {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("statuspage: no target %q", r.PathValue("name")))
		return nil, nil, false
	}
	if t.stages == nil {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("statuspage: target %q has no Build to draw its graph", t.name))
		return nil, nil, false
	}
	st, err := t.stages(r.Context())
	if err != nil {
		h.fail(w, r, http.StatusInternalServerError, fmt.Sprintf("statuspage: build target %q: %v", t.name, err))
		return nil, nil, false
	}
	return t, st, true
}

func (h *Handler) graph(w http.ResponseWriter, r *http.Request) {
	t, stages, ok := h.stages(w, r)
	if !ok {
		return
	}
	v := GraphView{AsOf: h.opts.Now(), Target: t.name, Revision: t.revision(), Stages: []StageGraph{}, SVG: h.dot != ""}
	outcomes := t.outcomes(stages)
	for i, st := range stages {
		v.Stages = append(v.Stages, stageGraph(st, outcomes[i]))
	}
	h.write(w, r, http.StatusOK, "graph", v)
}

func (h *Handler) graphSVG(w http.ResponseWriter, r *http.Request) {
	if h.dot == "" {
		http.Error(w, "statuspage: Graphviz dot is not available", http.StatusNotFound)
		return
	}
	t, stages, ok := h.stages(w, r)
	if !ok {
		return
	}
	i, err := strconv.Atoi(r.URL.Query().Get("stage"))
	if err != nil || i < 0 || i >= len(stages) {
		http.Error(w, fmt.Sprintf("statuspage: target %q has no stage %q", t.name, r.URL.Query().Get("stage")), http.StatusNotFound)
		return
	}
	var dot bytes.Buffer
	if err := stages[i].Graph.WriteDOT(&dot, t.outcomes(stages)[i].drawn()); err != nil {
		http.Error(w, "statuspage: "+err.Error(), http.StatusInternalServerError)
		return
	}
	svg, err := h.drawSVG(r.Context(), svgKey{t.name, i}, t.revision(), dot.Bytes())
	if err != nil {
		status := http.StatusInternalServerError
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			status = http.StatusServiceUnavailable
		}
		http.Error(w, err.Error(), status)
		return
	}
	// Shown through <img> only, where an SVG runs no script; the policy
	// keeps it so when it is opened on its own.
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("Content-Type", "image/svg+xml")
	_, _ = w.Write(svg)
}

// drawSVG returns the SVG of the DOT text dot, the picture k of a target
// at revision rev: the one drawn before for this revision and text, or a
// new one. Only one dot runs at a time; a request waits for its turn
// until ctx ends.
func (h *Handler) drawSVG(ctx context.Context, k svgKey, rev uint64, dot []byte) ([]byte, error) {
	sum := sha256.Sum256(dot)
	cached := func() ([]byte, bool) {
		h.svgMu.Lock()
		defer h.svgMu.Unlock()
		e, ok := h.svgs[k]
		return e.svg, ok && e.revision == rev && e.sum == sum
	}
	if svg, ok := cached(); ok {
		return svg, nil
	}
	select {
	case h.dotRun <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("statuspage: wait for dot: %w", ctx.Err())
	}
	defer func() { <-h.dotRun }()
	// Drawn by the run this one waited for?
	if svg, ok := cached(); ok {
		return svg, nil
	}
	ctx, cancel := context.WithTimeout(ctx, DotTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.dot, "-Tsvg")
	cmd.Stdin = bytes.NewReader(dot)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	svg, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("statuspage: dot: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	h.svgMu.Lock()
	h.svgs[k] = svgEntry{revision: rev, sum: sum, svg: svg}
	h.svgMu.Unlock()
	return svg, nil
}

// stageGraph describes one stage's graph with the outcomes of so.
func stageGraph(st converge.TargetStage, so stageOutcomes) StageGraph {
	rep := so.drawn()
	sg := StageGraph{Name: st.Name, Clean: st.Clean, Items: []GraphItem{}, Pass: so.pass}
	g := st.Graph
	if g == nil {
		g = converge.NewGraph()
	}
	var b strings.Builder
	if err := g.WriteDOT(&b, rep); err == nil {
		sg.DOT = b.String()
	}
	b.Reset()
	if err := g.WriteMermaid(&b, rep); err == nil {
		sg.Mermaid = b.String()
	}
	ids, err := g.Order()
	if err != nil {
		sg.Error = err.Error()
		return sg
	}
	for _, id := range ids {
		_, p, _ := g.Node(id)
		it := GraphItem{ID: string(id), Presence: p.String()}
		for _, d := range g.Dependencies(id) {
			it.Dependencies = append(it.Dependencies, string(d))
		}
		if res, ok := rep.Item(id); ok {
			it.Outcome = res.Outcome.String()
		} else {
			it.Outcome = so.outcomes[id]
		}
		sg.Items = append(sg.Items, it)
	}
	return sg
}

// aboveSLA returns the keys of c's objects above their state's SLA.
func aboveSLA(c *controller.Controller) map[string]bool {
	keys := map[string]bool{}
	for _, o := range c.AboveSLA() {
		keys[o.Key] = true
	}
	return keys
}

// summarize counts objs per state, in the order c lists them.
func summarize(c Controller, objs []controller.Object, above map[string]bool) ControllerSummary {
	s := ControllerSummary{Kind: c.Controller.Kind(), Objects: len(objs), States: []StateCount{}}
	idx := map[controller.State]int{}
	for _, st := range c.States {
		if _, ok := idx[st]; !ok {
			idx[st] = len(s.States)
			s.States = append(s.States, StateCount{State: string(st)})
		}
	}
	listed := len(s.States)
	for _, o := range objs {
		i, ok := idx[o.State]
		if !ok {
			i = len(s.States)
			idx[o.State] = i
			s.States = append(s.States, StateCount{State: string(o.State)})
		}
		sc := &s.States[i]
		sc.Objects++
		if above[o.Key] {
			sc.AboveSLA++
			s.AboveSLA++
		}
		if o.Halted != "" {
			sc.Halted++
		}
		switch o.Halted {
		case controller.HaltQuarantined:
			s.Quarantined++
		case controller.HaltTerminal:
			s.Terminal++
		}
	}
	rest := s.States[listed:]
	sort.Slice(rest, func(i, j int) bool { return rest[i].State < rest[j].State })
	return s
}

// objectPath is the page of an object, relative to the handler's root.
func objectPath(kind, key string) string {
	return "controllers/" + url.PathEscape(kind) + "/objects/" + url.PathEscape(key)
}

// objectSummary describes o.
func objectSummary(kind string, o controller.Object, above bool) ObjectSummary {
	s := ObjectSummary{
		Key: o.Key, State: string(o.State), Since: o.Since, Reason: o.Reason,
		Failures: o.Failures, Retries: o.Retries, Halted: string(o.Halted),
		AboveSLA: above, SLABreached: o.SLABreached, Priority: o.Priority, Path: objectPath(kind, o.Key),
	}
	if o.LastError != nil {
		s.LastError = &FailureView{At: o.LastError.At, Error: o.LastError.Error}
	}
	return s
}

// lookupController finds the controller of the request, or writes 404.
func (h *Handler) lookupController(w http.ResponseWriter, r *http.Request) (Controller, bool) {
	c, ok := h.controllers[r.PathValue("kind")]
	if !ok {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("statuspage: no controller of kind %q", r.PathValue("kind")))
	}
	return c, ok
}

func (h *Handler) controller(w http.ResponseWriter, r *http.Request) {
	c, ok := h.lookupController(w, r)
	if !ok {
		return
	}
	kind := c.Controller.Kind()
	objs := c.Controller.Objects()
	above := aboveSLA(c.Controller)
	v := ControllerView{AsOf: h.opts.Now(),
		ControllerSummary:  summarize(c, objs, above),
		AboveSLAObjects:    []ObjectSummary{},
		QuarantinedObjects: []ObjectSummary{},
		TerminalObjects:    []ObjectSummary{},
	}
	// Each list holds at most a page; the page of the objects with that
	// status (StateView) has them all.
	size := h.opts.PageSize
	for _, o := range objs {
		if above[o.Key] && len(v.AboveSLAObjects) < size {
			v.AboveSLAObjects = append(v.AboveSLAObjects, objectSummary(kind, o, true))
		}
		if o.Halted == controller.HaltTerminal && len(v.TerminalObjects) < size {
			v.TerminalObjects = append(v.TerminalObjects, objectSummary(kind, o, above[o.Key]))
		}
	}
	quarantined, err := c.Controller.Quarantined(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	v.Quarantined = len(quarantined) // the store's count, every replica's
	for _, o := range quarantined[:min(len(quarantined), size)] {
		v.QuarantinedObjects = append(v.QuarantinedObjects, objectSummary(kind, o, above[o.Key]))
	}
	limits, err := c.Controller.Limits(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	for _, l := range limits {
		lv := LimitView{State: string(l.State), Limit: l.Limit.String(), Concurrent: l.Limit.Concurrent, Burst: l.Limit.Burst,
			InUse: l.InUse, WaitingForSlot: l.WaitingForSlot, WaitingToEnter: l.WaitingToEnter}
		if l.Limit.Every > 0 {
			lv.Every = l.Limit.Every.String()
		}
		v.Limits = append(v.Limits, lv)
	}
	h.write(w, r, http.StatusOK, "controller", v)
}

func (h *Handler) object(w http.ResponseWriter, r *http.Request) {
	c, ok := h.lookupController(w, r)
	if !ok {
		return
	}
	kind, key := c.Controller.Kind(), r.PathValue("key")
	o, ok := c.Controller.Get(key)
	if !ok {
		h.fail(w, r, http.StatusNotFound, fmt.Sprintf("statuspage: no %s %q", kind, key))
		return
	}
	hist, err := c.Controller.History(r.Context(), key)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	if hist == nil {
		hist = []converge.HistoryEntry{}
	}
	v := ObjectView{AsOf: h.opts.Now(),
		Kind:          kind,
		ObjectSummary: objectSummary(kind, o, aboveSLA(c.Controller)[key]),
		Intents:       o.Intents,
		FailingSince:  o.FailingSince,
		History:       hist,
	}
	for _, f := range o.RecentFailures {
		v.RecentFailures = append(v.RecentFailures, FailureView{At: f.At, State: string(f.State), Error: f.Error})
	}
	if h.opts.ShowData {
		v.Data = h.mask.data(o.Data)
	}
	if h.opts.Actions && o.Halted != "" {
		// The token is bound to the stored version, which the view may
		// lag behind; when the store cannot be read, to the view's (a
		// stale one is refused when it is used, never taken).
		stored, err := storedObject(r.Context(), c.Controller, key)
		if err != nil {
			stored = o
		}
		if stored.Halted != "" {
			v.Actions = h.offer(r, v.Actions, ActionRelease, v.Path+"/release", kind, key, stored.Version)
		}
	}
	if h.opts.Actions && o.Halted != controller.HaltCancelled {
		// Bound to when the object entered its state, which its handler's
		// writes do not move (see anchorOf).
		v.Actions = h.offer(r, v.Actions, ActionCancel, v.Path+"/cancel", kind, key, uint64(o.Since.UnixNano()))
	}
	h.write(w, r, http.StatusOK, "object", v)
}

// storedPlan is a plan as read from the store: its document (nil when it
// could not be read) and version.
type storedPlan struct {
	doc     *plan.Document
	version uint64
}

// planSummaries reads the plans Options.PlanIDs lists, and returns their
// summaries and stored documents.
func (h *Handler) planSummaries(ctx context.Context) ([]PlanSummary, []storedPlan, error) {
	out := []PlanSummary{}
	if h.opts.PlanIDs == nil {
		return out, nil, nil
	}
	ids, err := h.opts.PlanIDs(ctx)
	if err != nil {
		return nil, nil, err
	}
	docs := make([]storedPlan, 0, len(ids))
	for _, id := range ids {
		doc, version, err := h.opts.Plans.Get(ctx, id)
		if err != nil {
			out = append(out, PlanSummary{ID: id, Error: err.Error()})
			docs = append(docs, storedPlan{})
			continue
		}
		s, _ := planViews(id, doc)
		out = append(out, s)
		docs = append(docs, storedPlan{doc, version})
	}
	return out, docs, nil
}

// planViews describes doc: its summary and its commands.
func planViews(id string, doc *plan.Document) (PlanSummary, []CommandView) {
	s := PlanSummary{ID: id, State: string(doc.State()), Commands: len(doc.Spec.Commands), Active: -1}
	var status []plan.CommandStatus
	if doc.Status != nil {
		s.Reason, s.Abort = doc.Status.Reason, doc.Status.Abort
		status = doc.Status.Commands
	}
	cmds := []CommandView{}
	for i, spec := range doc.Spec.Commands {
		cv := CommandView{Index: i, Kind: spec.Kind, State: string(plan.StateNewPlan), Groups: []GroupView{}}
		if i < len(status) {
			cs := status[i]
			if cs.State != "" {
				cv.State = string(cs.State)
			}
			cv.Reason = cs.Reason
			if !cs.Started.IsZero() {
				started := cs.Started
				cv.Started = &started
				if started.After(s.Updated) {
					s.Updated = started
				}
			}
			for _, group := range groupOrder(spec, cs) {
				gv := GroupView{Name: group, Targets: []PlanTargetView{}}
				for _, t := range cs.Targets[group] {
					st := t.State
					if st == "" {
						st = plan.TargetPending
					}
					gv.Targets = append(gv.Targets, PlanTargetView{Name: t.Name, State: string(st), Reason: t.Reason, Attempt: t.Attempt, LastUpdated: t.LastUpdatedTimestamp})
					gv.Total++
					switch {
					case st == plan.TargetCompleted:
						gv.Completed++
					case st.IsFailure():
						gv.Failed++
						cv.FailedTargets = append(cv.FailedTargets, PlanTargetFailure{Group: group, Name: t.Name, State: string(st), Reason: t.Reason, Attempt: t.Attempt, At: t.LastUpdatedTimestamp})
					}
					if t.LastUpdatedTimestamp.After(s.Updated) {
						s.Updated = t.LastUpdatedTimestamp
					}
				}
				cv.Targets += gv.Total
				cv.Completed += gv.Completed
				cv.Failed += gv.Failed
				cv.Groups = append(cv.Groups, gv)
			}
		}
		if s.Active < 0 && cv.State != string(plan.StateCompleted) {
			s.Active = i
		}
		s.Targets += cv.Targets
		s.Completed += cv.Completed
		s.Failed += cv.Failed
		cmds = append(cmds, cv)
	}
	return s, cmds
}

// groupOrder returns the groups of a command's status in the order they
// run: the spec's (by Order, then name), then any others by name.
func groupOrder(spec plan.Command, cs plan.CommandStatus) []string {
	groups := slices.Clone(spec.Targets)
	sort.SliceStable(groups, func(i, j int) bool {
		if groups[i].Order != groups[j].Order {
			return groups[i].Order < groups[j].Order
		}
		return groups[i].Group < groups[j].Group
	})
	var names []string
	seen := map[string]bool{}
	for _, g := range groups {
		if _, ok := cs.Targets[g.Group]; ok && !seen[g.Group] {
			names = append(names, g.Group)
			seen[g.Group] = true
		}
	}
	var rest []string
	for g := range cs.Targets {
		if !seen[g] {
			rest = append(rest, g)
		}
	}
	sort.Strings(rest)
	return append(names, rest...)
}

func (h *Handler) plan(w http.ResponseWriter, r *http.Request) {
	if h.opts.Plans == nil {
		h.fail(w, r, http.StatusNotFound, "statuspage: no plans are shown")
		return
	}
	id := r.PathValue("id")
	doc, version, err := h.opts.Plans.Get(r.Context(), id)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	hist, err := h.opts.Plans.History(r.Context(), id)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	if hist == nil {
		hist = []converge.HistoryEntry{}
	}
	s, cmds := planViews(id, doc)
	v := PlanView{AsOf: h.opts.Now(), PlanSummary: s, Version: version, CommandViews: cmds, History: hist}
	if h.opts.Actions {
		path := "plans/" + url.PathEscape(id)
		st := doc.State()
		if st.IsError() {
			v.Actions = h.offer(r, v.Actions, ActionRetry, path+"/retry", "", id, version)
		}
		if !st.IsFinal() {
			v.Actions = h.offer(r, v.Actions, ActionAbort, path+"/abort", "", id, planRun(doc))
		}
	}
	h.write(w, r, http.StatusOK, "plan", v)
}

func (h *Handler) release(w http.ResponseWriter, r *http.Request, who string) (string, bool) {
	c, ok := h.lookupController(w, r)
	if !ok {
		return "", false
	}
	key := r.PathValue("key")
	if err := c.Controller.ReleaseBy(r.Context(), key, who); err != nil {
		h.failErr(w, r, err)
		return "", false
	}
	return "../" + url.PathEscape(key), true
}

func (h *Handler) cancel(w http.ResponseWriter, r *http.Request, who string) (string, bool) {
	c, ok := h.lookupController(w, r)
	if !ok {
		return "", false
	}
	key := r.PathValue("key")
	if err := c.Controller.Cancel(r.Context(), key, who); err != nil {
		h.failErr(w, r, err)
		return "", false
	}
	return "../" + url.PathEscape(key), true
}

func (h *Handler) retry(w http.ResponseWriter, r *http.Request, who string) (string, bool) {
	if h.opts.Plans == nil {
		h.fail(w, r, http.StatusNotFound, "statuspage: no plans are shown")
		return "", false
	}
	id := r.PathValue("id")
	if err := h.opts.Plans.RetryBy(r.Context(), id, who); err != nil {
		h.failErr(w, r, err)
		return "", false
	}
	return "../" + url.PathEscape(id), true
}

func (h *Handler) abort(w http.ResponseWriter, r *http.Request, who string) (string, bool) {
	if h.opts.Plans == nil {
		h.fail(w, r, http.StatusNotFound, "statuspage: no plans are shown")
		return "", false
	}
	id := r.PathValue("id")
	reason := r.PostFormValue("reason")
	if reason == "" {
		reason = "aborted from the status page"
	}
	if err := h.opts.Plans.AbortBy(r.Context(), id, reason, who); err != nil {
		h.failErr(w, r, err)
		return "", false
	}
	return "../" + url.PathEscape(id), true
}

// templates holds the pages (see page.html), parsed when the first page
// is written rather than when a program that links the package starts.
var templates = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("").Funcs(template.FuncMap{
		"pathEscape": url.PathEscape,
		"dict":       dict,
		"ago":        ago,
		"history":    groupHistory,
		"more":       more,
		"statuses":   statuses,
		"waterfall":  waterfallSVG,
		"when":       func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"secs": func(s float64) string {
			return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
		},
	}).ParseFS(pageFS, "page.html"))
})
