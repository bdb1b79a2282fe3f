// Package autopilot reads and writes rollout plans in the shape of k0s
// autopilot Plan documents and signals the hosts the plans update.
//
// Decode turns a YAML or JSON document (spec.commands[i].<kind>,
// status.commands[i]...) into a plan.Document, strictly: unknown
// fields, repeated keys and bad values are errors naming the field, and so
// is a plan that would do nothing: a command without targets, an empty
// node list, a k0s command (k0supdate, airgapupdate) whose version is not
// a k0s version of Kubernetes ("v1.30.4+k0s.0"). CommandHandler checks the
// same when plan.Runner.Create stores a plan built in Go. The
// plan package's Runner then runs the plan; CommandHandler is
// the plan.CommandHandler that runs a command by signalling hosts
// through a Sender: it discovers and checks the hosts of each group,
// signals them group by group within the group's concurrency limit, and
// reads back what each host reported. It never makes a host act twice on
// a signal: the runner stores that a host is to be signalled before the
// signal is sent, and a signal sent again after a crash carries the same
// ID (SignalID), which a host must recognise. Bus is the in-process Sender
// for tests, examples and programs whose hosts live in the same process;
// its hosts ignore a repeated signal.
package autopilot
