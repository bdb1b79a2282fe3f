package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/controller"
)

// objectView is an object of a controller kind as the commands print it
// in JSON. Its shape is documented in doc.go; fields are only added.
type objectView struct {
	Kind    string `json:"kind"`
	Key     string `json:"key"`
	Version uint64 `json:"version"`
	// Sealed means the value is sealed and no key was given: only Kind,
	// Key, Version and KeyID are known.
	Sealed    bool                `json:"sealed"`
	KeyID     string              `json:"keyID,omitempty"`
	State     controller.State    `json:"state,omitempty"`
	Since     *time.Time          `json:"since,omitempty"`
	Reason    string              `json:"reason,omitempty"`
	Halted    controller.Halt     `json:"halted,omitempty"`
	Failures  int                 `json:"failures"`
	Retries   int                 `json:"retries"`
	LastError *controller.Failure `json:"lastError,omitempty"`
	// FailingSince is when the current run of failures began.
	FailingSince *time.Time `json:"failingSince,omitempty"`
	SLABreached  bool       `json:"slaBreached"`
	Intents      []string   `json:"intents,omitempty"`
	// Priority orders the object's claims (controller.Object.Priority).
	Priority int `json:"priority,omitempty"`
	// Data, RecentFailures and History are filled by the object command
	// only.
	Data           json.RawMessage         `json:"data,omitempty"`
	RecentFailures []controller.Failure    `json:"recentFailures,omitempty"`
	History        []converge.HistoryEntry `json:"history,omitempty"`
}

// decodeObject reads the record rec of kind.
func decodeObject(kind string, rec converge.StoreRecord) (*objectView, error) {
	v := &objectView{Kind: kind, Key: strings.TrimPrefix(rec.Key, kind+"/"), Version: rec.Version}
	if id, ok := sealedValue(rec.Value); ok {
		v.Sealed, v.KeyID = true, id
		return v, nil
	}
	var o controller.Object
	if err := json.Unmarshal(rec.Value, &o); err != nil || o.State == "" {
		if err == nil {
			err = errors.New("no state")
		}
		return nil, fmt.Errorf("convergectl: record %q is not a controller object (%v); plans are read with the plans command", rec.Key, err)
	}
	v.State, v.Reason, v.Halted = o.State, o.Reason, o.Halted
	v.Failures, v.Retries, v.LastError, v.SLABreached, v.Intents = o.Failures, o.Retries, o.LastError, o.SLABreached, o.Intents
	v.Data, v.RecentFailures, v.Priority = o.Data, o.RecentFailures, o.Priority
	if !o.FailingSince.IsZero() {
		since := o.FailingSince
		v.FailingSince = &since
	}
	if !o.Since.IsZero() {
		since := o.Since
		v.Since = &since
	}
	return v, nil
}

func checkKind(kind string) error {
	if kind == "" || strings.Contains(kind, "/") {
		return &usageError{msg: fmt.Sprintf("kind %q: a kind is not empty and holds no '/'", kind)}
	}
	if converge.IsInternalKind(kind) {
		return &usageError{msg: fmt.Sprintf("kind %q: the library keeps these records for itself, they are no controller objects (plans are read with the plans and plan commands)", kind)}
	}
	return nil
}

var (
	filterState       string
	filterQuarantined bool
	filterTerminal    bool
	filterAboveSLA    bool
	filterHalted      bool
	planState         string
	abortReason       string
)

