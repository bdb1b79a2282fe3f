// Package convergetest helps test code built on converge: fakes with
// injectable failures, and conformance checks in the style of
// testing/fstest.TestFS that users run on their own implementations.
//
// Start with the check that matches what you wrote:
//
//   - an Item: call Conform from a test with the item on a real (or
//     throw-away) system; it applies the item, so run it where that is
//     harmless.
//   - a converge.Store (and converge.Queue): call ConformStore on a fresh
//     store, inside a testing/synctest bubble with Wait set to time.Sleep
//     when the store reads its time through time.Now, or with Wait set to
//     time.Sleep against a real database; pass the Retention the store was
//     opened with, and a Peer handle when several processes share the
//     storage.
//
// Item and Store are fakes for the tests of code that uses items and
// stores: they fail on command (Item.FailAt, Store.FailNext) and Store
// also at random (FailRate) or after writing (LostReplyRate), so that
// retries and recovery paths get exercised.
//
// FaultStore, Runs and RunSchedule test what replicas sharing a store
// promise: FaultStore cuts one replica off its store (every call fails,
// or hangs), delays its replies and steps its wall clock; Runs records
// every handler run as an interval and finds two runs of one object that
// overlap; RunSchedule runs controller replicas through a randomized
// schedule of those faults, kills and restarts, and reports the runs it
// checked and the overlaps it found (there must be none). With
// Schedule.Limit it also limits the handlers at once in one state
// (controller.Config.Limits) and reports the most it saw there
// (Runs.MostAtOnce), which must not be above the limit.
//
// Metrics records what a walk, a reconciler, a plan runner or a controller
// reports through converge.Metrics, checks each call as an adapter would,
// and reads the values back by metric name and label values.
package convergetest
