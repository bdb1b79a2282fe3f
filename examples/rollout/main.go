// Command rollout is a rollout orchestrator in miniature: a two-command
// plan over a simulated cluster of three controllers and six workers, run
// by plan.Runner, with an abort and two retries. Run it with
// `go run ./examples/rollout`; docs/rollouts.md is its guide.
//
// The plan downloads the bundle to the workers, then updates k0s on the
// controllers one at a time and on the workers two at a time, printing each
// transition as it is stored. The nodes live in this process and answer
// after a short delay. Once the controllers are updated, an operator aborts
// the plan (plan.Runner.Abort) to look at them first: no worker is signalled,
// and the plan ends in Aborted with the operator's reason on every worker.
// The program then retries it (plan.Runner.Retry); one worker fails its first
// attempt, and the program retries the failed plan, which signals only that
// worker again.
//
// The plan and its status are kept in a durable store: PostgreSQL when a
// DSN is given (-pg, or CONVERGE_PG_DSN), otherwise the embedded boltstore
// file named by -state (a temporary one by default). A run on a store that
// already holds the plan resumes it instead of starting again.
//
//	go run ./examples/rollout
//	go run ./examples/rollout -state /tmp/rollout.db
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/autopilot"
	"github.com/convergekit/converge/examples/internal/cli"
	"github.com/convergekit/converge/examples/internal/stores"
	"github.com/convergekit/converge/plan"
)

const planYAML = `
spec:
  id: rollout-v1.30.4
  commands:
  - airgapupdate:
      version: v1.30.4+k0s.0
      platforms: {linux-amd64: {url: "https://example.invalid/bundle"}}
      workers:
        discovery: {static: {nodes: [worker0, worker1, worker2, worker3, worker4, worker5]}}
        limits: {concurrent: 3}
  - k0supdate:
      version: v1.30.4+k0s.0
      platforms: {linux-amd64: {url: "https://example.invalid/k0s"}}
      targets:
        controllers:
          discovery: {static: {nodes: [controller0, controller1, controller2]}}
        workers:
          discovery: {static: {nodes: [worker0, worker1, worker2, worker3, worker4, worker5]}}
          limits: {concurrent: 2}
`

func main() {
	var opts stores.Options
	flag.StringVar(&opts.DSN, "pg", os.Getenv(stores.DSNEnv), "PostgreSQL DSN of the store (default $"+stores.DSNEnv+")")
	flag.StringVar(&opts.Path, "state", "", "embedded store file when no DSN is given (default: a temporary file)")
	cli.Parse("rollout", "[-state file | -pg dsn]", "Rolls a plan of commands out over simulated hosts, controllers before workers, kept in\n"+
		"a durable store (PostgreSQL with -pg, else an embedded file), and prints its progress.")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Stdout, opts); err != nil {
		fmt.Fprintln(os.Stderr, "rollout:", err)
		os.Exit(1)
	}
}

// run rolls the plan out over the simulated cluster, keeping it in the
// store opts names, and writes what happens to out.
func run(ctx context.Context, out io.Writer, opts stores.Options) error {
	st, closeStore, err := stores.Open(ctx, opts)
	if err != nil {
		return err
	}
	defer closeStore()
	store := st.Store
	cluster := newCluster("worker4")
	defer cluster.wait()
	handler := &autopilot.CommandHandler{Sender: cluster.bus}
	var last string
	var runner *plan.Runner
	paused := false
	var pauseErr error
	runner, err = plan.NewRunner(store, plan.RunnerConfig{
		Handlers:     map[string]plan.CommandHandler{"airgapupdate": handler, "k0supdate": handler},
		PollInterval: 2 * time.Millisecond,
		OnStep: func(id string, step plan.Step, st *plan.Status) {
			// Print a line when the progress of the active command moves.
			if step.Command < 0 {
				return
			}
			if line := progress(step.Command, st.Commands[step.Command]); line != last {
				fmt.Fprintln(out, line)
				last = line
			}
			// The operator pauses the rollout once the controllers are done.
			if !paused && step.Command == 1 && completed(st.Commands[1], "controllers") {
				paused = true
				pauseErr = runner.Abort(ctx, id, pauseReason)
			}
		},
	})
	if err != nil {
		return err
	}
	doc, err := autopilot.Decode([]byte(planYAML))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "plan kept in %s\n", st.Where)
	switch err := runner.Create(ctx, doc); {
	case errors.Is(err, converge.ErrStoreStale):
		fmt.Fprintf(out, "plan %s is stored already: resuming it\n", doc.Spec.ID)
	case err != nil:
		return err
	}
	status, err := runner.Run(ctx, doc.Spec.ID)
	for retries := 0; errors.Is(err, plan.ErrFailed) && retries < 3; retries++ {
		fmt.Fprintf(out, "plan stopped in %s:\n", status.State)
		printFailures(out, status)
		if status.State == plan.StateAborted {
			fmt.Fprintln(out, "the controllers look fine: retrying the aborted plan, which goes on with the workers")
		} else {
			fmt.Fprintln(out, "retrying the failed plan: only what did not complete is signalled again")
		}
		if err := runner.Retry(ctx, doc.Spec.ID); err != nil {
			return err
		}
		status, err = runner.Run(ctx, doc.Spec.ID)
	}
	if pauseErr != nil {
		return pauseErr
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "plan finished: %s\n", status.State)
	fmt.Fprintln(out, "signals per node:")
	for _, n := range cluster.names {
		fmt.Fprintf(out, "  %-12s %d\n", n, cluster.bus.count(n))
	}
	if status.State != plan.StateCompleted {
		return fmt.Errorf("plan ended in %s", status.State)
	}
	return nil
}

// pauseReason is why the operator aborts the plan.
const pauseReason = "operator pause: check the controllers before the workers"

// completed reports whether every target of the group completed.
func completed(c plan.CommandStatus, group string) bool {
	ts := c.Targets[group]
	for _, t := range ts {
		if t.State != plan.TargetCompleted {
			return false
		}
	}
	return len(ts) > 0
}

// progress renders one command's status as a line: per group, how many
// targets completed.
func progress(i int, c plan.CommandStatus) string {
	line := fmt.Sprintf("command %d %-12s %-16s", i, c.Kind, c.State)
	for _, g := range sortedGroups(c) {
		done := 0
		for _, t := range c.Targets[g] {
			if t.State == plan.TargetCompleted {
				done++
			}
		}
		line += fmt.Sprintf(" %s %d/%d", g, done, len(c.Targets[g]))
	}
	return line
}

func sortedGroups(c plan.CommandStatus) []string {
	groups := make([]string, 0, len(c.Targets))
	for g := range c.Targets {
		groups = append(groups, g)
	}
	sort.Strings(groups)
	return groups
}

func printFailures(out io.Writer, st *plan.Status) {
	for i, c := range st.Commands {
		for _, g := range sortedGroups(c) {
			for _, t := range c.Targets[g] {
				if t.Reason != "" {
					fmt.Fprintf(out, "  command %d %s %s: %s (%s)\n", i, g, t.Name, t.State, t.Reason)
				}
			}
		}
	}
}
