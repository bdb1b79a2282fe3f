package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/wire"
	"github.com/convergekit/converge/plan"
)

// The store prefixes of rollouts: the rollout's own record (its spec and
// the operator's controls), and one record per device it moved (the
// target it replaced, for an abort to put back). The rollout's waves are a
// plan of plan.Runner under plan.KeyPrefix + RolloutPlanPrefix + ID.
const (
	keyRollouts     = "fleet/rollouts/"
	keyRolloutMoved = "fleet/rollout-moved/"
	// RolloutPlanPrefix starts the ID of the plan that runs a rollout's
	// waves: the plan of rollout "r1" is "fleet-rollout-r1".
	RolloutPlanPrefix = "fleet-rollout-"
	// WaveKind is the command kind of a rollout's waves in its plan.
	WaveKind = "fleet-wave"
	// waveGroup is the target group of a wave's devices.
	waveGroup = "devices"
)

// DefaultRolloutPoll is how often a rollout's runner looks at the devices
// of its active wave when Config.RolloutPoll is 0.
const DefaultRolloutPoll = time.Second

// OnError is what a rollout does when a wave reaches its error threshold.
type OnError string

// The actions on reaching an error threshold.
const (
	// OnErrorPause pauses the rollout (hawkBit's error action): no device
	// is moved any more until Server.ResumeRollout, which lets the wave
	// go on past its threshold, or Server.AbortRollout.
	OnErrorPause OnError = "pause"
	// OnErrorAbort aborts the rollout, and puts back the previous targets
	// of the devices moved when the rollout's Restore is set.
	OnErrorAbort OnError = "abort"
)

// Wave is one group of a rollout's devices, moved together (hawkBit's
// rollout group). Its size is Count devices, or Percent of the devices the
// rollout selected (rounded up, at least one); a wave with neither takes
// every device left. The devices left after the last wave join it.
type Wave struct {
	// Name names the wave on the status page ("canary"); "" is "wave N".
	Name    string `json:"name,omitempty"`
	Count   int    `json:"count,omitempty"`
	Percent int    `json:"percent,omitempty"`
	// SuccessThreshold is the percent (1 to 100; 0 means 100) of the
	// wave's devices that must be ready at the rollout's target before
	// the next wave starts; the wave's other devices go on meanwhile. A
	// wave whose every device finished (ready or failed) within its error
	// threshold also lets the next one start.
	SuccessThreshold int `json:"success_threshold,omitempty"`
	// ErrorThreshold is the percent (0 to 100) of the wave's devices that
	// may fail: when more fail, the rollout's OnError action is taken. 0
	// means that the first failure reaches it.
	ErrorThreshold int `json:"error_threshold,omitempty"`
}

// RolloutSpec is a rollout: the devices Selector picks (see ParseSelector)
// are moved to a target (Items and Payload, as Server.SetTarget takes
// them: each device gets its next revision) in Waves, one after the
// other.
type RolloutSpec struct {
	// ID names the rollout, with the characters of a device ID.
	ID       string                 `json:"id"`
	Selector string                 `json:"selector,omitempty"`
	Items    []converge.DesiredItem `json:"items"`
	Payload  json.RawMessage        `json:"payload,omitempty"`
	Waves    []Wave                 `json:"waves"`
	// OnError is the action at an error threshold; "" means OnErrorPause.
	OnError OnError `json:"on_error,omitempty"`
	// Restore puts back, on an abort (by OnErrorAbort or
	// Server.AbortRollout), the targets the devices moved had before.
	Restore bool `json:"restore,omitempty"`
}

// rolloutSpecJSON is the JSON form of a RolloutSpec: its items as the
// core's desired configuration writes them.
type rolloutSpecJSON struct {
	ID       string          `json:"id"`
	Selector string          `json:"selector,omitempty"`
	Items    json.RawMessage `json:"items"`
	Payload  json.RawMessage `json:"payload,omitempty"`
	Waves    []Wave          `json:"waves"`
	OnError  OnError         `json:"on_error,omitempty"`
	Restore  bool            `json:"restore,omitempty"`
}

