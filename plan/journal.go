package plan

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// How a Runner keeps a plan in a Store, so that a step costs what it
// changes and not what the plan holds:
//
//   - The head record, under planKey(id), is what Create writes (the whole
//     document) until the first stored step. From then on it is a small
//     journal: the key of a base record holding the whole document as of
//     sequence number BaseSeq, and the deltas of the steps stored since,
//     each with the next sequence number. Every stored step is one Put of
//     the head with the version read, so the head is the commit point, and
//     its history is the plan's history.
//   - Base records, under planBasePrefix + id + "/<seq>.<nonce>", are
//     written once (version 0, so never overwritten) when the journal is
//     compacted: after planJournalMaxDeltas deltas, or when the deltas
//     outgrow planJournalMaxBytes or the base itself. A base becomes the
//     plan's only once the head that names it (with its version) is
//     stored; the one it replaces is deleted after that. A writer whose
//     head is stale deletes the base it wrote; one that dies in between
//     leaves it behind, and the next compaction deletes it.
//
// A runner keeps the decoded document between steps and reads the head
// only (a few kilobytes) to learn whether anyone else wrote; when someone
// did, it applies their deltas, or reloads when the base changed.

// planBasePrefix prefixes the Store keys of plan base records. It is not
// under KeyPrefix, so a List of KeyPrefix returns one record per
// plan.
const planBasePrefix = "plan-base/"

// Compaction thresholds of a plan journal.
const (
	planJournalMaxDeltas = 32
	planJournalMaxBytes  = 32 << 10
)

// planJournalTag starts every journal head; a head that does not start
// with it is a whole document.
const planJournalTag = `{"planJournal":`

// planJournal is the head record of a plan stored as a base and deltas.
type planJournal struct {
	Base        string            `json:"base"`
	BaseVersion uint64            `json:"baseVersion"`
	BaseSeq     uint64            `json:"baseSeq"`
	Seq         uint64            `json:"seq"`
	Deltas      []json.RawMessage `json:"deltas"`
}

// planDelta is what one stored transition changed in a status.
type planDelta struct {
	Seq    uint64 `json:"seq"`
	State  State  `json:"state"`
	Reason string `json:"reason,omitempty"`
	Abort  string `json:"abort,omitempty"`
	// N is the number of commands of the status after the transition.
	N        int                `json:"n"`
	Commands []planCommandDelta `json:"commands,omitempty"`
}

// planCommandDelta is the change of one command's status: the whole
// status (Full) when its targets changed shape, else its state, its reason
// and start time when they changed, and the targets that changed.
type planCommandDelta struct {
	Index   int               `json:"i"`
	Full    *CommandStatus    `json:"full,omitempty"`
	State   State             `json:"state,omitempty"`
	Reason  *string           `json:"reason,omitempty"`
	Started *time.Time        `json:"started,omitempty"`
	Targets []planTargetDelta `json:"targets,omitempty"`
}

// planTargetDelta is the new status of the target at Index in Group, with
// short keys: deltas are written at every step.
type planTargetDelta struct {
	Group   string      `json:"g"`
	Index   int         `json:"i"`
	Name    string      `json:"n"`
	State   TargetState `json:"s"`
	Reason  string      `json:"r,omitempty"`
	Attempt int         `json:"a,omitempty"`
	Updated time.Time   `json:"t"`
}

// planStored is a plan as a runner last read or wrote it.
type planStored struct {
	id  string
	doc *Document
	// version is the head's store version.
	version uint64
	// journal is the head when it is a journal; Base is "" while the head
	// holds the whole document.
	journal planJournal
	// deltaBytes is the size of journal.Deltas; baseBytes of the base
	// document.
	deltaBytes, baseBytes int
	// fixed is the encoding of the document without its status and closing
	// brace (see planEncodeBase), once a compaction made it.
	fixed []byte
	// spare, when not nil, is a private copy of doc.Status for the next
	// step to work on: a step does not copy the whole status, and after a
	// stored step the replaced status, brought up to date with the delta,
	// becomes the spare.
	spare *Status
}

