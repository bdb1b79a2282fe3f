package statuspage

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/internal/errtext"
	"github.com/convergekit/converge/plan"
)

// tokenLen is the length of a decoded token: the expiry (Unix seconds),
// the anchor and the HMAC.
const tokenLen = 8 + 8 + sha256.Size

// The tokens a Handler keeps in memory, by MAC.
type spent struct {
	exp  int64 // Unix second the token expires
	done bool  // its action succeeded; false: running now
}

// statusError is an error the page answers with its own status.
type statusError struct {
	status int
	msg    string
}

func (e *statusError) Error() string { return e.msg }

// tokenMAC is the HMAC under the handler's secret of who may do action
// on (kind, key), as it stood at anchor, until the Unix second exp.
func (h *Handler) tokenMAC(who string, action Action, kind, key string, exp int64, anchor uint64) []byte {
	m := hmac.New(sha256.New, h.secret)
	for _, part := range []string{who, string(action), kind, key} {
		// Length-prefixed, so no two tuples sign the same bytes.
		_ = binary.Write(m, binary.BigEndian, uint32(len(part)))
		m.Write([]byte(part))
	}
	_ = binary.Write(m, binary.BigEndian, exp)
	_ = binary.Write(m, binary.BigEndian, anchor)
	return m.Sum(nil)
}

// token is the CSRF token allowing who to do action on (kind, key) as it
// stands at anchor (see anchorOf), until it expires (Options.TokenTTL
// from now): the expiry, the anchor and their HMAC.
func (h *Handler) token(who string, action Action, kind, key string, anchor uint64) string {
	exp := time.Now().Add(h.ttl).Unix()
	b := binary.BigEndian.AppendUint64(nil, uint64(exp))
	b = binary.BigEndian.AppendUint64(b, anchor)
	return base64.RawURLEncoding.EncodeToString(append(b, h.tokenMAC(who, action, kind, key, exp, anchor)...))
}

// verify checks the token got for who doing action on (kind, key): it
// returns the anchor it was made at, its expiry and its MAC, or why it refuses it (a
// malformed token, one signed for another viewer, action or object, or an
// expired one).
func (h *Handler) verify(got, who string, action Action, kind, key string) (anchor uint64, exp int64, mac, why string) {
	raw, err := base64.RawURLEncoding.DecodeString(got)
	if got == "" || err != nil || len(raw) != tokenLen {
		return 0, 0, "", "missing or invalid CSRF token"
	}
	exp = int64(binary.BigEndian.Uint64(raw[:8]))
	anchor = binary.BigEndian.Uint64(raw[8:16])
	if !hmac.Equal(raw[16:], h.tokenMAC(who, action, kind, key, exp, anchor)) {
		return 0, 0, "", "missing or invalid CSRF token"
	}
	if time.Now().Unix() >= exp {
		return 0, 0, "", "expired CSRF token"
	}
	return anchor, exp, string(raw[16:]), ""
}

// reserve marks the token mac as being used until its action ends, and
// reports false when it is in use or was used by this Handler before.
// Expired entries are dropped.
func (h *Handler) reserve(mac string, exp int64) bool {
	h.usedMu.Lock()
	defer h.usedMu.Unlock()
	if _, dup := h.used[mac]; dup {
		return false
	}
	now := time.Now().Unix()
	for m, s := range h.used {
		if s.done && now >= s.exp {
			delete(h.used, m)
		}
	}
	h.used[mac] = spent{exp: exp}
	return true
}

// settle ends the use of the token mac: spent when its action succeeded,
// good again when it failed.
func (h *Handler) settle(mac string, ok bool) {
	h.usedMu.Lock()
	defer h.usedMu.Unlock()
	if !ok {
		delete(h.used, mac)
		return
	}
	s := h.used[mac]
	s.done = true
	h.used[mac] = s
}

// anchorOf returns what a token for action on (kind, key) is bound to,
// read from the store now, so that every Handler sharing the secret and
// the store agrees on it:
//
//   - release: the stored version of the object (a halted object is not
//     handled, so its version stays while it waits; a release writes it);
//   - retry: the stored version of the plan (a plan in an error state
//     does not move; a retry writes it);
//   - cancel: when the object entered its state (Object.Since), not its
//     version, which its running handler's writes move;
//   - abort: the plan's run (see planRun), not its version, which every
//     step of a running plan moves; within one run the plan itself
//     refuses a second abort (plan.ErrAborted).
func (h *Handler) anchorOf(ctx context.Context, action Action, kind, key string) (uint64, error) {
	switch action {
	case ActionRelease:
		c, ok := h.controllers[kind]
		if !ok {
			return 0, &statusError{http.StatusNotFound, fmt.Sprintf("statuspage: no controller of kind %q", kind)}
		}
		o, err := storedObject(ctx, c.Controller, key)
		if err != nil {
			return 0, err
		}
		return o.Version, nil
	case ActionCancel:
		// When the object entered its state: its handler's writes move
		// its version, not this; within the state, a token is used once.
		c, ok := h.controllers[kind]
		if !ok {
			return 0, &statusError{http.StatusNotFound, fmt.Sprintf("statuspage: no controller of kind %q", kind)}
		}
		o, err := storedObject(ctx, c.Controller, key)
		if err != nil {
			return 0, err
		}
		return uint64(o.Since.UnixNano()), nil
	case ActionRetry, ActionAbort:
		if h.opts.Plans == nil {
			return 0, &statusError{http.StatusNotFound, "statuspage: no plans are shown"}
		}
		doc, version, err := h.opts.Plans.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		if action == ActionAbort {
			return planRun(doc), nil
		}
		return version, nil
	}
	return 0, &statusError{http.StatusNotFound, fmt.Sprintf("statuspage: no action %q", action)}
}

