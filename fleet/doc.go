// Package fleet is the link between a fleet server and its device agents:
// targets go out to devices, and the devices' reports come back. Start
// with NewServer and NewAgent (the package Example).
//
// A central program mounts a Server, an http.Handler built by NewServer on
// a converge.Queue (pgstore for several server replicas on one database,
// boltstore for one server, MemStore in tests). It enrols devices
// (Server.Enrol issues a random 256-bit credential per device and keeps
// only its SHA-256, compared in constant time), revokes them
// (Server.Revoke), and sets their targets (Server.SetTarget): the desired
// items the server derives a device's status against, and a payload for
// the device's agent, under a revision that is one more than the device's
// last, so a device's revisions only grow, whichever replica sets them.
//
// A device reads its target with its credential (GET
// /v1/devices/{id}/target): the ETag is the target's revision, and a read
// with If-None-Match and a wait (?wait=30s) is a long poll that answers
// as soon as the target changes, on any replica (the store's watch wakes
// every replica), or 304 Not Modified when the wait runs out. A long
// poll of HTTP/1.x that has to wait leaves net/http's goroutine: its
// connection is hijacked and parked with no goroutine of its own (under
// 2 KiB on the server), and its answer closes the connection. Over
// HTTP/2 a long poll waits in its handler. A device
// posts its converge.EdgeReport for a revision (PUT or POST
// /v1/devices/{id}/report), read by the core's capped strict decoder
// (converge.DecodeEdgeReport under Config.Limits). The server keeps the
// latest report per device, refuses a report older than the one it holds
// or newer than the device's target (*ReportError), and derives the
// device's State against the Desired of the target's revision
// (converge.DeriveStatus): a report for an older revision never counts for
// a newer target. Server.DeviceStatus shows one device, Server.Counts the
// fleet: devices per revision and state, revoked, and stale (no report
// for Config.StaleAfter).
//
// A device reads only its own target and writes only its own report. A
// request without a credential, for an unknown device, with a revoked or
// a wrong credential is answered 401 and counted (MetricRefused, by
// AuthReason); a device's valid credential used for another device is
// answered 403 and counted as "other_device". Neither is ever served. The
// server's own API (enrol, revoke, set a target, read) sits behind an
// Authorizer hook, as the status page's does; without one it refuses
// every request.
//
// Every body is capped (Config.Limits, DefaultMaxBody), every long poll
// bounded (Config.MaxWait), and every device limited to a rate
// (Config.Rate, Config.Burst: a token bucket per device, 429 with
// Retry-After beyond it). The Server sets no connection timeouts of its
// own: serve it with NewHTTPServer, or an http.Server with the same
// timeouts, so that slow or silent clients cannot hold connections.
//
// Devices, hashed credentials, targets and reports are records of the
// store under "fleet/", in strict JSON forms carrying FormatVersion; a
// record of another format is refused with a *FormatError naming its key.
//
// On the device, an Agent is the target source of a
// converge.TargetReconciler[Target]: it long-polls the server (resuming
// from the target and server revision the reconciler's Store kept), sets
// every newer target on the reconciler, retries with jittered backoff
// while the server is away (the reconciler keeps converging its last
// target meanwhile), and reports the end of every pass (PassReport), the
// latest report only, retried until the server takes it. See Agent for how
// the server's revisions and the device store's relate.
//
// A rollout (Server.CreateRollout, or POST /v1/admin/rollouts) moves
// the devices a label Selector picks (labels are given at enrolment) to a
// new target in Waves: a canary, then batches by count or percent, each
// with a success threshold (the percent of its devices ready before the
// next wave starts) and an error threshold (the percent that may fail
// before the rollout pauses, or aborts: OnError), as Eclipse hawkBit's
// rollout groups have. The waves are the commands of a plan of
// plan.Runner, kept in the same store: the targets of a wave's command
// are its devices, its signal sets a device's target (once: the target
// it replaces is recorded first), and a device is complete when its
// report is ready at that revision. Server.RunRollouts, on every replica,
// runs them (one replica at a time holds a rollout's claim; another takes
// over when it stops). Server.PauseRollout, ResumeRollout and
// AbortRollout control a rollout; an abort can put back the previous
// target of every device already moved. ReadRollouts reads their status
// from a store alone, for a status page or convergectl.
//
// Not yet here: client certificates over mutual TLS, the W3C trace
// context over the link, and the proof at ten thousand devices.
package fleet