// MarshalJSON writes the spec with its items as a desired configuration
// writes them ({"id": ..., "presence": ...}).
func (sp RolloutSpec) MarshalJSON() ([]byte, error) {
	d, err := json.Marshal(converge.Desired{Revision: 1, Items: sp.Items})
	if err != nil {
		return nil, err
	}
	var items struct {
		Items json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(d, &items); err != nil {
		return nil, err
	}
	return json.Marshal(rolloutSpecJSON{ID: sp.ID, Selector: sp.Selector, Items: items.Items, Payload: sp.Payload,
		Waves: sp.Waves, OnError: sp.OnError, Restore: sp.Restore})
}

// UnmarshalJSON reads a spec strictly (unknown or repeated fields are
// refused), its items with the core's desired configuration decoder.
func (sp *RolloutSpec) UnmarshalJSON(b []byte) error {
	var in rolloutSpecJSON
	if pr := wire.Decode(b, &in); pr != nil {
		return &RequestError{Field: "rollout" + dotPath(pr.Path), Err: pr.Err}
	}
	if in.Items == nil {
		return &RequestError{Field: "rollout.items", Reason: "missing"}
	}
	doc := append(append([]byte(`{"revision":1,"items":`), in.Items...), '}')
	d, err := converge.DecodeDesired(doc, converge.DecodeLimits{MaxBytes: -1})
	if err != nil {
		return &RequestError{Field: "rollout.items", Err: err}
	}
	*sp = RolloutSpec{ID: in.ID, Selector: in.Selector, Items: d.Items, Payload: in.Payload, Waves: in.Waves, OnError: in.OnError, Restore: in.Restore}
	return nil
}

// rolloutDoc is the stored record of a rollout: its spec and what the
// operators (or its error thresholds) asked.
type rolloutDoc struct {
	Format  int         `json:"format"`
	Spec    RolloutSpec `json:"spec"`
	Created time.Time   `json:"created"`
	Devices int         `json:"devices"`
	// Paused is the reason the rollout is paused; "" while it runs.
	// PausedWave is the wave whose error threshold paused it, -1 for an
	// operator's pause.
	Paused     string `json:"paused,omitempty"`
	PausedWave int    `json:"paused_wave,omitempty"`
	// Overridden lists the waves resumed past their error threshold.
	Overridden []int `json:"overridden,omitempty"`
	// Abort is the reason an abort was asked; Restore whether it puts
	// the previous targets back.
	Abort   string `json:"abort,omitempty"`
	Restore bool   `json:"restore,omitempty"`
	// Finished is when a runner saw the rollout end (and restored what it
	// had to); Restored counts the devices given their previous target.
	Finished time.Time `json:"finished,omitzero"`
	Restored int       `json:"restored,omitempty"`
	// Planned is false until the rollout's plan is stored; Selected
	// lists the devices selected meanwhile, in order, for whoever stores
	// the plan (CreateRollout, or a runner after a crash between the two
	// writes): the record is the one write that creates a rollout.
	Planned  bool     `json:"planned,omitempty"`
	Selected []string `json:"selected,omitempty"`
}

// rolloutPlan is the plan of a rollout whose devices are ids: a wave a
// command.
func rolloutPlan(d rolloutDoc, ids []string) plan.Plan {
	p := plan.Plan{ID: RolloutPlanPrefix + d.Spec.ID, Timestamp: d.Created.Format(time.RFC3339)}
	for _, wave := range splitWaves(d.Spec.Waves, ids) {
		p.Commands = append(p.Commands, plan.Command{Kind: WaveKind, Targets: []plan.CommandTargets{{
			Group: waveGroup, Discovery: plan.CommandDiscovery{Static: wave}, Concurrent: max(len(wave), 1),
		}}})
	}
	return p
}

// ensurePlan stores the plan of a rollout whose record was written
// without it (its creator stopped between the two writes), then drops
// the record's list of devices. A plan stored already is kept. It fails
// only when the plan could not be stored.
func (s *Server) ensurePlan(ctx context.Context, id string) error {
	_, d, err := s.readRollout(ctx, id)
	if err != nil || d.Planned {
		return err
	}
	p := rolloutPlan(d, d.Selected)
	if err := s.runner.Create(ctx, &plan.Document{Spec: p}); err != nil && !errors.Is(err, plan.ErrExists) {
		return errf("fleet: rollout %q: %w", id, err)
	}
	// The rollout is whole from here on: dropping the list is
	// housekeeping, done again on the next pass if it fails.
	err = s.updateRollout(ctx, id, func(d *rolloutDoc, _ RolloutState) error {
		d.Planned, d.Selected = true, nil
		return nil
	})
	if err != nil && ctx.Err() == nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "fleet: rollout planned, its record not updated", slog.String("rollout", id), slog.String("error", err.Error()))
	}
	return nil
}

// movedDoc is the stored record of a device a rollout moved.
type movedDoc struct {
	Format int `json:"format"`
	// Previous is the device's target before the rollout, nil when it
	// had none.
	Previous *Target `json:"previous,omitempty"`
	// Revision is the revision the rollout set (0: not set yet);
	// Restored the revision an abort set to put Previous back.
	Revision uint64 `json:"revision,omitempty"`
	Restored uint64 `json:"restored,omitempty"`
}

// RolloutState is where a rollout stands.
type RolloutState string

// The states of a rollout.
const (
	// RolloutRunning: its waves run (or wait for their turn).
	RolloutRunning RolloutState = "running"
	// RolloutPaused: paused by an operator or at a wave's error
	// threshold (RolloutStatus.Reason says which); nothing moves.
	RolloutPaused RolloutState = "paused"
	// RolloutAborting: an abort was asked and the runner has not seen it
	// yet.
	RolloutAborting RolloutState = "aborting"
	// RolloutAborted: aborted by an operator or an error threshold
	// (OnErrorAbort); RolloutStatus.Finished once its runner restored what
	// it had to.
	RolloutAborted RolloutState = "aborted"
	// RolloutCompleted: every wave completed.
	RolloutCompleted RolloutState = "completed"
	// RolloutFailed: the rollout's plan stopped in an error state other
	// than an abort (a timeout, a wave that could not be read).
	RolloutFailed RolloutState = "failed"
)

// StateErrorThreshold is the plan state of a rollout aborted by a wave's
// error threshold (OnErrorAbort); it is an error state of plan.Runner.
const StateErrorThreshold plan.State = "ErrorThreshold"

// RolloutStatus is what a rollout has done so far.
type RolloutStatus struct {
	ID       string       `json:"id"`
	Selector string       `json:"selector,omitempty"`
	State    RolloutState `json:"state"`
	// Reason says why the rollout is paused, aborted or failed.
	Reason  string    `json:"reason,omitempty"`
	Created time.Time `json:"created"`
	// Devices is the number of devices the rollout selected; Restored
	// those given their previous target back by an abort.
	Devices  int          `json:"devices"`
	Restored int          `json:"restored,omitempty"`
	Finished bool         `json:"finished,omitempty"`
	Waves    []WaveStatus `json:"waves"`
}

// WaveState is where a wave stands.
type WaveState string

// The states of a wave.
const (
	// WavePending: an earlier wave has not completed yet.
	WavePending WaveState = "pending"
	// WaveRunning: its devices are being moved, or are converging.
	WaveRunning WaveState = "running"
	// WaveCompleted: it reached its success threshold, or every device
	// finished within its error threshold.
	WaveCompleted WaveState = "completed"
	// WaveAborted: the rollout was aborted (by an operator or an error
	// threshold) while the wave ran.
	WaveAborted WaveState = "aborted"
	// WaveFailed: the wave's plan command stopped in another error state
	// (see RolloutStatus.Reason).
	WaveFailed WaveState = "failed"
)