// storedObject reads the object key of c from the store (not from c's
// view, which may lag behind another replica's writes). When a record
// under c's kind is not an object, so the store cannot be listed whole, a
// quarantined object is still found (among the records that are
// objects); another is not, and the error says why.
func storedObject(ctx context.Context, c *controller.Controller, key string) (controller.Object, error) {
	objs, err := c.StoredObjects(ctx)
	if err != nil {
		q, qerr := c.Quarantined(ctx)
		if qerr != nil {
			return controller.Object{}, err
		}
		i := slices.IndexFunc(q, func(o controller.Object) bool { return o.Key == key })
		if i < 0 {
			return controller.Object{}, err
		}
		return q[i], nil
	}
	i := sort.Search(len(objs), func(i int) bool { return objs[i].Key >= key })
	if i == len(objs) || objs[i].Key != key {
		return controller.Object{}, fmt.Errorf("statuspage: %s %q: %w", c.Kind(), key, errtext.Bare(controller.ErrObjectNotFound, "controller: "))
	}
	return objs[i], nil
}

// planRun identifies the run of a plan that an abort token is bound to:
// the first command not completed, when it started, and the attempts of
// every target. A retry changes it (the failed command starts again, and
// its failed targets count one more attempt); the steps of a running
// command do not. The one retry that leaves it as it was is that of a plan
// aborted before its first command started or listed a target: there an
// abort token taken before stays good on the other Handlers until it
// expires (the Handler that took it refuses it).
func planRun(doc *plan.Document) uint64 {
	m := fnv.New64a()
	if doc.Status != nil {
		attempts := 0
		active := -1
		for i, cs := range doc.Status.Commands {
			if active < 0 && cs.State != plan.StateCompleted {
				active = i
				_ = binary.Write(m, binary.BigEndian, int64(i))
				_ = binary.Write(m, binary.BigEndian, cs.Started.UnixNano())
			}
			for _, ts := range cs.Targets {
				for _, t := range ts {
					attempts += t.Attempt
				}
			}
		}
		_ = binary.Write(m, binary.BigEndian, int64(attempts))
	}
	return m.Sum64()
}

// offer appends action a on (kind, key), as it stands at anchor (see
// anchorOf), to actions when the Authorizer allows it to the viewer of r;
// a viewer it refuses never sees its token.
func (h *Handler) offer(r *http.Request, actions []ActionView, a Action, path, kind, key string, anchor uint64) []ActionView {
	who, ok := h.authorize(r, a)
	if !ok {
		return actions
	}
	return append(actions, ActionView{Name: string(a), Method: http.MethodPost, Path: path, Token: h.token(who, a, kind, key, anchor)})
}

// An actionFunc does an action that the checks of action allowed, on
// behalf of who, and returns the page to go back to, relative to the
// action's path.
type actionFunc func(w http.ResponseWriter, r *http.Request, who string) (back string, ok bool)

// action wraps an actionFunc with the checks every action passes: actions
// enabled, the Authorizer allowing the viewer the action, a request from
// the page's own origin, and a CSRF token (the form field "csrf", or the
// header X-CSRF-Token) made for this viewer, action and object, not
// expired, not in use or used by this Handler, and made for the object as
// it stands in the store now (see anchorOf): a token whose action
// succeeded is refused by every Handler sharing the secret, as its action
// changed what the token is bound to; a token whose action failed stays
// good.
func (h *Handler) action(do actionFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !h.opts.Actions {
			h.fail(w, r, http.StatusForbidden, "statuspage: actions are disabled")
			return
		}
		name := Action(r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:])
		who, ok := h.authorize(r, name)
		if !ok {
			h.fail(w, r, http.StatusForbidden, "statuspage: "+string(name)+" refused")
			return
		}
		if err := h.cop.Check(r); err != nil {
			h.fail(w, r, http.StatusForbidden, "statuspage: cross-origin request refused")
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		got := r.Header.Get("X-CSRF-Token")
		if got == "" {
			got = r.PostFormValue("csrf")
		}
		kind, key := r.PathValue("kind"), firstNonEmpty(r.PathValue("key"), r.PathValue("id"))
		anchor, exp, mac, why := h.verify(got, who, name, kind, key)
		if why != "" {
			h.fail(w, r, http.StatusForbidden, "statuspage: "+why)
			return
		}
		if !h.reserve(mac, exp) {
			h.fail(w, r, http.StatusForbidden, "statuspage: CSRF token used before")
			return
		}
		done := false
		defer func() { h.settle(mac, done) }()
		now, err := h.anchorOf(r.Context(), name, kind, key)
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		if now != anchor {
			h.fail(w, r, http.StatusConflict, fmt.Sprintf("statuspage: %s %q: changed since the page offered to %s it (reload the page)", objectWord(kind), key, name))
			return
		}
		back, ok := do(w, r, who)
		if !ok {
			return
		}
		done = true
		if r.PostFormValue("return") == "overview" {
			back = root(r) // the form on the overview's Needs attention list
		}
		if wantsJSON(r) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(ErrorView{Status: http.StatusOK})
			return
		}
		// Relative, unlike http.Redirect's, so it works under a prefix.
		w.Header().Set("Location", back)
		w.WriteHeader(http.StatusSeeOther)
	}
}

// objectWord names what an action acts on: the kind of an object, or
// "plan".
func objectWord(kind string) string {
	if kind == "" {
		return "plan"
	}
	return kind
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
