// Package autopilot reads and writes rollout plans in the shape of k0s
// autopilot Plan documents and signals the hosts the plans update, in the
// states k0s autopilot's plan controllers use.
//
// Decode turns a YAML or JSON document (spec.commands[i].<kind>,
// status.commands[i]...) into a plan.Document. It accepts every document
// k0s's Plan CRD (autopilot.k0sproject.io/v1beta2) accepts — placeholder
// versions such as "v0.0.0", any platform name, a plan without commands —
// and refuses, naming the field, what the CRD refuses: unknown fields,
// repeated keys, values of the wrong type, invalid UTF-8, and documents
// over a size cap (see DecodeWith). What k0s checks while a plan runs
// becomes the state k0s sets then: CommandHandler, the plan.CommandHandler
// that runs a command by signalling hosts through a Sender, discovers and
// checks the hosts of each group (IncompleteTargets, Restricted), signals
// them group by group within the group's concurrency limit (controllers one
// at a time, after a readiness check when the Sender is a ReadyProber), and
// reads back what each host reported (ApplyFailed). It never makes a host
// act twice on a signal: the runner stores that a host is to be signalled
// before the signal is sent, a signal sent again after a crash carries the
// same ID (SignalID), which a host must recognise, and a host whose report
// already shows the command completed is adopted, not signalled. Bus is
// the in-process Sender for tests, examples and programs whose hosts live
// in the same process; its hosts ignore a repeated signal.
package autopilot