// WaveStatus is one wave of a rollout.
type WaveStatus struct {
	Name             string    `json:"name"`
	State            WaveState `json:"state"`
	SuccessThreshold int       `json:"success_threshold"`
	ErrorThreshold   int       `json:"error_threshold"`
	// Devices is the wave's size: Pending not moved yet, Moving moved
	// and not ready, Ready ready at the rollout's target, Failed failed
	// (or replaced, revoked, timed out), Aborted never moved because of
	// an abort.
	Devices int `json:"devices"`
	Pending int `json:"pending"`
	Moving  int `json:"moving"`
	Ready   int `json:"ready"`
	Failed  int `json:"failed"`
	Aborted int `json:"aborted,omitempty"`
}

// RolloutError is the error of a rollout request that cannot be done in
// the rollout's state. It matches ErrRolloutState.
type RolloutError struct {
	Rollout string
	State   RolloutState
	Action  string
}

// Error names the rollout, the action and the state.
func (e *RolloutError) Error() string {
	return fmt.Sprintf("fleet: rollout %q: cannot %s a rollout that is %s", e.Rollout, e.Action, e.State)
}

// Is makes RolloutError match ErrRolloutState.
func (e *RolloutError) Is(target error) bool { return target == ErrRolloutState }

// checkRolloutID checks a rollout ID, which has the characters and length
// of a device ID (CheckDeviceID); a bad one is a *RequestError naming
// field.
func checkRolloutID(id, field string) error {
	err := CheckDeviceID(id)
	var re *RequestError
	if errors.As(err, &re) {
		return &RequestError{Field: field, Reason: re.Reason}
	}
	return err
}

// checkRolloutSpec checks a spec: a *RequestError names the culprit.
func checkRolloutSpec(sp *RolloutSpec, lim converge.DecodeLimits) (Selector, error) {
	if err := checkRolloutID(sp.ID, "rollout.id"); err != nil {
		return Selector{}, err
	}
	sel, err := ParseSelector(sp.Selector)
	if err != nil {
		return Selector{}, err
	}
	if sp.Payload != nil && !json.Valid(sp.Payload) {
		return Selector{}, &RequestError{Field: "rollout.payload", Reason: "not a JSON document"}
	}
	if err := (converge.Desired{Revision: 1, Items: sp.Items}).Validate(); err != nil {
		return Selector{}, &RequestError{Field: "rollout.items", Err: err}
	}
	if len(sp.Waves) == 0 {
		return Selector{}, &RequestError{Field: "rollout.waves", Reason: "at least one wave"}
	}
	for i, w := range sp.Waves {
		f := fmt.Sprintf("rollout.waves[%d].", i)
		switch {
		case w.Count < 0:
			return Selector{}, &RequestError{Field: f + "count", Reason: "negative"}
		case w.Percent < 0 || w.Percent > 100:
			return Selector{}, &RequestError{Field: f + "percent", Reason: "not within 0 to 100"}
		case w.Count > 0 && w.Percent > 0:
			return Selector{}, &RequestError{Field: f + "count", Reason: "set with percent: one or the other"}
		case w.SuccessThreshold < 0 || w.SuccessThreshold > 100:
			return Selector{}, &RequestError{Field: f + "success_threshold", Reason: "not within 0 to 100"}
		case w.ErrorThreshold < 0 || w.ErrorThreshold > 100:
			return Selector{}, &RequestError{Field: f + "error_threshold", Reason: "not within 0 to 100"}
		}
	}
	switch sp.OnError {
	case "":
		sp.OnError = OnErrorPause
	case OnErrorPause, OnErrorAbort:
	default:
		return Selector{}, &RequestError{Field: "rollout.on_error", Reason: fmt.Sprintf("%q is neither pause nor abort", sp.OnError)}
	}
	return sel, nil
}

// splitWaves cuts the selected devices (sorted) into the waves' sizes.
func splitWaves(waves []Wave, ids []string) [][]string {
	out := make([][]string, len(waves))
	next := 0
	for i, w := range waves {
		n := len(ids) - next
		switch {
		case w.Count > 0:
			n = min(w.Count, n)
		case w.Percent > 0:
			n = min(max((len(ids)*w.Percent+99)/100, 1), n)
		}
		out[i] = ids[next : next+n]
		next += n
	}
	if next < len(ids) {
		last := len(out) - 1
		out[last] = append(slices.Clip(out[last]), ids[next:]...)
	}
	return out
}

// waveName is the name a wave shows.
func waveName(w Wave, i int) string {
	if w.Name != "" {
		return w.Name
	}
	return fmt.Sprintf("wave %d", i+1)
}

// CreateRollout selects the devices of spec (enrolled, not revoked,
// matching its selector, in the order of their IDs), cuts them into the
// spec's waves and stores the rollout and its plan; the Server's
// RunRollouts (on any replica) runs it. One write creates the rollout: a
// call that fails midway (a crash, a lost database) leaves either no
// rollout, which can be created again, or a whole one, shown and run,
// whose plan a runner stores if the call did not. A malformed spec is a
// *RequestError naming the field; an ID in use is ErrRolloutExists.
func (s *Server) CreateRollout(ctx context.Context, spec RolloutSpec) (RolloutStatus, error) {
	sel, err := checkRolloutSpec(&spec, s.cfg.Limits)
	if err != nil {
		return RolloutStatus{}, err
	}
	recs, err := s.cfg.Store.List(ctx, keyDevices)
	if err != nil {
		return RolloutStatus{}, errf("fleet: rollout %q: list devices: %w", spec.ID, err)
	}
	var ids []string
	for _, rec := range recs {
		var d deviceDoc
		if err := decodeRecord(rec.Key, rec.Value, &d, func() int { return d.Format }); err != nil {
			return RolloutStatus{}, err
		}
		if d.Revoked.IsZero() && sel.Matches(d.Labels) {
			ids = append(ids, strings.TrimPrefix(rec.Key, keyDevices))
		}
	}
	slices.Sort(ids)
	// The record, with the devices selected, creates the rollout in one
	// write; the plan follows from it. Stopped between the two, the
	// rollout stays whole: a runner stores its plan.
	doc := rolloutDoc{Format: FormatVersion, Spec: spec, Created: s.cfg.Now().UTC(), Devices: len(ids), PausedWave: -1, Selected: ids}
	b, err := json.Marshal(doc)
	if err != nil {
		return RolloutStatus{}, err
	}
	if _, err := s.cfg.Store.Put(ctx, converge.StoreRecord{Key: keyRollouts + spec.ID, Value: b}); err != nil {
		if errors.Is(err, converge.ErrStoreStale) {
			return RolloutStatus{}, errf("fleet: rollout %q: %w", spec.ID, ErrRolloutExists)
		}
		return RolloutStatus{}, errf("fleet: rollout %q: %w", spec.ID, err)
	}
	if err := s.ensurePlan(ctx, spec.ID); err != nil {
		return RolloutStatus{}, err
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "fleet: rollout created", slog.String("rollout", spec.ID), slog.Int("devices", len(ids)))
	s.kickRollouts()
	return s.Rollout(ctx, spec.ID)
}