func init() {
	register(&command{
		name:    "kinds",
		summary: "List the kinds of controller objects in the store, with how many objects each has.",
		run:     runKinds,
	})
	register(&command{
		name:  "objects",
		args:  "KIND",
		nargs: 1,
		summary: `List the objects of a controller kind, sorted by key.
Filters combine: --state S --quarantined lists the quarantined objects in S.
--above-sla lists the objects the controller marked above their state's SLA
(the SLAs are the program's configuration; the store keeps the mark).`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&filterState, "state", "", "only objects in this `STATE`")
			fs.BoolVar(&filterQuarantined, "quarantined", false, "only quarantined objects")
			fs.BoolVar(&filterTerminal, "terminal", false, "only objects halted by a terminal error")
			fs.BoolVar(&filterHalted, "halted", false, "only halted objects (quarantined or terminal)")
			fs.BoolVar(&filterAboveSLA, "above-sla", false, "only objects above their state's SLA")
		},
		run: runObjects,
	})
	register(&command{
		name:    "object",
		args:    "KIND KEY",
		nargs:   2,
		summary: "Show one object of a controller kind: its state, failures, data and history.",
		run:     runObject,
	})
	register(&command{
		name:  "release",
		short: "Release a halted object so that its controller runs it again.",
		args:  "KIND KEY",
		nargs: 2,
		write: true,
		summary: `Release a halted object (quarantined, or halted by a terminal error): the
halt is cleared, its failures in a row start again from zero, and its
controller runs it again. The history records the release and who did it.
Releasing an object that is not halted changes nothing.`,
		run: runRelease,
	})
	register(&command{
		name:  "cancel",
		short: "Cancel an object: stop its running handler and halt it.",
		args:  "KIND KEY",
		nargs: 2,
		write: true,
		summary: `Cancel an object: it is halted (cancelled), and the replica running its
handler, in any process sharing the store, cancels the handler's context
at once (on PostgreSQL within milliseconds, through LISTEN/NOTIFY). Its
controller does not run it again until it is released or enqueued. The
history records the cancel and who asked. Cancelling an object cancelled
already changes nothing.`,
		run: runCancel,
	})
}

// changeObject is what release and cancel share: it opens the store to
// write, reads the object (a sealed one cannot be changed without its
// key), changes it with change when need says the change is due, and
// reads it again, its secrets masked unless asked for. changed says
// whether change ran.
func changeObject(ctx context.Context, c *common, kind, key string, need func(*objectView) bool,
	change func(converge.Store) error) (before, after *objectView, changed bool, err error) {
	if err := checkKind(kind); err != nil {
		return nil, nil, false, err
	}
	st, closer, err := c.open(ctx, true)
	if err != nil {
		return nil, nil, false, err
	}
	defer closer.Close()
	if before, err = getObject(ctx, st, kind, key, c.keyFile != ""); err != nil {
		return nil, nil, false, err
	}
	if before.Sealed {
		return nil, nil, false, &sealedError{what: kind, name: key, keyID: before.KeyID}
	}
	if changed = need(before); changed {
		if err := change(st); err != nil {
			return nil, nil, false, err
		}
	}
	if after, err = getObject(ctx, st, kind, key, c.keyFile != ""); err != nil {
		return nil, nil, false, err
	}
	if !c.showSecrets {
		after.redact()
	}
	return before, after, changed, nil
}

func runCancel(ctx context.Context, e *env, c *common, args []string) error {
	kind, key := args[0], args[1]
	_, after, cancelled, err := changeObject(ctx, c, kind, key,
		func(o *objectView) bool { return o.Halted != controller.HaltCancelled },
		func(st converge.Store) error { return controller.Cancel(ctx, st, kind, key, c.by()) })
	if err != nil {
		return err
	}
	if c.structured() {
		return c.emit(e.out, map[string]any{"cancelled": cancelled, "object": after})
	}
	if !cancelled {
		fmt.Fprintf(e.out, "%s %q is cancelled already: nothing to do\n", kind, key)
		return nil
	}
	fmt.Fprintf(e.out, "cancelled %s %q in state %s; its controller stops its handler and does not run it until it is released\n", kind, key, after.State)
	return nil
}

