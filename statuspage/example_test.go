package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/statuspage"
)

// ExampleNew serves the page of a controller and reads its JSON form.
func ExampleNew() {
	ctx := context.Background()
	ctrl, err := controller.New(controller.Config{
		Kind: "host",
		Handler: controller.HandlerFunc(func(context.Context, controller.Object) (controller.Result, error) {
			return controller.NoChange(), nil
		}),
	})
	if err != nil {
		panic(err)
	}
	for key, state := range map[string]controller.State{"host-1": "ready", "host-2": "ready", "host-3": "provisioning"} {
		if err := ctrl.Add(ctx, key, state, nil); err != nil {
			panic(err)
		}
	}
	page, err := statuspage.New(statuspage.Options{
		Title:       "fleet",
		Controllers: []statuspage.Controller{{Controller: ctrl, States: []controller.State{"new", "provisioning", "ready"}}},
	})
	if err != nil {
		panic(err)
	}
	// A program serves it with http.ListenAndServe(addr, page), or under
	// a prefix: mux.Handle("/status/", http.StripPrefix("/status", page)).
	srv := httptest.NewServer(page)
	defer srv.Close()

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/controllers/host", nil)
	if err != nil {
		panic(err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	var v statuspage.ControllerView
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		panic(err)
	}
	fmt.Println(v.Kind, v.Objects, "objects")
	for _, s := range v.States {
		fmt.Printf("%s: %d\n", s.State, s.Objects)
	}
	// Output:
	// host 3 objects
	// new: 0
	// provisioning: 1
	// ready: 2
}

// ExampleNewHealth serves /healthz and /readyz: ready once the loop runs.
func ExampleNewHealth() {
	var loop statuspage.Loop
	health, err := statuspage.NewHealth(statuspage.HealthOptions{Ready: map[string]statuspage.Checker{
		"loop":  loop.Check,
		"store": statuspage.StoreCheck(converge.NewMemStore()),
	}})
	if err != nil {
		panic(err)
	}
	probe := func(path string) {
		rec := httptest.NewRecorder()
		health.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		fmt.Printf("%s %d %q\n", path, rec.Code, rec.Body.String())
	}
	probe("/healthz")
	probe("/readyz")
	_ = loop.Run(context.Background(), func(context.Context) error {
		probe("/readyz")
		return nil
	})
	// Output:
	// /healthz 200 "ok"
	// /readyz 500 "[-]loop failed: reason withheld\n[+]store ok\nreadyz check failed\n"
	// /readyz 200 "ok"
}

// ExampleAuthorizer puts the page behind the program's own
// authentication (here a fixed bearer token standing for it): a request
// it refuses is 403; a signed-in request is "ops", who may do everything.
func ExampleAuthorizer() {
	authorize := func(r *http.Request, a statuspage.Action) (string, error) {
		if r.Header.Get("Authorization") != "Bearer ops-token" {
			return "", errors.New("not signed in")
		}
		return "ops", nil // ops may read and do every action
	}
	page, err := statuspage.New(statuspage.Options{Authorizer: authorize, Actions: true})
	if err != nil {
		panic(err)
	}
	for _, auth := range []string{"", "Bearer ops-token"} {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Accept", "application/json")
		req.Header.Set("Authorization", auth)
		rec := httptest.NewRecorder()
		page.ServeHTTP(rec, req)
		fmt.Println(rec.Code)
	}
	_, err = statuspage.New(statuspage.Options{Actions: true})
	fmt.Println(errors.Is(err, statuspage.ErrActionsNeedAuthorizer))
	// Output:
	// 403
	// 200
	// true
}

// ExampleMux serves a device agent's whole HTTP surface from one handler:
// the status page, /metrics, /healthz and /readyz.
func ExampleMux() {
	var loop statuspage.Loop
	// A stand-in for the prometheus module's registry behind
	// promhttp.HandlerFor(registry, promhttp.HandlerOpts{}).
	metrics := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "converge_target_passes_total 1")
	})
	surface, err := statuspage.Mux(statuspage.SurfaceOptions{
		Page:    statuspage.Options{Title: "device agent"},
		Metrics: metrics,
		Health:  statuspage.HealthOptions{Ready: map[string]statuspage.Checker{"loop": loop.Check}},
	})
	if err != nil {
		panic(err)
	}
	// A program serves it with statuspage.ListenAndServe(ctx, addr, surface),
	// beside its loop.
	probe := func(path string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Accept", "application/json")
		surface.ServeHTTP(rec, req)
		body := rec.Body.String()
		if path == "/" {
			var v statuspage.OverviewView
			if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
				panic(err)
			}
			body = v.Title
		}
		fmt.Printf("%s %d %q\n", path, rec.Code, body)
	}
	probe("/")
	probe("/metrics")
	probe("/healthz")
	probe("/readyz/loop")
	_ = loop.Run(context.Background(), func(context.Context) error {
		probe("/readyz")
		return nil
	})
	// Output:
	// / 200 "device agent"
	// /metrics 200 "converge_target_passes_total 1\n"
	// /healthz 200 "ok"
	// /readyz/loop 500 "internal server error: statuspage: loop not running\n"
	// /readyz 200 "ok"
}

// ListenAndServe serves a surface beside the program's loop until the
// program stops: both run in one errgroup, so a listener that cannot start
// stops the loop too, and a signal stops both.
func ExampleListenAndServe() {
	surface, err := statuspage.Mux(statuspage.SurfaceOptions{Page: statuspage.Options{Title: "device agent"}})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithTimeout(context.Background(), 100*time.Millisecond) // signal.NotifyContext in a program
	defer stop()
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { <-ctx.Done(); return nil }) // the program's loop, for example TargetReconciler.Run
	g.Go(func() error { return statuspage.ListenAndServe(ctx, "127.0.0.1:0", surface) })
	fmt.Println(g.Wait())
	// Output: <nil>
}