func (s *Server) readRollout(ctx context.Context, id string) (converge.StoreRecord, rolloutDoc, error) {
	var d rolloutDoc
	if err := checkRolloutID(id, "rollout"); err != nil {
		return converge.StoreRecord{}, d, err
	}
	rec, err := s.cfg.Store.Get(ctx, keyRollouts+id)
	if errors.Is(err, converge.ErrStoreNotFound) {
		return rec, d, errf("fleet: rollout %q: %w", id, ErrRolloutNotFound)
	}
	if err != nil {
		return rec, d, errf("fleet: rollout %q: %w", id, err)
	}
	return rec, d, decodeRecord(rec.Key, rec.Value, &d, func() int { return d.Format })
}

// updateRollout changes the rollout record with f, with a version check.
// f returns an error to change nothing.
func (s *Server) updateRollout(ctx context.Context, id string, f func(*rolloutDoc, RolloutState) error) error {
	for range casRetries {
		rec, d, err := s.readRollout(ctx, id)
		if err != nil {
			return err
		}
		st, err := s.rolloutStatus(ctx, d)
		if err != nil {
			return err
		}
		if err := f(&d, st.State); err != nil {
			return err
		}
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		_, err = s.cfg.Store.Put(ctx, converge.StoreRecord{Key: rec.Key, Version: rec.Version, Value: b})
		if errors.Is(err, converge.ErrStoreStale) {
			continue
		}
		if err != nil {
			return errf("fleet: rollout %q: %w", id, err)
		}
		return nil
	}
	return errf("fleet: rollout %q: %w", id, converge.ErrStoreStale)
}

// PauseRollout pauses a running rollout for reason: no device is moved
// any more and no wave starts until ResumeRollout; the devices already
// moved go on converging. A rollout that is not running is an
// *RolloutError (ErrRolloutState).
func (s *Server) PauseRollout(ctx context.Context, id, reason string) error {
	if reason == "" {
		reason = "paused"
	}
	return s.updateRollout(ctx, id, func(d *rolloutDoc, st RolloutState) error {
		if st != RolloutRunning {
			return &RolloutError{Rollout: id, State: st, Action: "pause"}
		}
		d.Paused, d.PausedWave = reason, -1
		return nil
	})
}

// ResumeRollout resumes a paused rollout. When an error threshold paused
// it, the wave goes on past its threshold (its failed devices stay
// failed); a later wave's threshold still holds. A rollout that is not
// paused is an *RolloutError (ErrRolloutState).
func (s *Server) ResumeRollout(ctx context.Context, id string) error {
	return s.updateRollout(ctx, id, func(d *rolloutDoc, st RolloutState) error {
		if st != RolloutPaused {
			return &RolloutError{Rollout: id, State: st, Action: "resume"}
		}
		if d.PausedWave >= 0 && !slices.Contains(d.Overridden, d.PausedWave) {
			d.Overridden = append(d.Overridden, d.PausedWave)
		}
		d.Paused, d.PausedWave = "", -1
		return nil
	})
}

// AbortRollout aborts a rollout that is running, paused, or was stopped
// by an error threshold: no device is moved any more, the devices moving
// stop counting, and when restore (or the spec's Restore) is set, every
// device the rollout moved gets the target it had before back, under its
// next revision (a device whose target someone else changed since is
// left alone, and so is one that had no target before the rollout: there
// is no target to put back). The runner does the restoring; RolloutStatus.Restored
// counts it. A finished or aborted rollout is an *RolloutError
// (ErrRolloutState).
func (s *Server) AbortRollout(ctx context.Context, id, reason string, restore bool) error {
	if reason == "" {
		reason = "aborted"
	}
	err := s.updateRollout(ctx, id, func(d *rolloutDoc, st RolloutState) error {
		if d.Abort != "" || !d.Finished.IsZero() || st == RolloutCompleted || st == RolloutFailed {
			return &RolloutError{Rollout: id, State: st, Action: "abort"}
		}
		d.Abort, d.Restore = reason, restore || d.Spec.Restore
		return nil
	})
	if err != nil {
		return err
	}
	if err := s.runner.Abort(ctx, RolloutPlanPrefix+id, reason); err != nil && !errors.Is(err, plan.ErrFinished) {
		return errf("fleet: rollout %q: %w", id, err)
	}
	s.kickRollouts()
	return nil
}

// Rollout returns the status of rollout id, or an error matching
// ErrRolloutNotFound.
func (s *Server) Rollout(ctx context.Context, id string) (RolloutStatus, error) {
	_, d, err := s.readRollout(ctx, id)
	if err != nil {
		return RolloutStatus{}, err
	}
	return s.rolloutStatus(ctx, d)
}

// Rollouts returns the status of every rollout, by ID.
func (s *Server) Rollouts(ctx context.Context) ([]RolloutStatus, error) {
	return ReadRollouts(ctx, s.cfg.Store)
}