func planBaseKey(id string, seq uint64) string {
	var nonce [6]byte
	_, _ = rand.Read(nonce[:])
	return planBasePrefix + id + "/" + strconv.FormatUint(seq, 10) + "." + hex.EncodeToString(nonce[:])
}

// planBaseSeq returns the sequence number of a base key of plan id, or
// false when key is not one (another plan's, whose ID has id as prefix).
func planBaseSeq(id, key string) (uint64, bool) {
	rest, ok := strings.CutPrefix(key, planBasePrefix+id+"/")
	if !ok || strings.Contains(rest, "/") {
		return 0, false
	}
	n, _, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, false
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	return seq, err == nil
}

// planCorrupt reports a stored plan that cannot be read back.
func planCorrupt(id, what string) error {
	return fmt.Errorf("plan: stored plan %q: %w", id, bare(&DecodeError{Command: -1, Err: errors.New(what)}))
}

// load reads the stored plan id in full.
//
// A reader that does not hold the plan's claim (Get, a status page) can
// read a head whose base the runner holding the claim has just replaced
// and dropped (a compaction): when the base cannot be read and the head
// has moved on meanwhile, it reads the plan again.
func (r *Runner) load(ctx context.Context, id string) (*planStored, error) {
	for attempt := 0; ; attempt++ {
		rec, err := r.store.Get(ctx, planKey(id))
		if err != nil {
			return nil, err
		}
		ps, err := r.loadHead(ctx, id, rec)
		if err == nil || attempt == planLoadAttempts-1 {
			return ps, err
		}
		again, gerr := r.store.Get(ctx, planKey(id))
		if gerr != nil || again.Version == rec.Version {
			return nil, err
		}
	}
}

// planLoadAttempts bounds the reads of a plan whose head keeps moving
// while its base is read.
const planLoadAttempts = 8

// loadHead reads the plan whose head is rec, with its base when it has one.
func (r *Runner) loadHead(ctx context.Context, id string, rec converge.StoreRecord) (*planStored, error) {
	ps := &planStored{id: id, version: rec.Version}
	if !bytes.HasPrefix(rec.Value, []byte(planJournalTag)) {
		doc, err := decodePlan(rec.Value)
		if err != nil {
			return nil, fmt.Errorf("plan: stored plan %q: %w", id, bare(err))
		}
		ps.doc, ps.baseBytes = doc, len(rec.Value)
		return ps, nil
	}
	if err := planDecodeJournal(rec.Value, &ps.journal); err != nil {
		return nil, planCorrupt(id, err.Error())
	}
	base, err := r.store.Get(ctx, ps.journal.Base)
	if err != nil {
		if errors.Is(err, converge.ErrStoreNotFound) {
			return nil, planCorrupt(id, fmt.Sprintf("base record %q is missing", ps.journal.Base))
		}
		return nil, err
	}
	if base.Version != ps.journal.BaseVersion {
		return nil, planCorrupt(id, fmt.Sprintf("base record %q has version %d, the journal names %d", ps.journal.Base, base.Version, ps.journal.BaseVersion))
	}
	doc, err := decodePlan(base.Value)
	if err != nil {
		return nil, fmt.Errorf("plan: stored plan %q: %w", id, bare(err))
	}
	ps.doc, ps.baseBytes = doc, len(base.Value)
	seq := ps.journal.BaseSeq
	for _, raw := range ps.journal.Deltas {
		ps.deltaBytes += len(raw)
		if seq, err = planApplyDelta(doc, raw, seq); err != nil {
			return nil, planCorrupt(id, err.Error())
		}
	}
	if seq != ps.journal.Seq {
		return nil, planCorrupt(id, fmt.Sprintf("journal ends at %d, its head says %d", seq, ps.journal.Seq))
	}
	return ps, nil
}