func runKinds(ctx context.Context, e *env, c *common, _ []string) error {
	st, closer, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	recs, err := st.List(ctx, "")
	if err != nil {
		return err
	}
	counts := map[string]int{}
	for _, r := range recs {
		kind, _, ok := strings.Cut(r.Key, "/")
		if !ok || converge.IsInternalKind(kind) {
			continue
		}
		counts[kind]++
	}
	type kindView struct {
		Kind    string `json:"kind"`
		Objects int    `json:"objects"`
	}
	out := []kindView{}
	for k, n := range counts {
		out = append(out, kindView{k, n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind < out[j].Kind })
	if c.structured() {
		return c.emit(e.out, map[string]any{"kinds": out})
	}
	if len(out) == 0 {
		fmt.Fprintln(e.errOut, "no controller objects in the store")
		return nil
	}
	t := newTable(e.out, "KIND", "OBJECTS")
	for _, k := range out {
		t.row(k.Kind, fmt.Sprint(k.Objects))
	}
	return t.flush()
}

func runObjects(ctx context.Context, e *env, c *common, args []string) error {
	kind := args[0]
	if err := checkKind(kind); err != nil {
		return err
	}
	st, closer, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	recs, err := st.List(ctx, kind+"/")
	if err != nil {
		return err
	}
	filtered := filterState != "" || filterQuarantined || filterTerminal || filterHalted || filterAboveSLA
	out := []*objectView{}
	sealedHidden := 0
	for _, r := range recs {
		v, err := decodeObject(kind, r)
		if err != nil {
			return err
		}
		v.Data, v.RecentFailures = nil, nil
		if !c.showSecrets {
			v.redact()
		}
		if v.Sealed && filtered {
			sealedHidden++
			continue
		}
		switch {
		case filterState != "" && string(v.State) != filterState,
			filterQuarantined && v.Halted != controller.HaltQuarantined,
			filterTerminal && v.Halted != controller.HaltTerminal,
			filterHalted && v.Halted == "",
			filterAboveSLA && !v.SLABreached:
			continue
		}
		out = append(out, v)
	}
	if c.structured() {
		return c.emit(e.out, map[string]any{"kind": kind, "objects": out, "sealedHidden": sealedHidden})
	}
	if len(out) == 0 {
		if filtered {
			fmt.Fprintf(e.errOut, "no objects of kind %q match the filters\n", kind)
		} else {
			fmt.Fprintf(e.errOut, "no objects of kind %q\n", kind)
		}
		return sealedNote(e, sealedHidden, "objects", "the filters need their state")
	}
	t := newTable(e.out, "KEY", "STATE", "AGE", "HALTED", "RETRIES", "SLA", "LAST ERROR")
	for _, v := range out {
		if v.Sealed {
			t.row(v.Key, sealedText(v.KeyID), "", "", "", "", "")
			continue
		}
		since := time.Time{}
		if v.Since != nil {
			since = *v.Since
		}
		sla, lastErr := "", ""
		if v.SLABreached {
			sla = "above"
		}
		if v.LastError != nil {
			lastErr = ago(e.now, v.LastError.At) + " ago: " + cut(v.LastError.Error, 80)
		}
		t.row(v.Key, string(v.State), ago(e.now, since), string(v.Halted), fmt.Sprint(v.Retries), sla, lastErr)
	}
	if err := t.flush(); err != nil {
		return err
	}
	return sealedNote(e, sealedHidden, "objects", "the filters need their state")
}

// sealedNote says on stderr that n sealed values of what a filter needed
// were left out, and why.
func sealedNote(e *env, n int, what, why string) error {
	if n > 0 {
		fmt.Fprintf(e.errOut, "%d sealed %s are not shown: %s (give --key-file)\n", n, what, why)
	}
	return nil
}

// getObject reads the object KEY of KIND with its history.
// withKey says whether a key file was given, for the error of a value it
// does not open.
func getObject(ctx context.Context, st converge.Store, kind, key string, withKey bool) (*objectView, error) {
	rec, err := st.Get(ctx, kind+"/"+key)
	if errors.Is(err, converge.ErrStoreNotFound) {
		return nil, &notFoundError{what: kind, name: key}
	}
	if errors.Is(err, converge.ErrSealed) {
		return nil, &sealedError{what: kind, name: key, withKey: withKey, err: err}
	}
	if err != nil {
		return nil, err
	}
	v, err := decodeObject(kind, rec)
	if err != nil {
		return nil, err
	}
	if v.History, err = st.History(ctx, rec.Key); err != nil {
		return nil, err
	}
	return v, nil
}

func runObject(ctx context.Context, e *env, c *common, args []string) error {
	kind, key := args[0], args[1]
	if err := checkKind(kind); err != nil {
		return err
	}
	st, closer, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	v, err := getObject(ctx, st, kind, key, c.keyFile != "")
	if err != nil {
		return err
	}
	if !c.showSecrets {
		v.redact()
	}
	if c.structured() {
		return c.emit(e.out, v)
	}
	return printObject(e, v)
}

func printObject(e *env, v *objectView) error {
	w := e.out
	fmt.Fprintf(w, "Kind:      %s\nKey:       %s\nVersion:   %d\n", v.Kind, v.Key, v.Version)
	if v.Sealed {
		fmt.Fprintf(w, "Value:     %s\n", sealedText(v.KeyID))
	} else {
		since := time.Time{}
		if v.Since != nil {
			since = *v.Since
		}
		fmt.Fprintf(w, "State:     %s since %s\n", v.State, stamp(e.now, since))
		if v.Reason != "" {
			fmt.Fprintf(w, "Reason:    %s\n", oneLine(v.Reason))
		}
		if v.Halted != "" {
			fmt.Fprintf(w, "Halted:    %s (convergectl release %s %s)\n", v.Halted, v.Kind, v.Key)
		}
		if v.Priority != 0 {
			fmt.Fprintf(w, "Priority:  %d\n", v.Priority)
		}
		fmt.Fprintf(w, "Failures:  %d in this state, %d in a row\n", v.Failures, v.Retries)
		if v.LastError != nil {
			fmt.Fprintf(w, "LastError: %s: %s\n", stamp(e.now, v.LastError.At), oneLine(v.LastError.Error))
		}
		if v.FailingSince != nil {
			fmt.Fprintf(w, "Failing:   since %s\n", stamp(e.now, *v.FailingSince))
		}
		if v.SLABreached {
			fmt.Fprintln(w, "SLA:       above the SLA of its state")
		}
		if len(v.Intents) > 0 {
			fmt.Fprintf(w, "Intents:   %s\n", strings.Join(v.Intents, ", "))
		}
		if len(v.Data) > 0 {
			fmt.Fprintf(w, "Data:      %s\n", v.Data)
		}
	}
	if len(v.RecentFailures) > 0 {
		fmt.Fprintln(w, "Recent failures:")
		t := newTable(w, "  AT", "STATE", "ERROR")
		for _, f := range v.RecentFailures {
			state := string(f.State)
			if state == "" {
				state = "-"
			}
			t.row("  "+f.At.UTC().Format(time.RFC3339), state, oneLine(f.Error))
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "History:")
	return printHistory(e, v.History, false)
}

// printHistory writes the history entries as a table; with subjects, a
// column names the command and host each is about. Transitions that
// repeat in a row (a plan flapping between two states) are written once,
// with how many times they came (collapseHistory).
func printHistory(e *env, hist []converge.HistoryEntry, subjects bool) error {
	if len(hist) == 0 {
		fmt.Fprintln(e.out, "  (none kept)")
		return nil
	}
	rows := collapseHistory(hist)
	cols := []string{"  AT", "FROM", "TO", "BY"}
	if subjects {
		cols = append(cols, "SUBJECT")
	}
	cols = append(cols, "REASON")
	folded := len(rows) < len(hist)
	if folded {
		cols = append(cols, "REPEATED")
	}
	t := newTable(e.out, cols...)
	for _, r := range rows {
		h := r.entry
		row := []string{"  " + h.At.UTC().Format(time.RFC3339), h.From, h.To, historyBy(h)}
		if subjects {
			row = append(row, subjectText(h.Subject))
		}
		row = append(row, h.Reason)
		if folded {
			row = append(row, timesText(r))
		}
		t.row(row...)
	}
	return t.flush()
}

func subjectText(s *converge.HistorySubject) string {
	switch {
	case s == nil:
		return "plan"
	case s.Host == "":
		return fmt.Sprintf("command %d", s.Command)
	}
	return fmt.Sprintf("command %d %s/%s", s.Command, s.Group, s.Host)
}

func runRelease(ctx context.Context, e *env, c *common, args []string) error {
	kind, key := args[0], args[1]
	before, after, released, err := changeObject(ctx, c, kind, key,
		func(o *objectView) bool { return o.Halted != "" },
		func(st converge.Store) error { return releaseObject(ctx, st, kind, key, c.by()) })
	if err != nil {
		return err
	}
	if c.structured() {
		return c.emit(e.out, map[string]any{"released": released, "was": before.Halted, "object": after})
	}
	if !released {
		fmt.Fprintf(e.out, "%s %q is not halted (state %s): nothing to release\n", kind, key, after.State)
		return nil
	}
	fmt.Fprintf(e.out, "released %s %q (was %s); its controller runs it again\n", kind, key, before.Halted)
	return nil
}
