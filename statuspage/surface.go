package statuspage

import (
	"net/http"
)

// SurfaceOptions says what Mux serves. The zero value serves an empty
// page at "/" and health endpoints that pass whenever the process
// answers, and no /metrics.
type SurfaceOptions struct {
	// Page is the status page, served at "/" and below (see New).
	Page Options
	// Metrics serves GET /metrics; nil serves none (the path is then the
	// page's, which has nothing there). The prometheus module's handler fits
	// (promhttp.HandlerFor(registry, promhttp.HandlerOpts{})); this
	// package takes any http.Handler, so it depends on no metrics
	// library.
	Metrics http.Handler
	// Health are the checks of /healthz and /readyz (see NewHealth).
	Health HealthOptions
}

// Mux returns a program's whole HTTP surface as one http.Handler: the
// status page at "/" (with its own Authorizer), Metrics at /metrics, and
// Health's /healthz and /readyz (with /healthz/{name} and /readyz/{name}),
// which ask no Authorizer, so probes and scrapers need no login; put
// the handler behind the program's own authentication where /metrics
// must not be public. It fails as New and NewHealth do, with a
// *converge.ConfigError for invalid options (or a *ActionsError).
func Mux(opts SurfaceOptions) (http.Handler, error) {
	page, err := New(opts.Page)
	if err != nil {
		return nil, err
	}
	health, err := NewHealth(opts.Health)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/", page)
	for _, p := range []string{"GET /healthz", "GET /healthz/{name}"} {
		mux.Handle(p, health.Healthz())
	}
	for _, p := range []string{"GET /readyz", "GET /readyz/{name}"} {
		mux.Handle(p, health.Readyz())
	}
	if opts.Metrics != nil {
		mux.Handle("GET /metrics", opts.Metrics)
	}
	return mux, nil
}