// refresh brings ps up to the stored head: nothing to do when nobody else
// wrote; the other writers' deltas when they only appended to the journal
// ps has; a full load otherwise.
func (r *Runner) refresh(ctx context.Context, ps *planStored) (*planStored, error) {
	rec, err := r.store.Get(ctx, planKey(ps.id))
	if err != nil {
		return nil, err
	}
	if rec.Version == ps.version {
		return ps, nil
	}
	if ps.journal.Base != "" && bytes.HasPrefix(rec.Value, []byte(planJournalTag)) {
		var j planJournal
		if err := planDecodeJournal(rec.Value, &j); err == nil && j.Base == ps.journal.Base && j.BaseVersion == ps.journal.BaseVersion &&
			j.Seq >= ps.journal.Seq && len(j.Deltas) >= len(ps.journal.Deltas) {
			next := &planStored{id: ps.id, version: rec.Version, journal: j, baseBytes: ps.baseBytes, fixed: ps.fixed}
			doc := *ps.doc
			doc.Status = ps.doc.Status.Clone()
			seq := ps.journal.Seq
			ok := true
			for i, raw := range j.Deltas {
				next.deltaBytes += len(raw)
				if i < len(ps.journal.Deltas) {
					continue
				}
				if seq, err = planApplyDelta(&doc, raw, seq); err != nil {
					ok = false
					break
				}
			}
			if ok && seq == j.Seq {
				next.doc = &doc
				return next, nil
			}
		}
	}
	return r.loadHead(ctx, ps.id, rec)
}

func planDecodeJournal(value []byte, j *planJournal) error {
	var w struct {
		Journal *planJournal `json:"planJournal"`
	}
	if err := json.Unmarshal(value, &w); err != nil {
		return err
	}
	if w.Journal == nil || w.Journal.Base == "" {
		return errors.New("journal head without a base")
	}
	*j = *w.Journal
	return nil
}

// planApplyDelta applies the delta raw, which must have the sequence number
// after seq, to doc's status, and returns its sequence number.
func planApplyDelta(doc *Document, raw json.RawMessage, seq uint64) (uint64, error) {
	var d planDelta
	if err := json.Unmarshal(raw, &d); err != nil {
		return seq, fmt.Errorf("delta after %d: %w", seq, err)
	}
	if d.Seq != seq+1 {
		return seq, fmt.Errorf("delta %d follows %d", d.Seq, seq)
	}
	if d.N < 0 || d.N > len(doc.Spec.Commands) {
		return seq, fmt.Errorf("delta %d: %d commands for a plan of %d", d.Seq, d.N, len(doc.Spec.Commands))
	}
	if doc.Status == nil {
		doc.Status = &Status{}
	}
	return d.Seq, d.apply(doc.Status)
}

// apply makes st what d says; it fails, having changed part of st, when d
// does not fit st.
func (d *planDelta) apply(st *Status) error {
	st.State, st.Reason, st.Abort = d.State, d.Reason, d.Abort
	for len(st.Commands) < d.N {
		st.Commands = append(st.Commands, CommandStatus{})
	}
	st.Commands = st.Commands[:d.N]
	for _, cd := range d.Commands {
		if cd.Index < 0 || cd.Index >= d.N {
			return fmt.Errorf("delta %d: command %d out of range", d.Seq, cd.Index)
		}
		cs := &st.Commands[cd.Index]
		if cd.Full != nil {
			*cs = *cd.Full
			continue
		}
		cs.State = cd.State
		if cd.Reason != nil {
			cs.Reason = *cd.Reason
		}
		if cd.Started != nil {
			cs.Started = cd.Started.UTC()
		}
		for _, td := range cd.Targets {
			ts := cs.Targets[td.Group]
			if td.Index < 0 || td.Index >= len(ts) {
				return fmt.Errorf("delta %d: command %d: target %s[%d] out of range", d.Seq, cd.Index, td.Group, td.Index)
			}
			ts[td.Index] = TargetStatus{Name: td.Name, State: td.State, Reason: td.Reason, Attempt: td.Attempt,
				LastUpdatedTimestamp: td.Updated.UTC()}
		}
	}
	return nil
}