// ReadRollouts reads the status of every rollout kept in store, by ID,
// without a Server: for a status page or a command line that reads the
// fleet's store.
func ReadRollouts(ctx context.Context, store converge.Store) ([]RolloutStatus, error) {
	r, err := plan.NewRunner(store, plan.RunnerConfig{})
	if err != nil {
		return nil, err
	}
	recs, err := store.List(ctx, keyRollouts)
	if err != nil {
		return nil, errf("fleet: rollouts: %w", err)
	}
	out := make([]RolloutStatus, 0, len(recs))
	for _, rec := range recs {
		var d rolloutDoc
		if err := decodeRecord(rec.Key, rec.Value, &d, func() int { return d.Format }); err != nil {
			return nil, err
		}
		st, err := statusOf(ctx, r, d)
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	slices.SortFunc(out, func(a, b RolloutStatus) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

func (s *Server) rolloutStatus(ctx context.Context, d rolloutDoc) (RolloutStatus, error) {
	return statusOf(ctx, s.runner, d)
}

// statusOf derives a rollout's status from its record and its plan.
func statusOf(ctx context.Context, r *plan.Runner, d rolloutDoc) (RolloutStatus, error) {
	st := RolloutStatus{ID: d.Spec.ID, Selector: d.Spec.Selector, Created: d.Created, Devices: d.Devices,
		Restored: d.Restored, Finished: !d.Finished.IsZero()}
	doc, _, err := r.Get(ctx, RolloutPlanPrefix+d.Spec.ID)
	if !d.Planned && errors.Is(err, converge.ErrStoreNotFound) {
		// Created, its plan not stored yet: every wave pending.
		doc, err = &plan.Document{Spec: rolloutPlan(d, d.Selected)}, nil
	}
	if err != nil {
		return RolloutStatus{}, errf("fleet: rollout %q: %w", d.Spec.ID, err)
	}
	ps := doc.Status
	if ps == nil {
		ps = &plan.Status{State: plan.StateNewPlan}
	}
	for i, cmd := range doc.Spec.Commands {
		w := d.Spec.Waves[min(i, len(d.Spec.Waves)-1)]
		ws := WaveStatus{Name: waveName(w, i), State: WavePending, SuccessThreshold: cmp0(w.SuccessThreshold, 100), ErrorThreshold: w.ErrorThreshold}
		if len(cmd.Targets) > 0 {
			ws.Devices = len(cmd.Targets[0].Discovery.Static)
		}
		ws.Pending = ws.Devices
		if i < len(ps.Commands) {
			cs := ps.Commands[i]
			switch {
			case cs.State == plan.StateCompleted:
				ws.State = WaveCompleted
			case cs.State == plan.StateAborted || cs.State == StateErrorThreshold:
				ws.State = WaveAborted
			case cs.State.IsError():
				ws.State = WaveFailed
			case !cs.Started.IsZero():
				ws.State = WaveRunning
			}
			ws.Pending = ws.Devices - len(cs.Targets[waveGroup])
			for _, t := range cs.Targets[waveGroup] {
				switch t.State {
				case plan.TargetPending, "":
					ws.Pending++
				case plan.TargetSent:
					ws.Moving++
				case plan.TargetCompleted:
					ws.Ready++
				case plan.TargetAborted:
					ws.Aborted++
				default:
					ws.Failed++
				}
			}
		}
		st.Waves = append(st.Waves, ws)
	}
	switch {
	case ps.State == plan.StateCompleted:
		st.State = RolloutCompleted
	case ps.State == plan.StateAborted || ps.State == StateErrorThreshold || ps.State.IsError() && d.Abort != "":
		st.State, st.Reason = RolloutAborted, ps.Reason
		if d.Abort != "" {
			st.Reason = d.Abort
		}
	case ps.State.IsError():
		st.State, st.Reason = RolloutFailed, ps.Reason
	case d.Abort != "":
		st.State, st.Reason = RolloutAborting, d.Abort
	case d.Paused != "":
		st.State, st.Reason = RolloutPaused, d.Paused
	default:
		st.State = RolloutRunning
	}
	return st, nil
}

func cmp0(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// RunRollouts runs the stored rollouts until ctx ends: every rollout not
// finished is run on the server's plan.Runner (one replica at a time holds
// a rollout's claim: the others wait, and take over when it stops), and
// when a rollout ends aborted, the devices it moved get their previous
// targets back if it asks so. Run it on every replica, in its own
// goroutine; it returns ctx's error.
func (s *Server) RunRollouts(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	running := map[string]bool{}
	var mu sync.Mutex
	t := time.NewTicker(s.rolloutPoll)
	defer t.Stop()
	for {
		recs, err := s.cfg.Store.List(ctx, keyRollouts)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "fleet: list rollouts", slog.String("error", err.Error()))
		}
		for _, rec := range recs {
			var d rolloutDoc
			if err := decodeRecord(rec.Key, rec.Value, &d, func() int { return d.Format }); err != nil {
				s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "fleet: rollout unreadable", slog.String("error", err.Error()))
				continue
			}
			id := d.Spec.ID
			mu.Lock()
			busy := running[id]
			if !busy && d.Finished.IsZero() {
				running[id] = true
				wg.Go(func() {
					s.runRollout(ctx, id)
					mu.Lock()
					delete(running, id)
					mu.Unlock()
				})
			}
			mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		case <-s.kick:
		}
	}
}

// kickRollouts wakes this replica's RunRollouts.
func (s *Server) kickRollouts() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// runRollout runs rollout id's plan to its end, then restores and marks
// the rollout finished.
func (s *Server) runRollout(ctx context.Context, id string) {
	if t := s.cfg.Tracer; t != nil {
		var sp converge.Span
		ctx, sp = t.Start(ctx, SpanRollout, converge.StringAttr(AttrRollout, id))
		defer sp.End(nil)
	}
	if err := s.ensurePlan(ctx, id); err != nil {
		if ctx.Err() == nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "fleet: rollout plan not stored", slog.String("rollout", id), slog.String("error", err.Error()))
		}
		return
	}
	st, err := s.runner.Run(ctx, RolloutPlanPrefix+id)
	if ctx.Err() != nil {
		return
	}
	if st == nil {
		if err != nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "fleet: rollout stopped", slog.String("rollout", id), slog.String("error", err.Error()))
		}
		return
	}
	_, d, rerr := s.readRollout(ctx, id)
	if rerr != nil {
		return
	}
	// One replica at a time finishes a rollout: the others find its
	// claim held and look again on their next pass, when it is finished.
	lease, err := s.cfg.Store.Claim(ctx, keyRollouts+id, s.owner, restoreLeaseTTL)
	if err != nil {
		if !errors.Is(err, converge.ErrClaimHeld) {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "fleet: rollout not finished", slog.String("rollout", id), slog.String("error", err.Error()))
		}
		return
	}
	defer func() { _ = s.cfg.Store.Release(context.WithoutCancel(ctx), lease) }()
	restored := -1
	if (d.Restore || d.Spec.Restore) && (st.State == plan.StateAborted || st.State == StateErrorThreshold || d.Abort != "") {
		n, err := s.restore(ctx, id, d.Spec)
		if err != nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "fleet: rollout restore failed", slog.String("rollout", id), slog.String("error", err.Error()))
			return // the next pass tries again
		}
		restored = n
	}
	err = s.updateRollout(ctx, id, func(d *rolloutDoc, _ RolloutState) error {
		if !d.Finished.IsZero() {
			return errFinishedAlready
		}
		d.Finished = s.cfg.Now().UTC()
		if restored >= 0 {
			d.Restored = restored
		}
		return nil
	})
	s.movedMu.Lock()
	for k := range s.moved {
		if strings.HasPrefix(k, keyRolloutMoved+id+"/") {
			delete(s.moved, k)
		}
	}
	s.movedMu.Unlock()
	if err == nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "fleet: rollout finished", slog.String("rollout", id),
			slog.String("state", string(st.State)), slog.Int("restored", restored))
	}
}

