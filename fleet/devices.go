package fleet

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// casRetries bounds the retries of a read-modify-write that lost a race
// with another replica.
const casRetries = 8

// discard is the logger DeriveStatus gets: the server reports through its
// own.
var discard = slog.New(slog.DiscardHandler)

// Enrol enrols device id with its labels (which rollouts select devices
// by; nil for none) and returns its credential, which the server keeps
// only as a SHA-256 hash: it cannot be read back, so hand it to the
// device now. Enrolling an ID that is enrolled (even revoked) fails with
// ErrDeviceExists; an invalid ID or label is a *RequestError.
func (s *Server) Enrol(ctx context.Context, id string, labels map[string]string) (token string, err error) {
	if err := CheckDeviceID(id); err != nil {
		return "", err
	}
	if err := CheckLabels(labels); err != nil {
		return "", err
	}
	tok, h := newToken(id)
	doc := deviceDoc{Format: FormatVersion, TokenSHA256: hashHex(h[:]), Enrolled: s.cfg.Now().UTC(), Labels: labels}
	b, err := json.Marshal(doc)
	if err != nil {
		return "", err
	}
	_, err = s.cfg.Store.Put(ctx, converge.StoreRecord{Key: keyDevices + id, Value: b})
	if errors.Is(err, converge.ErrStoreStale) {
		return "", errf("fleet: device %q: %w", id, ErrDeviceExists)
	}
	if err != nil {
		return "", errf("fleet: enrol device %q: %w", id, err)
	}
	return tok, nil
}

// Revoke revokes device id's credential: from now on every request of the
// device is refused with 401 and counted (MetricRefused, reason
// "revoked"). Its target and reports are kept. Revoking a revoked device
// changes nothing; an unknown one fails with ErrDeviceNotFound.
func (s *Server) Revoke(ctx context.Context, id string) error {
	if err := CheckDeviceID(id); err != nil {
		return err
	}
	for range casRetries {
		rec, dev, err := s.readDeviceRecord(ctx, id)
		if err != nil {
			return err
		}
		if !dev.Revoked.IsZero() {
			return nil
		}
		dev.Revoked = s.cfg.Now().UTC()
		b, err := json.Marshal(dev)
		if err != nil {
			return err
		}
		_, err = s.cfg.Store.Put(ctx, converge.StoreRecord{Key: rec.Key, Version: rec.Version, Value: b})
		if errors.Is(err, converge.ErrStoreStale) {
			continue
		}
		if err != nil {
			return errf("fleet: revoke device %q: %w", id, err)
		}
		return nil
	}
	return errf("fleet: revoke device %q: %w", id, converge.ErrStoreStale)
}

func (s *Server) readDevice(ctx context.Context, id string) (deviceDoc, error) {
	_, d, err := s.readDeviceRecord(ctx, id)
	return d, err
}

// readDeviceRecord reads device id's record; one read again with the same
// bytes comes decoded from s.devices, its Labels shared: do not change
// them.
func (s *Server) readDeviceRecord(ctx context.Context, id string) (converge.StoreRecord, deviceDoc, error) {
	var d deviceDoc
	rec, err := s.cfg.Store.Get(ctx, keyDevices+id)
	if errors.Is(err, converge.ErrStoreNotFound) {
		return rec, d, errf("fleet: device %q: %w", id, ErrDeviceNotFound)
	}
	if err != nil {
		return rec, d, errf("fleet: device %q: %w", id, err)
	}
	d, err = decodeCached(s.devices, rec, func(d *deviceDoc) int { return d.Format })
	return rec, d, err
}

// SetTarget sets device id's target and returns its revision: one more
// than the device's last target revision (1 for the first), written with
// a version check, so that replicas setting targets at once never give two
// targets one revision, and a device's revisions only grow. t's
// Desired.Revision is ignored; its items must be valid (a *RequestError
// wrapping the core's *converge.StatusFieldError otherwise). The device
// must be enrolled (ErrDeviceNotFound). Every replica's long polls of the
// device are woken through the store's watch.
func (s *Server) SetTarget(ctx context.Context, id string, t Target) (revision uint64, err error) {
	return s.setTarget(ctx, id, t, nil)
}