// planTargetEqual reports whether a and b are the same target status.
func planTargetEqual(a, b *TargetStatus) bool {
	return a.Name == b.Name && a.State == b.State && a.Reason == b.Reason && a.Attempt == b.Attempt &&
		a.LastUpdatedTimestamp.Equal(b.LastUpdatedTimestamp)
}

// planSameShape reports whether a and b have the same groups with the same
// targets in the same places.
func planSameShape(a, b map[string][]TargetStatus) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for g, ta := range a {
		tb, ok := b[g]
		if !ok || len(ta) != len(tb) || (ta == nil) != (tb == nil) {
			return false
		}
		for i := range ta {
			if ta[i].Name != tb[i].Name {
				return false
			}
		}
	}
	return true
}

// planDiff returns the delta from old to cur (old may be nil) and whether
// anything changed. It costs a comparison per target and an allocation per
// changed target only.
func planDiff(old, cur *Status) (planDelta, bool) {
	d := planDelta{State: cur.State, Reason: cur.Reason, Abort: cur.Abort, N: len(cur.Commands)}
	changed := old == nil || old.State != cur.State || old.Reason != cur.Reason || old.Abort != cur.Abort ||
		len(old.Commands) != len(cur.Commands)
	for i := range cur.Commands {
		c := &cur.Commands[i]
		if old == nil || i >= len(old.Commands) || old.Commands[i].ID != c.ID || old.Commands[i].Kind != c.Kind ||
			!planSameShape(old.Commands[i].Targets, c.Targets) {
			full := c.Clone()
			d.Commands = append(d.Commands, planCommandDelta{Index: i, Full: &full})
			changed = true
			continue
		}
		o := &old.Commands[i]
		cd := planCommandDelta{Index: i, State: c.State}
		if o.Reason != c.Reason {
			cd.Reason = &c.Reason
		}
		if !o.Started.Equal(c.Started) {
			cd.Started = &c.Started
		}
		for g, ts := range c.Targets {
			ots := o.Targets[g]
			for j := range ts {
				if t := &ts[j]; !planTargetEqual(&ots[j], t) {
					cd.Targets = append(cd.Targets, planTargetDelta{Group: g, Index: j, Name: t.Name, State: t.State,
						Reason: t.Reason, Attempt: t.Attempt, Updated: t.LastUpdatedTimestamp})
				}
			}
		}
		if len(cd.Targets) > 0 || o.State != c.State || cd.Reason != nil || cd.Started != nil {
			d.Commands = append(d.Commands, cd)
			changed = true
		}
	}
	return d, changed
}