var errFinishedAlready = errors.New("fleet: rollout finished")

// restoreLeaseTTL is how long a replica's claim on finishing a rollout
// lasts; restore renews it every restoreRenewEvery devices.
const (
	restoreLeaseTTL   = time.Minute
	restoreRenewEvery = 64
)

// restore gives every device rollout id moved its previous target back,
// where the device's target is still the one the rollout set. It returns
// how many devices have their previous target back, restored by this call
// or an earlier one. The caller holds the claim on the rollout's record;
// each target is put back only while the device's target is still the
// rollout's, so that two replicas restoring at once (one whose claim ran
// out) never restore a device twice.
func (s *Server) restore(ctx context.Context, id string, spec RolloutSpec) (int, error) {
	recs, err := s.cfg.Store.List(ctx, keyRolloutMoved+id+"/")
	if err != nil {
		return 0, errf("fleet: rollout %q: restore: %w", id, err)
	}
	var n atomic.Int64
	for start := 0; start < len(recs); start += restoreRenewEvery {
		if start > 0 {
			if _, err := s.cfg.Store.Claim(ctx, keyRollouts+id, s.owner, restoreLeaseTTL); err != nil {
				return int(n.Load()), errf("fleet: rollout %q: restore: %w", id, err)
			}
		}
		chunk := recs[start:min(start+restoreRenewEvery, len(recs))]
		errs := make([]error, len(chunk))
		forEachBounded(len(chunk), moveConcurrency, func(i int) {
			restored, err := s.restoreDevice(ctx, id, spec, chunk[i])
			if restored {
				n.Add(1)
			}
			errs[i] = err
		})
		for _, err := range errs {
			if err != nil {
				return int(n.Load()), err
			}
		}
	}
	return int(n.Load()), nil
}

// restoreDevice gives the device of rec, a record of the devices rollout
// id moved, its previous target back (see restore), and says whether the
// device has it back, restored now or before.
func (s *Server) restoreDevice(ctx context.Context, id string, spec RolloutSpec, rec converge.StoreRecord) (bool, error) {
	dev := strings.TrimPrefix(rec.Key, keyRolloutMoved+id+"/")
	var m movedDoc
	if err := decodeRecord(rec.Key, rec.Value, &m, func() int { return m.Format }); err != nil {
		return false, err
	}
	if m.Restored != 0 {
		return true, nil
	}
	if m.Previous == nil {
		return false, nil
	}
	_, cur, err := s.readTarget(ctx, dev)
	if err != nil {
		if errors.Is(err, ErrNoTarget) {
			return false, nil
		}
		return false, err
	}
	rev := m.Revision
	if rev == 0 && s.isRolloutTarget(cur, spec, m) {
		rev = cur.Desired.Revision // set before a crash, not recorded
	}
	if rev == 0 || cur.Desired.Revision != rev {
		return false, nil // never moved, or moved on by someone else since
	}
	m.Revision = rev
	m.Restored, err = s.setTarget(ctx, dev, Target{Desired: converge.Desired{Items: m.Previous.Desired.Items}, Payload: m.Previous.Payload},
		func(old targetDoc) error {
			if old.Desired.Revision != rev {
				return errTargetMoved
			}
			return nil
		})
	if errors.Is(err, errTargetMoved) {
		return false, nil // restored by another replica meanwhile, or moved on
	}
	if err != nil {
		return false, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return false, err
	}
	if _, err := s.cfg.Store.Put(ctx, converge.StoreRecord{Key: rec.Key, Version: rec.Version, Value: b}); err != nil {
		return false, errf("fleet: rollout %q: restore device %q: %w", id, dev, err)
	}
	return true, nil
}

// moveConcurrency bounds the devices a replica moves, or restores, at
// once: each is a few store operations on records of its own.
const moveConcurrency = 16

