package fleet_test

import (
	"context"
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

	token, _ := srv.Enrol(ctx, "pi-7")
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