// commit stores st, which differs from ps's status by d (see planDiff), as
// the status of ps's plan, with the head version ps read: as a delta on the
// journal or, when the journal is due for compaction, as a new base. On
// success ps holds the stored plan, and the status it replaced, brought up
// to date with d, becomes ps.spare; on failure (a stale version among
// others) ps is unchanged but for its cached encoding of the spec.
func (r *Runner) commit(ctx context.Context, ps *planStored, st *Status, d planDelta, hist ...converge.HistoryEntry) error {
	d.Seq = ps.journal.Seq + 1
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	doc := *ps.doc
	doc.Status = st
	j := ps.journal
	deltaBytes := ps.deltaBytes + len(raw)
	compact := j.Base == "" || len(j.Deltas)+1 > planJournalMaxDeltas || deltaBytes > planJournalMaxBytes || deltaBytes > ps.baseBytes
	baseBytes := ps.baseBytes
	var oldBase converge.StoreRecord
	if compact {
		b, fixed, err := planEncodeBase(&doc, ps.fixed)
		if err != nil {
			return err
		}
		ps.fixed = fixed
		key := planBaseKey(ps.id, d.Seq)
		v, err := r.store.Put(ctx, converge.StoreRecord{Key: key, Value: b})
		if err != nil {
			return err
		}
		oldBase = converge.StoreRecord{Key: j.Base, Version: j.BaseVersion}
		j = planJournal{Base: key, BaseVersion: v, BaseSeq: d.Seq, Seq: d.Seq}
		deltaBytes, baseBytes = 0, len(b)
	} else {
		j.Deltas = append(j.Deltas[:len(j.Deltas):len(j.Deltas)], raw)
		j.Seq = d.Seq
	}
	version, err := r.store.Put(ctx, converge.StoreRecord{Key: planKey(ps.id), Version: ps.version, Value: planEncodeJournal(&j)}, hist...)
	if err != nil {
		if compact && errors.Is(err, converge.ErrStoreStale) {
			// The head was not written, so the base is not referenced:
			// delete it, best effort (dropBases does otherwise). After
			// any other error the head may have been written.
			_ = r.store.Delete(context.WithoutCancel(ctx), j.Base, j.BaseVersion)
		}
		return err
	}
	var spare *Status
	if old := ps.doc.Status; old != nil && old != st && d.apply(old) == nil {
		spare = old
	}
	*ps = planStored{id: ps.id, doc: &doc, version: version, journal: j, deltaBytes: deltaBytes, baseBytes: baseBytes, fixed: ps.fixed, spare: spare}
	if oldBase.Key != "" {
		// Best effort: a base left behind is deleted by dropBases.
		_ = r.store.Delete(context.WithoutCancel(ctx), oldBase.Key, oldBase.Version)
	}
	return nil
}

// dropBases deletes, best effort, the base records of ps's plan that its
// head does not name and that are not newer than it: bases that a writer
// which died (or whose head was stale) between writing a base and its head
// left behind. Run calls it once, when it starts on a plan.
func (r *Runner) dropBases(ctx context.Context, ps *planStored) {
	if ps.journal.Base == "" {
		return
	}
	recs, err := r.store.List(ctx, planBasePrefix+ps.id+"/")
	if err != nil {
		return
	}
	for _, rec := range recs {
		if s, ok := planBaseSeq(ps.id, rec.Key); ok && s <= ps.journal.Seq && rec.Key != ps.journal.Base {
			_ = r.store.Delete(ctx, rec.Key, rec.Version)
		}
	}
}

// planEncodeJournal writes a journal head, reusing the deltas' encodings.
func planEncodeJournal(j *planJournal) []byte {
	key, _ := json.Marshal(j.Base)
	n := len(planJournalTag) + len(key) + 96
	for _, d := range j.Deltas {
		n += len(d) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, planJournalTag...)
	b = append(b, `{"base":`...)
	b = append(b, key...)
	b = append(b, `,"baseVersion":`...)
	b = strconv.AppendUint(b, j.BaseVersion, 10)
	b = append(b, `,"baseSeq":`...)
	b = strconv.AppendUint(b, j.BaseSeq, 10)
	b = append(b, `,"seq":`...)
	b = strconv.AppendUint(b, j.Seq, 10)
	b = append(b, `,"deltas":[`...)
	for i, d := range j.Deltas {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, d...)
	}
	return append(b, "]}}"...)
}