// forEachBounded calls f(i) for every i in [0, n), at most limit at once,
// and returns when every call returned.
func forEachBounded(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// moved is the outcome of a move.
type moved struct {
	rev uint64
	err error
}

// moveAll moves the devices devs to rollout id's target (move), at most
// moveConcurrency at once.
func (s *Server) moveAll(ctx context.Context, id string, devs []string, spec RolloutSpec) map[string]moved {
	out := make([]moved, len(devs))
	forEachBounded(len(devs), moveConcurrency, func(i int) {
		out[i].rev, out[i].err = s.move(ctx, id, devs[i], spec)
	})
	m := make(map[string]moved, len(devs))
	for i, dev := range devs {
		m[dev] = out[i]
	}
	return m
}

// isRolloutTarget says whether cur is the rollout's target, set after
// the previous one m recorded.
func (s *Server) isRolloutTarget(cur targetDoc, spec RolloutSpec, m movedDoc) bool {
	prev := uint64(0)
	if m.Previous != nil {
		prev = m.Previous.Desired.Revision
	}
	if cur.Desired.Revision <= prev || !bytes.Equal(cur.Payload, spec.Payload) {
		return false
	}
	a, _ := json.Marshal(cur.Desired.Items)
	b, _ := json.Marshal(spec.Items)
	return bytes.Equal(a, b)
}

// The spans of a rollout and of a device's report (Config.Tracer), and
// their attributes.
const (
	SpanRollout = "fleet.rollout"
	SpanMove    = "fleet.move"
	SpanReport  = "fleet.report"  // a device's report post, a child of the span its traceparent names
	AttrRollout = "fleet.rollout" // the rollout's ID
	AttrDevice  = "fleet.device"  // the device's ID
)

// move sets device dev's target to the rollout's, once: the target it
// replaces is recorded first, then the new one set, then its revision
// recorded; a runner that dies between finds the record and does not set
// the target twice. It returns the revision the rollout set.
func (s *Server) move(ctx context.Context, id, dev string, spec RolloutSpec) (rev uint64, err error) {
	if s.cfg.Tracer != nil {
		var sp converge.Span
		ctx, sp = converge.StartSpan(converge.WithTracer(ctx, s.cfg.Tracer), SpanMove, converge.StringAttr(AttrDevice, dev))
		defer func() { sp.End(err) }()
	}
	key := keyRolloutMoved + id + "/" + dev
	s.movedMu.Lock()
	rev, ok := s.moved[key]
	s.movedMu.Unlock()
	if ok {
		return rev, nil
	}
	for range casRetries {
		var m movedDoc
		rec, err := s.cfg.Store.Get(ctx, key)
		switch {
		case errors.Is(err, converge.ErrStoreNotFound):
			_, cur, terr := s.readTarget(ctx, dev)
			if terr != nil && !errors.Is(terr, ErrNoTarget) {
				return 0, terr
			}
			m = movedDoc{Format: FormatVersion}
			if terr == nil {
				m.Previous = &Target{Desired: cur.Desired, Payload: cur.Payload}
			}
			b, err := json.Marshal(m)
			if err != nil {
				return 0, err
			}
			var ver uint64
			ver, err = s.cfg.Store.Put(ctx, converge.StoreRecord{Key: key, Value: b})
			rec = converge.StoreRecord{Key: key, Version: ver}
			if errors.Is(err, converge.ErrStoreStale) {
				continue
			}
			if err != nil {
				return 0, errf("fleet: rollout %q: device %q: %w", id, dev, err)
			}
		case err != nil:
			return 0, errf("fleet: rollout %q: device %q: %w", id, dev, err)
		default:
			if err := decodeRecord(rec.Key, rec.Value, &m, func() int { return m.Format }); err != nil {
				return 0, err
			}
		}
		if m.Revision == 0 {
			_, cur, terr := s.readTarget(ctx, dev)
			if terr != nil && !errors.Is(terr, ErrNoTarget) {
				return 0, terr
			}
			if terr == nil && s.isRolloutTarget(cur, spec, m) {
				m.Revision = cur.Desired.Revision
			} else {
				// Set only over the target just judged: a runner that set
				// it meanwhile (one whose claim ran out) is read back on
				// the next try rather than moved again.
				seen := cur.Desired.Revision
				m.Revision, err = s.setTarget(ctx, dev, Target{Desired: converge.Desired{Items: spec.Items}, Payload: spec.Payload},
					func(old targetDoc) error {
						if old.Desired.Revision != seen {
							return errTargetMoved
						}
						return nil
					})
				if errors.Is(err, errTargetMoved) {
					continue
				}
				if err != nil {
					return 0, err
				}
			}
			b, err := json.Marshal(m)
			if err != nil {
				return 0, err
			}
			if _, err := s.cfg.Store.Put(ctx, converge.StoreRecord{Key: key, Version: rec.Version, Value: b}); err != nil {
				if errors.Is(err, converge.ErrStoreStale) {
					continue
				}
				return 0, errf("fleet: rollout %q: device %q: %w", id, dev, err)
			}
		}
		s.movedMu.Lock()
		s.moved[key] = m.Revision
		s.movedMu.Unlock()
		return m.Revision, nil
	}
	return 0, errf("fleet: rollout %q: device %q: %w", id, dev, converge.ErrStoreStale)
}

// listAbove is the number of devices from which a wave's step reads the
// statuses of its devices with three lists of the store (every device,
// target and report) rather than three reads per device.
const listAbove = 32

// statuses returns the statuses of devices ids, read before anything is
// moved: devices moved after the read are missing from it, or show their
// target before the move.
func (s *Server) statuses(ctx context.Context, ids []string) (map[string]DeviceStatus, error) {
	out := make(map[string]DeviceStatus, len(ids))
	if len(ids) <= listAbove {
		return out, nil // read one by one, after the move
	}
	devs, err := readAll(ctx, s.cfg.Store, keyDevices, func(d *deviceDoc) int { return d.Format })
	if err != nil {
		return nil, err
	}
	targets, err := readAll(ctx, s.cfg.Store, keyTargets, func(d *targetDoc) int { return d.Format })
	if err != nil {
		return nil, err
	}
	reports, err := readAll(ctx, s.cfg.Store, keyReports, func(d *reportDoc) int { return d.Format })
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		dev, ok := devs[id]
		if !ok {
			continue // DeviceStatus says why
		}
		st := s.derive(id, targets[id], reports[id])
		st.Revoked, st.Labels = !dev.Revoked.IsZero(), dev.Labels
		out[id] = st
	}
	return out, nil
}

// waveHandler is the plan.CommandHandler of a rollout's waves.
type waveHandler struct{ s *Server }

func (h waveHandler) rollout(ctx context.Context, c *plan.CommandContext) (rolloutDoc, Wave, error) {
	id := strings.TrimPrefix(c.PlanID, RolloutPlanPrefix)
	_, d, err := h.s.readRollout(ctx, id)
	if err != nil {
		return d, Wave{}, err
	}
	w := d.Spec.Waves[min(c.Index, len(d.Spec.Waves)-1)]
	return d, w, nil
}

