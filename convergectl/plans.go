package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/plan"
)

func init() {
	register(&command{
		name:    "plans",
		summary: "List the plans in the store with their state and progress.",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&planState, "state", "", "only plans in this `STATE` (Completed, Failed, Aborted, ...)")
		},
		run: runPlans,
	})
	register(&command{
		name:    "plan",
		args:    "ID",
		nargs:   1,
		summary: "Show one plan: the state and hosts of every command, and its history.",
		run:     runPlan,
	})
	register(&command{
		name:  "abort",
		short: "Ask a plan to stop.",
		args:  "ID",
		nargs: 1,
		write: true,
		summary: `Ask a plan to stop: no host is signalled and no command starts any more;
the hosts already signalled finish, and the plan ends Aborted. The history
records the request and who made it.`,
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&abortReason, "reason", "", "why the plan is aborted (default \"aborted with convergectl\")")
		},
		run: runAbort,
	})
	register(&command{
		name:  "retry",
		short: "Run a failed plan again from the command that failed.",
		args:  "ID",
		nargs: 1,
		write: true,
		summary: `Make a plan stopped in an error state runnable again from the command that
failed: its runner signals again the hosts that did not complete. The history
records the retry and who asked for it.`,
		run: runRetry,
	})
}

// hostCounts counts the hosts of a plan or a command by state.
type hostCounts struct {
	Total     int `json:"total"`
	Pending   int `json:"pending"`
	Sent      int `json:"sent"`
	Completed int `json:"completed"`
	Failed    int `json:"failed"`
}

func (h *hostCounts) add(s plan.TargetState) {
	h.Total++
	switch {
	case s.IsFailure():
		h.Failed++
	case s == plan.TargetCompleted:
		h.Completed++
	case s == plan.TargetSent:
		h.Sent++
	default:
		h.Pending++
	}
}

func (h *hostCounts) plus(o hostCounts) {
	h.Total += o.Total
	h.Pending += o.Pending
	h.Sent += o.Sent
	h.Completed += o.Completed
	h.Failed += o.Failed
}

// hostView is one host (target) of a command.
type hostView struct {
	Group   string           `json:"group"`
	Name    string           `json:"name"`
	State   plan.TargetState `json:"state"`
	Reason  string           `json:"reason,omitempty"`
	Attempt int              `json:"attempt"`
	Updated *time.Time       `json:"updated,omitempty"`
}

// commandView is one command of a plan.
type commandView struct {
	Index   int        `json:"index"`
	Kind    string     `json:"kind"`
	State   plan.State `json:"state"`
	Reason  string     `json:"reason,omitempty"`
	Started *time.Time `json:"started,omitempty"`
	Hosts   hostCounts `json:"hosts"`
	Targets []hostView `json:"targets"`
}

// planView is a plan as the plan commands print it in JSON. Commands and
// History are filled by the plan command only.
type planView struct {
	ID      string `json:"id"`
	Version uint64 `json:"version"`
	// Sealed means the plan is sealed and no key was given: only ID,
	// Version and KeyID are known.
	Sealed            bool                    `json:"sealed"`
	KeyID             string                  `json:"keyID,omitempty"`
	State             plan.State              `json:"state,omitempty"`
	Reason            string                  `json:"reason,omitempty"`
	Abort             string                  `json:"abort,omitempty"`
	CommandsTotal     int                     `json:"commandsTotal"`
	CommandsCompleted int                     `json:"commandsCompleted"`
	Hosts             hostCounts              `json:"hosts"`
	Commands          []commandView           `json:"commands,omitempty"`
	History           []converge.HistoryEntry `json:"history,omitempty"`
}

// planOf makes the view of the plan doc stored at version.
func planOf(id string, version uint64, doc *plan.Document) *planView {
	v := &planView{ID: id, Version: version, State: doc.State(), CommandsTotal: len(doc.Spec.Commands)}
	st := doc.Status
	for i, cmd := range doc.Spec.Commands {
		cv := commandView{Index: i, Kind: cmd.Kind, State: plan.StateNewPlan, Targets: []hostView{}}
		if st != nil && i < len(st.Commands) {
			cs := st.Commands[i]
			if cs.State != "" {
				cv.State = cs.State
			}
			cv.Reason = cs.Reason
			if !cs.Started.IsZero() {
				started := cs.Started
				cv.Started = &started
			}
			groups := make([]string, 0, len(cs.Targets))
			for g := range cs.Targets {
				groups = append(groups, g)
			}
			sort.Strings(groups)
			for _, g := range groups {
				for _, t := range cs.Targets[g] {
					state := t.State
					if state == "" {
						state = plan.TargetPending
					}
					hv := hostView{Group: g, Name: t.Name, State: state, Reason: t.Reason, Attempt: t.Attempt}
					if !t.LastUpdatedTimestamp.IsZero() {
						u := t.LastUpdatedTimestamp
						hv.Updated = &u
					}
					cv.Hosts.add(state)
					cv.Targets = append(cv.Targets, hv)
				}
			}
		}
		if cv.State == plan.StateCompleted {
			v.CommandsCompleted++
		}
		v.Hosts.plus(cv.Hosts)
		v.Commands = append(v.Commands, cv)
	}
	if st != nil {
		v.Reason, v.Abort = st.Reason, st.Abort
	}
	return v
}

