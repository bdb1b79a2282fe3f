// Package statuspage is a status page for converge: an http.Handler that
// shows what the loops of a program are doing, as HTML for people and as
// JSON for tools. Start with Mux (the page, /metrics and health in one
// handler); docs/operating.md is the guide.
//
// It shows, per target reconciler (see WatchTarget), the current target
// revision, the last pass (when, its result, how long it took, and on
// the target's page its time line as a waterfall: every item of every
// walk from its start to its end, failed ones red; see WaterfallView), the
// failed passes, whether an update lock stopped the last one, the host
// actions still pending (a reboot required: since when, for which
// revision, asked by which item; read from the reconciler, which keeps
// them in its Store, so they survive a restart of the program) and those
// items asked for while the page watched, and the target's graph per stage: as SVG when
// Graphviz dot is on PATH (one dot at a time, each picture drawn once per
// revision and outcomes), and always as a list in dependency order with
// each item's outcome in the latest pass (see GraphItem.Outcome; never an
// older pass's), plus its Mermaid text. The revision is the one the
// reconciler's Store keeps with the target, so it grows across restarts;
// the passes are counted from the reconciler's events by WatchTarget,
// from the time it was called (the page says since when), so create it
// before the reconciler runs.
//
// Per controller (controller.Controller) it shows the objects per
// lifecycle state with their counts, how many are above their state's SLA
// and halted, the quarantined objects (as the store has them, for every
// replica), the objects halted by a terminal error, the objects of one
// state, and one object's page with its stored history (and its data
// only when Options.ShowData is set, which also shows each target's
// current target). Shown data never shows a secret: values named secret
// (converge.IsSecretEnv, Options.SecretKeys), "NAME=value" entries of an
// environment list with a secret NAME and passwords in URLs read
// MaskSecret, sealed values MaskSealed. Per plan
// (plan.Runner) it shows the progress of every command and of
// every target, and the plan's history. With Options.Rollouts it shows
// the fleet's rollouts (fleet.RolloutStatus): per rollout its state and
// why, and per wave its devices pending, moving, ready and failed beside
// its thresholds; a paused, aborted or failed rollout is in Needs
// attention.
//
// # What needs attention
//
// The overview starts with Needs attention (OverviewView.NeedsAttention):
// the quarantined objects (as the store has them), the objects halted by
// a terminal error, the objects above their state's SLA, the targets whose
// last pass failed, the host actions targets still wait for, the plans that failed or were aborted and the running
// plans with failed targets, each with its last error, its age and, when
// Options.Actions is set and the Authorizer allows the viewer, the action
// beside it (release, retry, abort; its form brings the viewer back to
// the overview). When nothing needs anyone it says "Nothing needs
// attention." in one line.
//
// Every page shows the time it was made ("as of", Options.Now; asOf in
// its JSON) and
// ages ("3 min ago", the exact time on hover), and reloads itself every
// Options.Refresh with a meta refresh, which the viewer turns off with
// the query parameter refresh=off (the page's links keep it; no
// JavaScript is involved). Long lists come a page at a time
// (Options.PageSize, query parameter page) with a filter by state and by
// text on the key (query parameters state, status and q; see StateView
// and PlansView); a query parameter that cannot be read is answered with
// 400 and a *QueryError's message. Identical consecutive entries of a
// history, and identical failed passes in a row of a target, are one row,
// counted, with their first and last time. A plan's page shows the
// progress of every command and group of hosts, and every failed host
// with its reason.
//
// # Paths
//
//	/                                       OverviewView
//	/targets/{name}                         TargetView
//	/targets/{name}/graph                   GraphView (graph.svg?stage=i: the SVG)
//	/controllers/{kind}                     ControllerView
//	/controllers/{kind}/states/{state}      StateView (?q=&status=&page=)
//	/controllers/{kind}/objects             StateView (?state=&status=&q=&page=)
//	/controllers/{kind}/objects/{key}       ObjectView (the key path-escaped)
//	/plans                                  PlansView (?state=&q=&page=)
//	/plans/{id}                             PlanView
//
// A request with "Accept: application/json" gets the view as JSON at the
// same path; errors are an ErrorView, a path the page does not know (404)
// or a method it does not take there (405) included. The page is html/template with a
// little CSS and no JavaScript; everything it shows is escaped, and its
// Content-Security-Policy allows no script. Its links are relative, so
// it may be mounted under a prefix with http.StripPrefix.
//
// # Authentication
//
// The page has no authentication of its own: it must sit behind the
// program's. Options.Authorizer is how a program plugs its own in: it is
// called for every read (ActionRead) and every action (ActionRetry,
// ActionAbort, ActionRelease, ActionCancel) with the request, and returns who asks or
// an error to refuse; a refused request gets 403 Forbidden (an ErrorView
// when JSON was asked). Without an Authorizer every request that reaches
// the page may read every view, and actions cannot be turned on (New
// fails with a *ActionsError matching ErrActionsNeedAuthorizer).
//
// # Actions
//
// The page is read-only unless Options.Actions is set; GET never changes
// anything. With actions, it offers the viewers the Authorizer allows
// them buttons to retry a failed plan
// (POST /plans/{id}/retry), abort a running one (POST /plans/{id}/abort,
// with a reason) and release a halted object
// (POST /controllers/{kind}/objects/{key}/release), on the overview and
// on the page of the object or plan, and to cancel an object that is not
// cancelled (POST /controllers/{kind}/objects/{key}/cancel, on its page:
// its running handler is stopped on whichever replica runs it, see
// controller.Controller.Cancel). Each action is stored with the
// Authorizer's who in the By of the history entries it writes
// (controller.Controller.ReleaseBy, controller.Controller.Cancel,
// plan.Runner.RetryBy and AbortBy), so the object's or plan's history says who did it. Each POST must carry the
// CSRF token the page rendered with its form (form field "csrf", or the
// header X-CSRF-Token; the JSON views list them in their actions): the
// expiry, what the token is bound to (below) and an HMAC of the viewer
// (the Authorizer's who), the action, its object, that expiry and that
// binding, under a random key of the Handler (or Options.Secret),
// compared in constant time. A token thus allows one viewer one action on
// one object, until it expires (Options.TokenTTL): another viewer's,
// another object's, another action's or an expired one is refused (403).
//
// A token is good once, on every Handler that shares Options.Secret
// (replicas, or one program before and after a restart), with no memory
// shared between them: it is bound to the object as the store has it
// when the page offers the action, and the action changes that, so a
// replayed token no longer matches anywhere and is refused with 409
// Conflict (the page was made for an object that changed since; reload
// it). A release is bound to the object's stored version (a halted object
// is not handled, so the version stays while it waits; the release
// writes it). A retry is bound to the plan's stored version (a plan
// stopped in an error state does not move; the retry writes it). An
// abort is bound to the plan's run instead (its first command not
// completed, when that command started, and the attempts of its
// targets), as every step of a running plan moves its version: a retry
// changes the run (except for a plan aborted before its first command
// started or listed a target), and within one run the plan itself
// refuses a second abort (plan.ErrAborted, 409). A token is spent only when its action
// succeeds: one whose action failed (a store that did not answer) stays
// good; while its action runs, the same Handler refuses it, and
// afterwards it keeps refusing it until it expires. A token is rendered
// only for viewers the Authorizer allows its action, in HTML and in JSON.
// A cross-origin request (by Sec-Fetch-Site or Origin, see
// http.CrossOriginProtection) is refused too. A refused action is
// 403 Forbidden.
//
// # Health
//
// Health (NewHealth) serves /healthz (the process is alive) and /readyz
// (its loops run and its store answers: Loop, StoreCheck, or any
// Checker) as controller-runtime's manager serves them, on its own,
// without the page; it asks no Authorizer, so a probe needs no login.
//
// # One handler for it all
//
// Mux returns a program's whole HTTP surface as one http.Handler: the
// page at "/", the program's metrics handler at /metrics (any
// http.Handler, such as the prometheus module's registry behind
// promhttp), and /healthz and /readyz, from one SurfaceOptions.
package statuspage
