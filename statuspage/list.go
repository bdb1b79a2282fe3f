package statuspage

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/convergekit/converge/controller"
)

// QueryError is the error of a request whose query parameter cannot be
// read; the page answers it with 400 Bad Request.
type QueryError struct {
	// Param names the parameter, Value is what it held.
	Param, Value string
	// Reason says what it must be.
	Reason string
}

// Error names the parameter and its value.
func (e *QueryError) Error() string {
	return fmt.Sprintf("statuspage: query parameter %s=%q: %s", e.Param, e.Value, e.Reason)
}

// pageOf cuts the page the request asks for (query parameter page, from
// 1) out of n rows: it returns the paging and the bounds of the rows.
func (h *Handler) pageOf(r *http.Request, n int) (Paging, int, int, error) {
	size := h.opts.PageSize
	p := Paging{Query: r.URL.Query().Get("q"), Page: 1, Total: n, PageSize: size, Pages: max((n+size-1)/size, 1)}
	if s := r.URL.Query().Get("page"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			return p, 0, 0, &QueryError{Param: "page", Value: s, Reason: "want a page number from 1"}
		}
		p.Page = v
	}
	link := func(page int) string {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(page))
		return "?" + q.Encode()
	}
	if p.Page > 1 {
		p.Prev = link(min(p.Page-1, p.Pages))
	}
	if p.Page < p.Pages {
		p.Next = link(p.Page + 1)
	}
	from := min((p.Page-1)*size, n)
	return p, from, min(from+size, n), nil
}

// matches reports whether key contains the text of query parameter q.
func matches(r *http.Request, key string) bool {
	q := r.URL.Query().Get("q")
	return q == "" || strings.Contains(strings.ToLower(key), strings.ToLower(q))
}

// statusMatch returns the test of the status filter s on an object and
// whether it is above its SLA, or an error for an unknown one.
func statusMatch(s string) (func(o controller.Object, above bool) bool, error) {
	switch s {
	case "":
		return func(controller.Object, bool) bool { return true }, nil
	case StatusQuarantined:
		return func(o controller.Object, _ bool) bool { return o.Halted == controller.HaltQuarantined }, nil
	case StatusTerminal:
		return func(o controller.Object, _ bool) bool { return o.Halted == controller.HaltTerminal }, nil
	case StatusHalted:
		return func(o controller.Object, _ bool) bool { return o.Halted != "" }, nil
	case StatusAboveSLA:
		return func(_ controller.Object, above bool) bool { return above }, nil
	}
	return nil, &QueryError{Param: "status", Value: s, Reason: "want quarantined, terminal, halted or above-sla"}
}

// state lists the objects of a controller in one state (from the path),
// or as the query parameters pick them, a page at a time.
func (h *Handler) state(w http.ResponseWriter, r *http.Request) {
	c, ok := h.lookupController(w, r)
	if !ok {
		return
	}
	kind := c.Controller.Kind()
	state := r.PathValue("state")
	if state == "" {
		state = r.URL.Query().Get("state")
	}
	v := StateView{AsOf: h.opts.Now(), Kind: kind, State: state, Status: r.URL.Query().Get("status"), Objects: []ObjectSummary{}}
	keep, err := statusMatch(v.Status)
	if err != nil {
		h.failQuery(w, r, err)
		return
	}
	objs := c.Controller.Objects()
	above := aboveSLA(c.Controller)
	for _, sc := range summarize(c, objs, above).States {
		v.States = append(v.States, sc.State)
	}
	var picked []controller.Object
	for _, o := range objs {
		if (state == "" || string(o.State) == state) && keep(o, above[o.Key]) && matches(r, o.Key) {
			picked = append(picked, o)
		}
	}
	quarantinedFirst(picked)
	p, from, to, err := h.pageOf(r, len(picked))
	if err != nil {
		h.failQuery(w, r, err)
		return
	}
	v.Paging = p
	for _, o := range picked[from:to] {
		v.Objects = append(v.Objects, objectSummary(kind, o, above[o.Key]))
	}
	h.write(w, r, http.StatusOK, "state", v)
}

// plans lists the plans, a page at a time, filtered by the query
// parameters state and q.
func (h *Handler) plans(w http.ResponseWriter, r *http.Request) {
	all, _, err := h.planSummaries(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	v := PlansView{AsOf: h.opts.Now(), State: r.URL.Query().Get("state"), States: []string{}, Plans: []PlanSummary{}}
	var picked []PlanSummary
	for _, s := range all {
		if s.State != "" && !slices.Contains(v.States, s.State) {
			v.States = append(v.States, s.State)
		}
		if (v.State == "" || s.State == v.State) && matches(r, s.ID) {
			picked = append(picked, s)
		}
	}
	sort.Strings(v.States)
	p, from, to, err := h.pageOf(r, len(picked))
	if err != nil {
		h.failQuery(w, r, err)
		return
	}
	v.Paging = p
	v.Plans = append(v.Plans, picked[from:to]...)
	h.write(w, r, http.StatusOK, "plans", v)
}

// failQuery answers a request whose query cannot be read.
func (h *Handler) failQuery(w http.ResponseWriter, r *http.Request, err error) {
	h.fail(w, r, http.StatusBadRequest, err.Error())
}

// objectsLink is the link, relative to the handler's root, to the
// objects of kind with the status filter status.
func objectsLink(kind, status string) string {
	return "controllers/" + url.PathEscape(kind) + "/objects?status=" + url.QueryEscape(status)
}

// quarantinedFirst moves the quarantined objects of objs to its front,
// keeping the order of each part.
func quarantinedFirst(objs []controller.Object) {
	sort.SliceStable(objs, func(i, j int) bool {
		return objs[i].Halted == controller.HaltQuarantined && objs[j].Halted != controller.HaltQuarantined
	})
}