// NewPlan lists the wave's devices, pending.
func (h waveHandler) NewPlan(_ context.Context, c *plan.CommandContext) (plan.State, error) {
	n := 0
	for _, g := range c.Command.Targets {
		for _, dev := range g.Discovery.Static {
			c.SetTarget(g.Group, dev, plan.TargetPending, "")
			n++
		}
	}
	if n == 0 {
		return plan.StateCompleted, nil
	}
	return plan.StateSchedulableWait, nil
}

// Schedulable marks the wave's pending devices as moving; the next step
// (SchedulableWait), once this is stored, moves them.
func (h waveHandler) Schedulable(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
	d, _, err := h.rollout(ctx, c)
	if err != nil {
		return "", err
	}
	if d.Paused != "" || d.Abort != "" {
		return plan.StateSchedulableWait, nil
	}
	for _, t := range c.Status.Targets[waveGroup] {
		if targetState(t.State) == plan.TargetPending {
			c.SetTarget(waveGroup, t.Name, plan.TargetSent, "")
		}
	}
	return plan.StateSchedulableWait, nil
}

// SchedulableWait moves the devices marked moving, reads back where they
// stand, and weighs the wave against its thresholds.
func (h waveHandler) SchedulableWait(ctx context.Context, c *plan.CommandContext) (plan.State, error) {
	d, w, err := h.rollout(ctx, c)
	if err != nil {
		return "", err
	}
	id := d.Spec.ID
	ts := c.Status.Targets[waveGroup]
	var total, ready, failed, pending, moving int
	var sent []string
	for _, t := range ts {
		if targetState(t.State) == plan.TargetSent {
			sent = append(sent, t.Name)
		}
	}
	var (
		statuses map[string]DeviceStatus
		moves    map[string]moved
	)
	if d.Abort == "" {
		moves = h.s.moveAll(ctx, id, sent, d.Spec)
		if statuses, err = h.s.statuses(ctx, sent); err != nil {
			return "", err
		}
	}
	for _, t := range slices.Clone(ts) {
		total++
		switch targetState(t.State) {
		case plan.TargetPending:
			pending++
			continue
		case plan.TargetCompleted:
			ready++
			continue
		case plan.TargetSent:
		case plan.TargetAborted:
			continue
		default:
			failed++
			continue
		}
		if d.Abort != "" {
			c.SetTarget(waveGroup, t.Name, plan.TargetAborted, d.Abort)
			continue
		}
		mv, ok := moves[t.Name]
		if !ok {
			mv.rev, mv.err = h.s.move(ctx, id, t.Name, d.Spec)
		}
		rev, err := mv.rev, mv.err
		if err != nil {
			if errors.Is(err, ErrDeviceNotFound) {
				c.SetTarget(waveGroup, t.Name, plan.TargetMissing, "device not enrolled")
				failed++
				continue
			}
			return "", err
		}
		ds, ok := statuses[t.Name]
		if !ok || ds.Target != rev {
			// Moved since the statuses were read (or not listed): read
			// it again.
			if ds, err = h.s.DeviceStatus(ctx, t.Name); err != nil {
				return "", err
			}
		}
		switch {
		case ds.Revoked:
			c.SetTarget(waveGroup, t.Name, plan.TargetApplyFailed, "device revoked")
			failed++
		case ds.Target != rev:
			c.SetTarget(waveGroup, t.Name, plan.TargetApplyFailed, fmt.Sprintf("target replaced by revision %d", ds.Target))
			failed++
		case ds.Reported == rev && ds.State == StateReady:
			c.SetTarget(waveGroup, t.Name, plan.TargetCompleted, "")
			ready++
		case ds.Reported == rev && ds.State == StateFailed:
			c.SetTarget(waveGroup, t.Name, plan.TargetApplyFailed, fmt.Sprintf("failed at revision %d", rev))
			failed++
		case c.TargetTimeout > 0 && c.Since(t.LastUpdatedTimestamp) >= c.TargetTimeout:
			c.SetTarget(waveGroup, t.Name, plan.TargetTimedOut, fmt.Sprintf("not ready within %s", c.TargetTimeout))
			failed++
		default:
			moving++
		}
	}
	if d.Abort != "" {
		return plan.StateSchedulableWait, nil
	}
	if total > 0 && failed*100 > w.ErrorThreshold*total && !slices.Contains(d.Overridden, c.Index) {
		reason := fmt.Sprintf("%s reached its error threshold: %d of %d devices failed (threshold %d%%)", waveName(w, c.Index), failed, total, w.ErrorThreshold)
		if d.Spec.OnError == OnErrorAbort {
			c.Status.Reason = reason
			return StateErrorThreshold, nil
		}
		if d.Paused == "" {
			err := h.s.updateRollout(ctx, id, func(d *rolloutDoc, _ RolloutState) error {
				if d.Paused == "" && !slices.Contains(d.Overridden, c.Index) {
					d.Paused, d.PausedWave = reason, c.Index
				}
				return nil
			})
			if err != nil {
				return "", err
			}
			h.s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "fleet: rollout paused", slog.String("rollout", id), slog.String("reason", reason))
		}
		return plan.StateSchedulableWait, nil
	}
	if d.Paused != "" {
		return plan.StateSchedulableWait, nil
	}
	if total == 0 || ready*100 >= cmp0(w.SuccessThreshold, 100)*total || pending == 0 && moving == 0 {
		return plan.StateCompleted, nil
	}
	if pending > 0 {
		return plan.StateSchedulable, nil
	}
	return plan.StateSchedulableWait, nil
}

// decodeRolloutSpec reads the body of an API request creating a rollout,
// strictly.
func decodeRolloutSpec(b []byte) (RolloutSpec, error) {
	var sp RolloutSpec
	err := sp.UnmarshalJSON(b)
	return sp, err
}

// targetState reads the zero target state as pending.
func targetState(s plan.TargetState) plan.TargetState {
	if s == "" {
		return plan.TargetPending
	}
	return s
}