// errTargetMoved is the error of a conditional setTarget whose condition
// no longer holds: the device's target is not the one expected.
var errTargetMoved = errors.New("fleet: target moved on")

// setTarget is SetTarget, and when cond is not nil, only while cond
// accepts the device's current target (its zero value when none is set),
// checked against the very version written: a cond that refuses returns
// its error and nothing is set. Two replicas setting a target under the
// same condition (an abort's restore, a wave's move) thus set it once.
func (s *Server) setTarget(ctx context.Context, id string, t Target, cond func(old targetDoc) error) (revision uint64, err error) {
	if err := CheckDeviceID(id); err != nil {
		return 0, err
	}
	if t.Payload != nil && !json.Valid(t.Payload) {
		return 0, &RequestError{Field: "payload", Reason: "not a JSON document"}
	}
	if _, err := s.readDevice(ctx, id); err != nil {
		return 0, err
	}
	key := keyTargets + id
	for range casRetries {
		rec, old, err := s.readTarget(ctx, id)
		if err != nil && !errors.Is(err, ErrNoTarget) {
			return 0, err
		}
		if cond != nil {
			if err := cond(old); err != nil {
				return 0, err
			}
		}
		doc := targetDoc{Format: FormatVersion, Desired: converge.Desired{Revision: old.Desired.Revision + 1, Items: t.Desired.Items}, Payload: t.Payload, Set: s.cfg.Now().UTC(), TraceParent: converge.TraceParent(ctx)}
		if err := doc.Desired.Validate(); err != nil {
			return 0, &RequestError{Field: "target.desired", Err: err}
		}
		b, err := json.Marshal(doc)
		if err != nil {
			return 0, err
		}
		_, err = s.cfg.Store.Put(ctx, converge.StoreRecord{Key: key, Version: rec.Version, Value: b})
		if errors.Is(err, converge.ErrStoreStale) {
			continue
		}
		if err != nil {
			return 0, errf("fleet: set target of device %q: %w", id, err)
		}
		// A changed value need not be announced by a store's watch; a
		// due time is, to every replica.
		if err := s.cfg.Store.Schedule(ctx, key, time.Time{}); err != nil {
			return 0, errf("fleet: announce target of device %q: %w", id, err)
		}
		return doc.Desired.Revision, nil
	}
	return 0, errf("fleet: set target of device %q: %w", id, converge.ErrStoreStale)
}

// readTarget reads device id's stored target; none is ErrNoTarget (with
// a zero record and document). A target read again with the same bytes
// comes decoded from s.targets; the document is shared: do not change it.
func (s *Server) readTarget(ctx context.Context, id string) (converge.StoreRecord, targetDoc, error) {
	var d targetDoc
	rec, err := s.cfg.Store.Get(ctx, keyTargets+id)
	if errors.Is(err, converge.ErrStoreNotFound) {
		return converge.StoreRecord{}, d, errf("fleet: device %q: %w", id, ErrNoTarget)
	}
	if err != nil {
		return rec, d, errf("fleet: target of device %q: %w", id, err)
	}
	d, err = decodeCached(s.targets, rec, func(d *targetDoc) int { return d.Format })
	return rec, d, err
}

