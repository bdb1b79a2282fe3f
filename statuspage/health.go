package statuspage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/convergekit/converge"
)

// Checker is one health check, of the shape of controller-runtime's
// healthz.Checker: nil when healthy, the reason otherwise. It gets the
// probe's request, whose context ends when the probe gives up.
type Checker func(r *http.Request) error

// Ping is the Checker that always passes: the process answers.
func Ping(*http.Request) error { return nil }

// ErrLoopNotRunning is the reason a Loop's Check fails: its loop is not
// running (not started yet, or returned).
var ErrLoopNotRunning = errors.New("statuspage: loop not running")

// Loop tracks whether a loop of the program runs (a controller's Run, a
// target reconciler's Run), for a readiness check. The zero value is a
// loop that is not running. It is safe for concurrent use.
type Loop struct {
	running atomic.Int64
}

// Run calls run(ctx) and counts the loop as running until it returns;
// it returns what run returned.
func (l *Loop) Run(ctx context.Context, run func(context.Context) error) error {
	l.running.Add(1)
	defer l.running.Add(-1)
	return run(ctx)
}

// Check is the Loop's Checker: nil while Run runs, ErrLoopNotRunning
// otherwise.
func (l *Loop) Check(*http.Request) error {
	if l.running.Load() > 0 {
		return nil
	}
	return ErrLoopNotRunning
}

// storeProbeKey is the key a StoreCheck reads; it need not exist.
const storeProbeKey = "statuspage/readyz"

// StoreCheck returns the Checker that the store answers: a Get of a key
// that need not exist, under the probe's context, succeeds or finds
// nothing (converge.ErrStoreNotFound).
func StoreCheck(store converge.Store) Checker {
	return func(r *http.Request) error {
		_, err := store.Get(r.Context(), storeProbeKey)
		if err != nil && !errors.Is(err, converge.ErrStoreNotFound) {
			return fmt.Errorf("statuspage: store does not answer: %w", err)
		}
		return nil
	}
}

// HealthOptions are the checks a Health serves. The zero value serves a
// /healthz and a /readyz that pass whenever the process answers.
type HealthOptions struct {
	// Live are the checks of /healthz (the process is alive), by name;
	// nil means one check "ping" (Ping).
	Live map[string]Checker
	// Ready are the checks of /readyz (its loops run and its store
	// answers: see Loop and StoreCheck), by name; nil means one check
	// "ping" (Ping).
	Ready map[string]Checker
}

// namedCheck is a Checker and its name.
type namedCheck struct {
	name  string
	check Checker
}

// Health serves health endpoints as controller-runtime's manager does,
// on its own, without the page: GET /healthz runs the liveness checks
// and GET /readyz the readiness checks, answering 200 "ok" when all
// pass and 500 listing each check ("[+]name ok", "[-]name failed:
// reason withheld") otherwise; "?verbose" lists them on success too, and
// "?exclude=name" (repeatable) skips a check. GET /healthz/{name} and
// /readyz/{name} run one check, answering 200 "ok" or 500 with its
// error, and 404 for an unknown name. Create it with NewHealth; the zero
// value is not usable. It is safe for concurrent use, and its Healthz
// and Readyz handlers may be mounted on their own.
type Health struct {
	live, ready []namedCheck
	mux         *http.ServeMux
}

// NewHealth validates opts and returns the Health. A check without a name,
// with "/" in its name, or nil fails with a *converge.ConfigError.
func NewHealth(opts HealthOptions) (*Health, error) {
	live, err := namedChecks("statuspage.HealthOptions.Live", opts.Live)
	if err != nil {
		return nil, err
	}
	ready, err := namedChecks("statuspage.HealthOptions.Ready", opts.Ready)
	if err != nil {
		return nil, err
	}
	h := &Health{live: live, ready: ready, mux: http.NewServeMux()}
	h.mux.Handle("GET /healthz", h.Healthz())
	h.mux.Handle("GET /healthz/{name}", h.Healthz())
	h.mux.Handle("GET /readyz", h.Readyz())
	h.mux.Handle("GET /readyz/{name}", h.Readyz())
	return h, nil
}

// namedChecks sorts checks by name, or says which is invalid.
func namedChecks(field string, checks map[string]Checker) ([]namedCheck, error) {
	if checks == nil {
		return []namedCheck{{name: "ping", check: Ping}}, nil
	}
	out := make([]namedCheck, 0, len(checks))
	for name, c := range checks {
		switch {
		case name == "" || strings.Contains(name, "/"):
			return nil, &converge.ConfigError{Field: field, Reason: fmt.Sprintf("has a check named %q (empty or with a slash)", name)}
		case c == nil:
			return nil, &converge.ConfigError{Field: field, Reason: fmt.Sprintf("has a nil check %q", name)}
		}
		out = append(out, namedCheck{name, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out, nil
}

// ServeHTTP serves /healthz, /readyz and their checks by name; other
// paths are 404.
func (h *Health) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Healthz is the handler of the liveness checks, to mount at any path: it
// runs them all, or, under a ServeMux pattern with a {name} wildcard
// (such as "GET /healthz/{name}"), just the check of that name.
func (h *Health) Healthz() http.Handler { return checksHandler{"healthz", h.live} }

// Readyz is the handler of the readiness checks, as Healthz is of the
// liveness checks.
func (h *Health) Readyz() http.Handler { return checksHandler{"readyz", h.ready} }

// checksHandler serves one set of checks.
type checksHandler struct {
	kind   string
	checks []namedCheck
}

func (c checksHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	if name := r.PathValue("name"); name != "" {
		for _, nc := range c.checks {
			if nc.name == name {
				if err := nc.check(r); err != nil {
					http.Error(w, fmt.Sprintf("internal server error: %v", err), http.StatusInternalServerError)
					return
				}
				_, _ = fmt.Fprint(w, "ok")
				return
			}
		}
		http.Error(w, fmt.Sprintf("statuspage: no %s check %q", c.kind, name), http.StatusNotFound)
		return
	}
	excluded := map[string]bool{}
	for _, e := range r.URL.Query()["exclude"] {
		excluded[strings.TrimSpace(e)] = true
	}
	var b strings.Builder
	failed := false
	for _, nc := range c.checks {
		if excluded[nc.name] {
			fmt.Fprintf(&b, "[+]%s excluded: ok\n", nc.name)
			continue
		}
		if err := nc.check(r); err != nil {
			failed = true
			fmt.Fprintf(&b, "[-]%s failed: reason withheld\n", nc.name)
			continue
		}
		fmt.Fprintf(&b, "[+]%s ok\n", nc.name)
	}
	if failed {
		fmt.Fprintf(&b, "%s check failed", c.kind) // http.Error ends the line
		http.Error(w, b.String(), http.StatusInternalServerError)
		return
	}
	if _, verbose := r.URL.Query()["verbose"]; verbose {
		fmt.Fprintf(&b, "%s check passed\n", c.kind)
		_, _ = fmt.Fprint(w, b.String())
		return
	}
	_, _ = fmt.Fprint(w, "ok")
}