// getPlan reads the plan id: its head record first, so that a sealed plan
// read without a key is shown as sealed.
func getPlan(ctx context.Context, st converge.Store, runner *plan.Runner, rec converge.StoreRecord) (*planView, error) {
	id := strings.TrimPrefix(rec.Key, plan.KeyPrefix)
	if keyID, ok := sealedValue(rec.Value); ok {
		return &planView{ID: id, Version: rec.Version, Sealed: true, KeyID: keyID}, nil
	}
	doc, version, err := runner.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	return planOf(id, version, doc), nil
}

func planRunner(st converge.Store, c *common) (*plan.Runner, error) {
	return plan.NewRunner(st, plan.RunnerConfig{Owner: "convergectl:" + c.by()})
}

func runPlans(ctx context.Context, e *env, c *common, _ []string) error {
	st, closer, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	runner, err := planRunner(st, c)
	if err != nil {
		return err
	}
	recs, err := st.List(ctx, plan.KeyPrefix)
	if err != nil {
		return err
	}
	out := []*planView{}
	sealedHidden := 0
	for _, rec := range recs {
		v, err := getPlan(ctx, st, runner, rec)
		if err != nil {
			return err
		}
		if planState != "" && (v.Sealed || string(v.State) != planState) {
			if v.Sealed {
				sealedHidden++
			}
			continue
		}
		v.Commands = nil
		if !c.showSecrets {
			v.redact()
		}
		out = append(out, v)
	}
	if c.structured() {
		return c.emit(e.out, map[string]any{"plans": out, "sealedHidden": sealedHidden})
	}
	if len(out) == 0 {
		if planState != "" {
			fmt.Fprintf(e.errOut, "no plans in state %q\n", planState)
		} else {
			fmt.Fprintln(e.errOut, "no plans in the store")
		}
		return sealedNote(e, sealedHidden, "plans", "--state needs their state")
	}
	t := newTable(e.out, "ID", "STATE", "COMMANDS", "HOSTS", "FAILED", "REASON")
	for _, v := range out {
		if v.Sealed {
			t.row(v.ID, sealedText(v.KeyID), "", "", "", "")
			continue
		}
		reason := v.Reason
		if v.Abort != "" && !v.State.IsFinal() {
			reason = "aborting: " + v.Abort
		}
		t.row(v.ID, string(v.State), fmt.Sprintf("%d/%d", v.CommandsCompleted, v.CommandsTotal),
			fmt.Sprintf("%d/%d", v.Hosts.Completed, v.Hosts.Total), fmt.Sprint(v.Hosts.Failed), cut(reason, 80))
	}
	if err := t.flush(); err != nil {
		return err
	}
	return sealedNote(e, sealedHidden, "plans", "--state needs their state")
}

// loadPlan reads the plan id with its history.
func loadPlan(ctx context.Context, st converge.Store, runner *plan.Runner, id string, withKey bool) (*planView, error) {
	if id == "" {
		return nil, &usageError{msg: "a plan ID is not empty"}
	}
	rec, err := st.Get(ctx, plan.KeyPrefix+id)
	if errors.Is(err, converge.ErrStoreNotFound) {
		return nil, &notFoundError{what: "plan", name: id}
	}
	if errors.Is(err, converge.ErrSealed) {
		return nil, &sealedError{what: "plan", name: id, withKey: withKey, err: err}
	}
	if err != nil {
		return nil, err
	}
	v, err := getPlan(ctx, st, runner, rec)
	if err != nil {
		return nil, err
	}
	if v.History, err = st.History(ctx, rec.Key); err != nil {
		return nil, err
	}
	return v, nil
}