// planEncodeBase writes doc as JSON the way encoding/json does (decodePlan
// reads it back), with the encoding of its spec, metadata and other fields
// that steps do not change taken from fixed when it is not nil, and the
// status written directly: a compaction costs one pass over the status.
// It returns the document and its part before the status, to pass as
// fixed next time.
func planEncodeBase(doc *Document, fixed []byte) ([]byte, []byte, error) {
	if fixed == nil {
		head := *doc
		head.Status = nil
		b, err := json.Marshal(&head)
		if err != nil {
			return nil, nil, err
		}
		fixed = b[:len(b)-1] // without the closing brace
	}
	out := make([]byte, 0, len(fixed)+planStatusSizeHint(doc.Status))
	out = append(out, fixed...)
	if doc.Status != nil {
		out = append(out, `,"status":`...)
		out = planAppendStatus(out, doc.Status)
	}
	out = append(out, '}')
	if bytes.IndexByte(out[len(fixed):], '!') >= 0 && !json.Valid(out) {
		return nil, nil, fmt.Errorf("plan: %q: a status timestamp is outside years 0 to 9999", doc.Spec.ID)
	}
	return out, fixed, nil
}

func planStatusSizeHint(st *Status) int {
	if st == nil {
		return 0
	}
	n := 64
	for i := range st.Commands {
		for _, ts := range st.Commands[i].Targets {
			n += 128 * len(ts)
		}
	}
	return n
}

// planAppendStatus appends the JSON of st, as Status.MarshalJSON
// writes it.
func planAppendStatus(b []byte, st *Status) []byte {
	b = append(b, `{"state":`...)
	b = planAppendString(b, string(st.State.normal()))
	if st.Reason != "" {
		b = append(b, `,"reason":`...)
		b = planAppendString(b, st.Reason)
	}
	if st.Abort != "" {
		b = append(b, `,"abort":`...)
		b = planAppendString(b, st.Abort)
	}
	b = append(b, `,"commands":[`...)
	for i := range st.Commands {
		if i > 0 {
			b = append(b, ',')
		}
		b = planAppendCommandStatus(b, &st.Commands[i])
	}
	return append(b, "]}"...)
}

// planAppendCommandStatus appends the JSON of cs, as
// CommandStatus.MarshalJSON writes it.
func planAppendCommandStatus(b []byte, cs *CommandStatus) []byte {
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, int64(cs.ID), 10)
	b = append(b, `,"state":`...)
	b = planAppendString(b, string(cs.State.normal()))
	if cs.Reason != "" {
		b = append(b, `,"description":`...)
		b = planAppendString(b, cs.Reason)
	}
	if !cs.Started.IsZero() {
		b = append(b, `,"startedTimestamp":`...)
		b = planAppendTime(b, cs.Started)
	}
	if cs.Kind != "" {
		b = append(b, ',')
		b = planAppendString(b, cs.Kind)
		b = append(b, ":{"...)
		for gi, g := range planSortedKeys(cs.Targets) {
			if gi > 0 {
				b = append(b, ',')
			}
			b = planAppendString(b, g)
			b = append(b, ":["...)
			for i := range cs.Targets[g] {
				if i > 0 {
					b = append(b, ',')
				}
				b = planAppendTarget(b, &cs.Targets[g][i])
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// planAppendTarget appends the JSON of t, as encoding/json writes it.
func planAppendTarget(b []byte, t *TargetStatus) []byte {
	b = append(b, `{"name":`...)
	b = planAppendString(b, t.Name)
	b = append(b, `,"state":`...)
	b = planAppendString(b, string(t.State))
	if t.Reason != "" {
		b = append(b, `,"reason":`...)
		b = planAppendString(b, t.Reason)
	}
	if t.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(t.Attempt), 10)
	}
	b = append(b, `,"lastUpdatedTimestamp":`...)
	b = planAppendTime(b, t.LastUpdatedTimestamp)
	return append(b, '}')
}

// planAppendString appends s as a JSON string; encoding/json writes the
// strings that need escaping.
func planAppendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// planAppendTime appends t as time.Time.MarshalJSON writes it. A year
// that RFC 3339 cannot hold is written as "!", which is not JSON, so that
// the document fails to store (as encoding/json fails to write it).
func planAppendTime(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		return append(b, '!')
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
