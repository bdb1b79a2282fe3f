package statuspage_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge/controller"
)

// getAs reads the HTML page at path as the viewer who.
func getAs(t *testing.T, h http.Handler, path, who string) string {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Accept", "text/html")
	req.Header.Set("X-User", who)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	body, err := io.ReadAll(rec.Result().Body)
	require.NoError(t, err)
	return string(body)
}

// TestCancelFromThePage offers the cancel of an object to a viewer the
// Authorizer allows it, and to nobody else; the cancel halts the object
// and its history names the viewer; a token is used once, and a
// cancelled object is offered no cancel.
func TestCancelFromThePage(t *testing.T) {
	h, c, _ := newHandler(t, true)
	const path = "/controllers/host/objects/ready-1"
	assert.NotContains(t, getAs(t, h, path, "alice"), "/cancel", "alice may not cancel")
	page := getAs(t, h, path, "carol")
	token := csrfToken(t, page, "../../../controllers/host/objects/ready-1/cancel")

	as := map[string]string{"X-User": "carol", "Origin": "http://example.com", "Sec-Fetch-Site": "same-origin"}
	rec := post(h, path+"/cancel", url.Values{"csrf": {token}}, map[string]string{"X-User": "alice"})
	assert.Equal(t, http.StatusForbidden, rec.Code, "a token is the viewer's own")
	rec = post(h, "/controllers/host/objects/ready-2/cancel", url.Values{"csrf": {token}}, as)
	assert.Equal(t, http.StatusForbidden, rec.Code, "a token is the object's own")

	rec = post(h, path+"/cancel", url.Values{"csrf": {token}}, as)
	require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
	assert.Equal(t, "../ready-1", rec.Header().Get("Location"))
	objs, err := c.StoredObjects(t.Context())
	require.NoError(t, err)
	i := slices.IndexFunc(objs, func(o controller.Object) bool { return o.Key == "ready-1" })
	require.GreaterOrEqual(t, i, 0)
	assert.Equal(t, controller.HaltCancelled, objs[i].Halted, "stored halted")
	hist, err := c.History(t.Context(), "ready-1")
	require.NoError(t, err)
	last := hist[len(hist)-1]
	assert.Equal(t, controller.ReasonCancelled, last.Reason)
	assert.Equal(t, "carol", last.By)

	rec = post(h, path+"/cancel", url.Values{"csrf": {token}}, as)
	assert.Equal(t, http.StatusForbidden, rec.Code, "a token is used once")
	hist, err = c.History(t.Context(), "ready-1")
	require.NoError(t, err)
	assert.Equal(t, last, hist[len(hist)-1], "cancelled once")
}