func runPlan(ctx context.Context, e *env, c *common, args []string) error {
	st, closer, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	runner, err := planRunner(st, c)
	if err != nil {
		return err
	}
	v, err := loadPlan(ctx, st, runner, args[0], c.keyFile != "")
	if err != nil {
		return err
	}
	if !c.showSecrets {
		v.redact()
	}
	if c.structured() {
		return c.emit(e.out, v)
	}
	return printPlan(e, v)
}

func printPlan(e *env, v *planView) error {
	w := e.out
	fmt.Fprintf(w, "Plan:      %s\nVersion:   %d\n", v.ID, v.Version)
	if v.Sealed {
		fmt.Fprintf(w, "Value:     %s\n", sealedText(v.KeyID))
	} else {
		fmt.Fprintf(w, "State:     %s\n", v.State)
		if v.Reason != "" {
			fmt.Fprintf(w, "Reason:    %s\n", oneLine(v.Reason))
		}
		if v.Abort != "" {
			fmt.Fprintf(w, "Abort:     %s\n", oneLine(v.Abort))
		}
		fmt.Fprintf(w, "Progress:  %d/%d commands, %d/%d hosts completed, %d failed\n",
			v.CommandsCompleted, v.CommandsTotal, v.Hosts.Completed, v.Hosts.Total, v.Hosts.Failed)
		fmt.Fprintln(w, "Commands:")
		t := newTable(w, "  #", "KIND", "STATE", "HOSTS", "SENT", "FAILED", "STARTED", "REASON")
		for _, cv := range v.Commands {
			started := time.Time{}
			if cv.Started != nil {
				started = *cv.Started
			}
			t.row(fmt.Sprintf("  %d", cv.Index), cv.Kind, string(cv.State), fmt.Sprintf("%d/%d", cv.Hosts.Completed, cv.Hosts.Total),
				fmt.Sprint(cv.Hosts.Sent), fmt.Sprint(cv.Hosts.Failed), ago(e.now, started), cv.Reason)
		}
		if err := t.flush(); err != nil {
			return err
		}
		fmt.Fprintln(w, "Hosts:")
		t = newTable(w, "  #", "GROUP", "HOST", "STATE", "ATTEMPT", "UPDATED", "REASON")
		for _, cv := range v.Commands {
			for _, h := range cv.Targets {
				updated := time.Time{}
				if h.Updated != nil {
					updated = *h.Updated
				}
				t.row(fmt.Sprintf("  %d", cv.Index), h.Group, h.Name, string(h.State), fmt.Sprint(h.Attempt), ago(e.now, updated), h.Reason)
			}
		}
		if err := t.flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "History:")
	return printHistory(e, v.History, true)
}

// changePlan runs change on the plan id, opened for writing, and prints
// the plan as it is after.
func changePlan(ctx context.Context, e *env, c *common, id, verb string, change func(*plan.Runner) error) error {
	st, closer, err := c.open(ctx, true)
	if err != nil {
		return err
	}
	defer closer.Close()
	runner, err := planRunner(st, c)
	if err != nil {
		return err
	}
	before, err := loadPlan(ctx, st, runner, id, c.keyFile != "")
	if err != nil {
		return err
	}
	if before.Sealed {
		return &sealedError{what: "plan", name: id, keyID: before.KeyID}
	}
	if err := change(runner); err != nil {
		return err
	}
	after, err := loadPlan(ctx, st, runner, id, c.keyFile != "")
	if err != nil {
		return err
	}
	if !c.showSecrets {
		after.redact()
	}
	if c.structured() {
		after.History = nil
		return c.emit(e.out, after)
	}
	fmt.Fprintf(e.out, "%s plan %q: it is %s", verb, id, after.State)
	if after.Abort != "" && !after.State.IsFinal() {
		fmt.Fprintf(e.out, ", aborting: no host is signalled any more, and it ends Aborted once the hosts already signalled finish")
	}
	fmt.Fprintln(e.out)
	return nil
}

func runAbort(ctx context.Context, e *env, c *common, args []string) error {
	reason := abortReason
	if reason == "" {
		reason = "aborted with convergectl"
	}
	return changePlan(ctx, e, c, args[0], "aborted", func(r *plan.Runner) error {
		return abortPlan(ctx, r, args[0], reason, c.by())
	})
}

func runRetry(ctx context.Context, e *env, c *common, args []string) error {
	return changePlan(ctx, e, c, args[0], "retried", func(r *plan.Runner) error {
		return retryPlan(ctx, r, args[0], c.by())
	})
}
