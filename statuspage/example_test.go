package statuspage_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"

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
