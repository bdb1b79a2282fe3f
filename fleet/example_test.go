package fleet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
)

// A server on one store: enrol a device, give it a target, and read its
// status back once it reported.
func Example() {
	ctx := context.Background()
	srv, err := fleet.NewServer(fleet.Config{
		Store:  converge.NewMemStore(),
		Logger: slog.New(slog.DiscardHandler),
		// The program's own authentication goes here.
		Authorizer: func(r *http.Request, a fleet.Action) (string, error) { return "operator", nil },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	// Serve it with fleet.NewHTTPServer(":8443", srv) in a program.
	web := httptest.NewServer(srv)
	defer web.Close()

	token, _ := srv.Enrol(ctx, "pi-7", nil)
	rev, _ := srv.SetTarget(ctx, "pi-7", fleet.Target{Desired: converge.Desired{
		Items: []converge.DesiredItem{{ID: "app", Presence: converge.Present}},
	}})

	// The device reads its target...
	req, _ := http.NewRequest("GET", web.URL+"/v1/devices/pi-7/target", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	res, _ := web.Client().Do(req)
	res.Body.Close()
	fmt.Println(res.StatusCode, res.Header.Get("ETag"))

	// ... converges, and reports for that revision.
	body := fmt.Sprintf(`{"revision":%d,"items":[{"id":"app","state":"present"}]}`, rev)
	req, _ = http.NewRequest("PUT", web.URL+"/v1/devices/pi-7/report", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	res, _ = web.Client().Do(req)
	res.Body.Close()
	fmt.Println(res.StatusCode)

	st, _ := srv.DeviceStatus(ctx, "pi-7")
	fmt.Println(st.State, "at revision", st.Reported)
	// Output:
	// 200 "1"
	// 204
	// ready at revision 1
}

// A rollout in waves: a canary of one device, then a quarter of the
// devices, then the rest, pausing when more than 5% of a wave fails. Run
// srv.RunRollouts(ctx) on every replica to move the devices.
func ExampleServer_CreateRollout() {
	ctx := context.Background()
	srv, err := fleet.NewServer(fleet.Config{Store: converge.NewMemStore(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()
	for i := range 8 {
		_, _ = srv.Enrol(ctx, fmt.Sprintf("pi-%d", i), map[string]string{"site": "lyon"})
	}
	_, _ = srv.Enrol(ctx, "lab-1", map[string]string{"site": "lab"})

	st, err := srv.CreateRollout(ctx, fleet.RolloutSpec{
		ID:       "app-2",
		Selector: "site=lyon",
		Items:    []converge.DesiredItem{{ID: "app", Presence: converge.Present}},
		Payload:  json.RawMessage(`{"version":"2"}`),
		Waves: []fleet.Wave{
			{Name: "canary", Count: 1},
			{Name: "quarter", Percent: 25, ErrorThreshold: 5},
			{Name: "rest", ErrorThreshold: 5},
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(st.ID, st.State, st.Devices, "devices")
	for _, w := range st.Waves {
		fmt.Println(" ", w.Name, w.Devices, w.State)
	}
	_ = srv.PauseRollout(ctx, "app-2", "waiting for the weekend")
	st, _ = srv.Rollout(ctx, "app-2")
	fmt.Println(st.State+":", st.Reason)
	// Output:
	// app-2 running 8 devices
	//   canary 1 pending
	//   quarter 2 pending
	//   rest 5 pending
	// paused: waiting for the weekend
}