// readTargetRaw returns the stored target document as devices read it,
// and its revision (0 and ErrNoTarget when none is set).
func (s *Server) readTargetRaw(ctx context.Context, id string) ([]byte, uint64, error) {
	rec, d, err := s.readTarget(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	return rec.Value, d.Desired.Revision, nil
}

// StoreReport decodes body, an EdgeReport in JSON, with the core's capped
// strict decoder (converge.DecodeEdgeReport, under Config.Limits) and keeps
// it as device id's latest report, returning the device's status derived
// from it. A malformed report is a *RequestError wrapping the core's
// error (a *converge.LimitError matching converge.ErrTooLarge for a body
// too large); a report for a revision older than the one held, or newer
// than the device's target, is a *ReportError: the server never takes an
// old report for a new target. The device's credential is the caller's
// business (the HTTP route checks it).
func (s *Server) StoreReport(ctx context.Context, id string, body []byte) (DeviceStatus, error) {
	if err := CheckDeviceID(id); err != nil {
		return DeviceStatus{}, err
	}
	rep, err := converge.DecodeEdgeReport(body, s.cfg.Limits)
	if err != nil {
		return DeviceStatus{}, &RequestError{Field: "report", Err: err}
	}
	key := keyReports + id
	for range casRetries {
		_, target, err := s.readTarget(ctx, id)
		if err != nil && !errors.Is(err, ErrNoTarget) {
			return DeviceStatus{}, err
		}
		rec, held, err := s.readReport(ctx, id)
		if err != nil && !errors.Is(err, converge.ErrStoreNotFound) {
			return DeviceStatus{}, err
		}
		var heldRev uint64
		if held.Report != nil {
			heldRev = held.Report.Revision
		}
		if rep.Revision < heldRev || rep.Revision > target.Desired.Revision {
			return DeviceStatus{}, &ReportError{Device: id, Revision: rep.Revision, Stored: heldRev, Target: target.Desired.Revision}
		}
		doc := reportDoc{Format: FormatVersion, Received: s.cfg.Now().UTC(), Report: rep}
		b, err := json.Marshal(doc)
		if err != nil {
			return DeviceStatus{}, err
		}
		_, err = s.cfg.Store.Put(ctx, converge.StoreRecord{Key: key, Version: rec.Version, Value: b})
		if errors.Is(err, converge.ErrStoreStale) {
			continue
		}
		if err != nil {
			return DeviceStatus{}, errf("fleet: report of device %q: %w", id, err)
		}
		return s.derive(id, target, doc), nil
	}
	return DeviceStatus{}, errf("fleet: report of device %q: %w", id, converge.ErrStoreStale)
}

func (s *Server) readReport(ctx context.Context, id string) (converge.StoreRecord, reportDoc, error) {
	var d reportDoc
	rec, err := s.cfg.Store.Get(ctx, keyReports+id)
	if err != nil {
		if !errors.Is(err, converge.ErrStoreNotFound) {
			err = errf("fleet: report of device %q: %w", id, err)
		}
		return converge.StoreRecord{}, d, err
	}
	return rec, d, decodeRecord(rec.Key, rec.Value, &d, func() int { return d.Format })
}

// State is where a device stands against its target, derived from its
// latest report.
type State string

// The states of a device.
const (
	// StateNoTarget: no target was set for the device.
	StateNoTarget State = "no-target"
	// StatePending: the device has not reported for its target's
	// revision yet (its latest report, if any, answers an older one).
	StatePending State = "pending"
	// StateProgressing: it reported for the revision; some items are
	// transitional.
	StateProgressing State = "progressing"
	// StateReady: it reported for the revision; every item is final.
	StateReady State = "ready"
	// StateFailed: it reported for the revision; some item failed.
	StateFailed State = "failed"
)

// DeviceStatus is what the server knows of one device.
type DeviceStatus struct {
	Device  string `json:"device"`
	Revoked bool   `json:"revoked,omitempty"`
	// Labels are the labels the device was enrolled with.
	Labels map[string]string `json:"labels,omitempty"`
	// Target is the revision of the device's target (0: none), Reported
	// the revision its latest report answers (0: none).
	Target   uint64 `json:"target,omitempty"`
	Reported uint64 `json:"reported,omitempty"`
	State    State  `json:"state"`
	// LastReport is when the server received the latest report.
	LastReport time.Time `json:"last_report,omitzero"`
	// Status is the status derived from the latest report against the
	// Desired of the target's revision (converge.DeriveStatus); nil
	// without a target.
	Status *converge.StatusReport `json:"status,omitempty"`
}

// derive computes a device's status from its target and latest report.
func (s *Server) derive(id string, target targetDoc, rep reportDoc) DeviceStatus {
	st := DeviceStatus{Device: id, Target: target.Desired.Revision, State: StateNoTarget, LastReport: rep.Received}
	if rep.Report != nil {
		st.Reported = rep.Report.Revision
	}
	if st.Target == 0 {
		return st
	}
	sr, err := converge.DeriveStatus(target.Desired, rep.Report, discard)
	if err != nil {
		// Both were validated when stored; a failure here is a damaged
		// record, shown as not reported.
		sr, _ = converge.DeriveStatus(target.Desired, nil, discard)
	}
	st.Status = sr
	switch {
	case sr == nil || !sr.Reported:
		st.State = StatePending
	case len(sr.Failed()) > 0:
		st.State = StateFailed
	case sr.Ready():
		st.State = StateReady
	default:
		st.State = StateProgressing
	}
	return st
}

// DeviceStatus returns what the server knows of device id, or an error
// matching ErrDeviceNotFound.
func (s *Server) DeviceStatus(ctx context.Context, id string) (DeviceStatus, error) {
	if err := CheckDeviceID(id); err != nil {
		return DeviceStatus{}, err
	}
	dev, err := s.readDevice(ctx, id)
	if err != nil {
		return DeviceStatus{}, err
	}
	_, target, err := s.readTarget(ctx, id)
	if err != nil && !errors.Is(err, ErrNoTarget) {
		return DeviceStatus{}, err
	}
	_, rep, err := s.readReport(ctx, id)
	if err != nil && !errors.Is(err, converge.ErrStoreNotFound) {
		return DeviceStatus{}, err
	}
	st := s.derive(id, target, rep)
	st.Revoked = !dev.Revoked.IsZero()
	st.Labels = maps.Clone(dev.Labels)
	return st, nil
}

// Counts is the fleet at a glance.
type Counts struct {
	// Devices is the number of enrolled devices, Revoked those revoked
	// among them.
	Devices int `json:"devices"`
	Revoked int `json:"revoked,omitempty"`
	// Stale is the number of unrevoked devices with no report for
	// Config.StaleAfter (or none at all).
	Stale int `json:"stale,omitempty"`
	// Revisions counts the unrevoked devices per target revision and
	// state, by revision then state.
	Revisions []RevisionCount `json:"revisions,omitempty"`
}

// RevisionCount is the number of devices at one target revision in one
// state.
type RevisionCount struct {
	Revision uint64 `json:"revision"`
	State    State  `json:"state"`
	Devices  int    `json:"devices"`
}

// Counts counts the fleet from the store (every replica sees the same
// counts): devices per target revision and state, revoked devices, and
// devices not seen (no report) for Config.StaleAfter.
func (s *Server) Counts(ctx context.Context) (Counts, error) {
	devs, err := s.cfg.Store.List(ctx, keyDevices)
	if err != nil {
		return Counts{}, errf("fleet: counts: %w", err)
	}
	targets, err := readAll(ctx, s.cfg.Store, keyTargets, func(d *targetDoc) int { return d.Format })
	if err != nil {
		return Counts{}, err
	}
	reports, err := readAll(ctx, s.cfg.Store, keyReports, func(d *reportDoc) int { return d.Format })
	if err != nil {
		return Counts{}, err
	}
	now := s.cfg.Now()
	var c Counts
	per := map[RevisionCount]int{}
	for _, rec := range devs {
		id := strings.TrimPrefix(rec.Key, keyDevices)
		var d deviceDoc
		if err := decodeRecord(rec.Key, rec.Value, &d, func() int { return d.Format }); err != nil {
			return Counts{}, err
		}
		c.Devices++
		if !d.Revoked.IsZero() {
			c.Revoked++
			continue
		}
		t, r := targets[id], reports[id]
		if r.Report == nil || now.Sub(r.Received) > s.cfg.StaleAfter {
			c.Stale++
		}
		st := s.derive(id, t, r)
		per[RevisionCount{Revision: st.Target, State: st.State}]++
	}
	for k, n := range per {
		k.Devices = n
		c.Revisions = append(c.Revisions, k)
	}
	slices.SortFunc(c.Revisions, func(a, b RevisionCount) int {
		return cmp.Or(cmp.Compare(a.Revision, b.Revision), strings.Compare(string(a.State), string(b.State)))
	})
	return c, nil
}

// readAll reads the records under prefix, by device ID.
func readAll[T any](ctx context.Context, st converge.Store, prefix string, format func(*T) int) (map[string]T, error) {
	recs, err := st.List(ctx, prefix)
	if err != nil {
		return nil, errf("fleet: counts: %w", err)
	}
	out := make(map[string]T, len(recs))
	for _, rec := range recs {
		var v T
		if err := decodeRecord(rec.Key, rec.Value, &v, func() int { return format(&v) }); err != nil {
			return nil, err
		}
		out[strings.TrimPrefix(rec.Key, prefix)] = v
	}
	return out, nil
}
