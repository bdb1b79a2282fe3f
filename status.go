package converge

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/bits"
	"strconv"
	"strings"
	"time"
)

// This file holds the configuration/state loop: an edge agent
// turns a walk's Report into an EdgeReport, and a central service derives a
// StatusReport from the Desired it asked for and that EdgeReport.
// status_json.go holds the JSON wire format of the three documents.

// EdgeState is what an edge agent reports for one item: the state it
// detected, or the reason it could not reach the state it was asked for.
//
// The zero value is EdgeNotReported, which only appears in a StatusItem
// (the edge has not reported the item for the current revision); an
// EdgeReport never carries it.
type EdgeState uint8

const (
	// EdgeNotReported means there is no report of the item for the current
	// revision. It is not valid inside an EdgeReport.
	EdgeNotReported EdgeState = iota
	// EdgePresent means the item was found converged to its goal.
	EdgePresent
	// EdgeAbsent means the item was found converged to its clean state.
	EdgeAbsent
	// EdgeCheckPresentFailed means discovering the item, computing its goal
	// or checking it failed while it was to be made present, before the
	// change or while verifying it (the detected state is unknown).
	EdgeCheckPresentFailed
	// EdgeCheckAbsentFailed means discovering the item, computing its clean
	// state or checking it failed while it was to be made absent, before
	// the change or while verifying it (the detected state is unknown).
	EdgeCheckAbsentFailed
	// EdgeCreatingFailed means Apply failed, or verification read the item
	// and found it still not converged, while it was to be made present.
	EdgeCreatingFailed
	// EdgeRemovingFailed means Apply failed, or verification read the item
	// and found it still not converged, while it was to be made absent.
	EdgeRemovingFailed
	// EdgeWaitingForDependencies means the item was not run because items
	// it waits for (EdgeItem.WaitingFor) did not finish.
	EdgeWaitingForDependencies
	// EdgeNotRun means the walk was cancelled (or stopped by fail-fast)
	// before the item started: the edge did not look at it. The central
	// side treats it like a missing report (Creating or Removing).
	EdgeNotRun
)

var edgeStateNames = [...]string{
	"not-reported", "present", "absent", "check-present-failed", "check-absent-failed",
	"creating-failed", "removing-failed", "waiting-for-dependencies", "not-run",
}

// String returns the stable lower-case wire name of the state, for example
// "creating-failed".
func (s EdgeState) String() string {
	if int(s) < len(edgeStateNames) {
		return edgeStateNames[s]
	}
	return fmt.Sprintf("edge-state(%d)", uint8(s))
}

// Valid reports whether s is one of the declared EdgeState values.
func (s EdgeState) Valid() bool { return int(s) < len(edgeStateNames) }

// Failed reports whether s is one of the four failure kinds.
func (s EdgeState) Failed() bool {
	switch s {
	case EdgeCheckPresentFailed, EdgeCheckAbsentFailed, EdgeCreatingFailed, EdgeRemovingFailed:
		return true
	}
	return false
}

// Detected returns what the edge detected when it reported s: present for
// EdgePresent and
// EdgeRemovingFailed (it is still there), absent for EdgeAbsent and
// EdgeCreatingFailed (it is not there yet), unknown for everything else.
func (s EdgeState) Detected() EdgeDetected {
	switch s {
	case EdgePresent, EdgeRemovingFailed:
		return EdgeDetectedPresent
	case EdgeAbsent, EdgeCreatingFailed:
		return EdgeDetectedAbsent
	}
	return EdgeDetectedUnknown
}

// MarshalText encodes s as its wire name; an undeclared value is an error.
func (s EdgeState) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, &StatusFieldError{Doc: "edge state", Value: s.String(), Err: ErrStatusUnknownValue}
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a wire name; an unknown name is a *StatusFieldError
// matching ErrStatusUnknownValue.
func (s *EdgeState) UnmarshalText(b []byte) error {
	v, err := parseEnum(edgeStateNames[:], string(b))
	if err != nil {
		return &StatusFieldError{Doc: "edge state", Value: string(b), Err: err}
	}
	*s = EdgeState(v)
	return nil
}

// EdgeDetected is the presence an edge detected for an item. The zero value
// is EdgeDetectedUnknown.
type EdgeDetected uint8

const (
	// EdgeDetectedUnknown means the edge could not tell (or did not look).
	EdgeDetectedUnknown EdgeDetected = iota
	// EdgeDetectedPresent means the item is there (converged to its goal,
	// or still there after a failed removal).
	EdgeDetectedPresent
	// EdgeDetectedAbsent means the item is not there (converged to its
	// clean state, or not there yet after a failed creation).
	EdgeDetectedAbsent
)

var edgeDetectedNames = [...]string{"unknown", "present", "absent"}

// String returns "unknown", "present" or "absent".
func (d EdgeDetected) String() string {
	if int(d) < len(edgeDetectedNames) {
		return edgeDetectedNames[d]
	}
	return fmt.Sprintf("edge-detected(%d)", uint8(d))
}

// Status is the status the central side derives for one item. The zero
// value is not a valid status: DeriveStatus never produces it and encoding
// it fails.
type Status uint8

const (
	// StatusPresent is final: the item is present as desired.
	StatusPresent Status = iota + 1
	// StatusAbsent is final: the item is absent as desired.
	StatusAbsent
	// StatusCreating is transitional: the item is to be created and the
	// edge has not reported it present yet.
	StatusCreating
	// StatusRemoving is transitional: the item is to be removed and the
	// edge has not reported it absent yet.
	StatusRemoving
	// StatusWaitingForDependencies is transitional: the edge did not run
	// the item because items it waits for did not finish.
	StatusWaitingForDependencies
	// StatusCreatingFailed is an error: creating or updating failed.
	StatusCreatingFailed
	// StatusRemovingFailed is an error: removing failed.
	StatusRemovingFailed
	// StatusCheckPresentFailed is an error: discovery or check failed for
	// an item to be made present.
	StatusCheckPresentFailed
	// StatusCheckAbsentFailed is an error: discovery or check failed for an
	// item to be made absent.
	StatusCheckAbsentFailed
)

var statusNames = [...]string{
	"", "present", "absent", "creating", "removing", "waiting-for-dependencies",
	"creating-failed", "removing-failed", "check-present-failed", "check-absent-failed",
}

// String returns the stable lower-case wire name of the status.
func (s Status) String() string {
	if s.Valid() {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Valid reports whether s is one of the declared statuses (not the zero
// value).
func (s Status) Valid() bool { return s > 0 && int(s) < len(statusNames) }

// Final reports whether s is Present or Absent.
func (s Status) Final() bool { return s == StatusPresent || s == StatusAbsent }

// Transitional reports whether s is Creating, Removing or
// WaitingForDependencies.
func (s Status) Transitional() bool {
	return s == StatusCreating || s == StatusRemoving || s == StatusWaitingForDependencies
}

// Failed reports whether s is one of the four failure statuses.
func (s Status) Failed() bool { return s >= StatusCreatingFailed && s.Valid() }

// MarshalText encodes s as its wire name; the zero value and undeclared
// values are errors.
func (s Status) MarshalText() ([]byte, error) {
	if !s.Valid() {
		return nil, &StatusFieldError{Doc: "status", Value: s.String(), Err: ErrStatusUnknownValue}
	}
	return []byte(s.String()), nil
}

// UnmarshalText decodes a wire name; an unknown name is a *StatusFieldError
// matching ErrStatusUnknownValue.
func (s *Status) UnmarshalText(b []byte) error {
	v, err := parseEnum(statusNames[1:], string(b))
	if err != nil {
		return &StatusFieldError{Doc: "status", Value: string(b), Err: err}
	}
	*s = Status(v + 1)
	return nil
}

// Attention says whether a person should look at an item. The zero value is
// AttentionNone.
type Attention uint8

const (
	// AttentionNone means nothing needs a person.
	AttentionNone Attention = iota
	// AttentionNeeded means a person should look.
	AttentionNeeded
	// AttentionMaybe means a person may want to look (for example, the edge
	// still has an item that is no longer in the configuration).
	AttentionMaybe
)

var reviewNames = [...]string{"no", "yes", "maybe"}

// String returns "no", "yes" or "maybe".
func (r Attention) String() string {
	if int(r) < len(reviewNames) {
		return reviewNames[r]
	}
	return fmt.Sprintf("review(%d)", uint8(r))
}

// Needed reports whether r is AttentionNeeded or AttentionMaybe.
func (r Attention) Needed() bool { return r == AttentionNeeded || r == AttentionMaybe }

// MarshalText encodes r as its wire name; undeclared values are errors.
func (r Attention) MarshalText() ([]byte, error) {
	if int(r) >= len(reviewNames) {
		return nil, &StatusFieldError{Doc: "review", Value: r.String(), Err: ErrStatusUnknownValue}
	}
	return []byte(r.String()), nil
}

// UnmarshalText decodes a wire name; an unknown name is a *StatusFieldError
// matching ErrStatusUnknownValue.
func (r *Attention) UnmarshalText(b []byte) error {
	v, err := parseEnum(reviewNames[:], string(b))
	if err != nil {
		return &StatusFieldError{Doc: "review", Value: string(b), Err: err}
	}
	*r = Attention(v)
	return nil
}

func parseEnum(names []string, s string) (int, error) {
	for i, n := range names {
		if n == s {
			return i, nil
		}
	}
	return 0, ErrStatusUnknownValue
}

// StatusFieldError names the document and field that made a status
// document invalid, with the offending value. It matches ErrStatusInvalid
// and, through Unwrap, the specific sentinel in Err.
type StatusFieldError struct {
	// Doc is the document or type: "desired config", "edge report",
	// "status report", or an enum name.
	Doc string
	// Field is the path of the field, such as "items[2].state"; empty for
	// the document itself.
	Field string
	// Value is the offending value, when there is one.
	Value string
	// Err is one of the ErrStatus sentinels, possibly wrapping a cause.
	Err error
}

// Error describes the problem, naming its culprit.
func (e *StatusFieldError) Error() string {
	var b strings.Builder
	b.WriteString("converge: ")
	b.WriteString(e.Doc)
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	} else {
		b.WriteString("invalid")
	}
	if e.Value != "" {
		fmt.Fprintf(&b, " %q", e.Value)
	}
	return b.String()
}

// Is makes StatusFieldError match ErrStatusInvalid.
func (e *StatusFieldError) Is(target error) bool { return target == ErrStatusInvalid }

// Unwrap returns the specific error.
func (e *StatusFieldError) Unwrap() error { return e.Err }

// EdgeWalkError is the error of EdgeReportFrom: which item (empty for the
// whole report) could not be expressed, and why.
type EdgeWalkError struct {
	ID  ID
	Err error
}

// Error describes the problem, naming its culprit.
func (e *EdgeWalkError) Error() string {
	if e.ID == "" {
		return e.Err.Error()
	}
	return fmt.Sprintf("%v: item %q", e.Err, e.ID)
}

// Unwrap returns the ErrEdge sentinel (possibly wrapped).
func (e *EdgeWalkError) Unwrap() error { return e.Err }

// EdgeItem is the edge state of one item.
type EdgeItem struct {
	ID    ID
	State EdgeState
	// WaitingFor lists, for EdgeWaitingForDependencies, the items it waits
	// for; it is empty for every other state.
	WaitingFor []ID
	// Message is the error text of a failed or not-run item, for people.
	Message string
	// Time is when the edge observed this state: when the item's run ended,
	// or the report's time for items that did not run. Zero means unknown.
	Time time.Time
}

// Detected returns what the edge detected; see EdgeState.Detected.
func (it EdgeItem) Detected() EdgeDetected { return it.State.Detected() }

// EdgeReport is what an edge agent sends back after a walk: the edge state of
// every item it manages, and the revision of the configuration it answers.
// The zero value is invalid (revision 0); build one with EdgeReportFrom or
// fill it in and call Validate.
type EdgeReport struct {
	// Revision is the revision of the Desired the walk applied.
	Revision uint64
	// Time is when the report was made.
	Time  time.Time
	Items []EdgeItem
}

// Item returns the entry of item id.
func (r *EdgeReport) Item(id ID) (EdgeItem, bool) {
	if r == nil {
		return EdgeItem{}, false
	}
	for _, it := range r.Items {
		if it.ID == id {
			return it, true
		}
	}
	return EdgeItem{}, false
}

// Validate reports the first problem as a *StatusFieldError: revision 0, an
// empty or duplicate ID, an undeclared state or EdgeNotReported, WaitingFor
// on an item that does not wait, or an empty ID in WaitingFor.
func (r *EdgeReport) Validate() error {
	const doc = "edge report"
	if r == nil {
		return &StatusFieldError{Doc: doc, Err: ErrStatusMissingField}
	}
	if r.Revision == 0 {
		return &StatusFieldError{Doc: doc, Field: "revision", Value: "0", Err: ErrStatusNoRevision}
	}
	repeat := firstRepeatedID(len(r.Items), func(i int) ID { return r.Items[i].ID })
	for i, it := range r.Items {
		p := entryPath{"items", i}
		if err := checkID(doc, p, it.ID, repeat); err != nil {
			return err
		}
		if !it.State.Valid() || it.State == EdgeNotReported {
			return &StatusFieldError{Doc: doc, Field: p.field("state"), Value: it.State.String(), Err: ErrStatusUnknownValue}
		}
		if err := checkWaiting(doc, p, it.State, it.WaitingFor); err != nil {
			return err
		}
	}
	return nil
}

// entryPath names entry i of a document's list; the field path is built
// only when an error needs it.
type entryPath struct {
	list string
	i    int
}

// field returns the path of a field of the entry, or of the entry itself
// when name is empty.
func (e entryPath) field(name string) string {
	p := e.list + "[" + strconv.Itoa(e.i) + "]"
	if name != "" {
		p += "." + name
	}
	return p
}

// checkID reports an empty ID, or the ID of entry path.i when it repeats
// an earlier one: repeat is the index firstRepeatedID found.
func checkID(doc string, path entryPath, id ID, repeat int) error {
	if id == "" {
		return &StatusFieldError{Doc: doc, Field: path.field("id"), Err: ErrStatusEmptyID}
	}
	if path.i == repeat {
		return &StatusFieldError{Doc: doc, Field: path.field("id"), Value: string(id), Err: ErrStatusDuplicateID}
	}
	return nil
}

// idHashSeed seeds the hashes of firstRepeatedID.
var idHashSeed = maphash.MakeSeed()

// firstRepeatedID returns the least i < n for which id(i) equals id(j) for
// some j < i, or -1 when the n IDs are all different. The empty ID counts
// like any other.
func firstRepeatedID(n int, id func(int) ID) int {
	if n <= 16 {
		for i := 1; i < n; i++ {
			for j := range i {
				if id(i) == id(j) {
					return i
				}
			}
		}
		return -1
	}
	// An open-addressing table of indexes plus one, at most half full.
	size := 1 << bits.Len(uint(2*n-1))
	slots := make([]int32, size)
	mask := uint64(size - 1)
	for i := range n {
		s := id(i)
		h := maphash.String(idHashSeed, string(s)) & mask
		for {
			j := slots[h]
			if j == 0 {
				slots[h] = int32(i + 1)
				break
			}
			if id(int(j-1)) == s {
				return i
			}
			h = (h + 1) & mask
		}
	}
	return -1
}

func checkWaiting(doc string, path entryPath, s EdgeState, waiting []ID) error {
	if len(waiting) > 0 && s != EdgeWaitingForDependencies {
		return &StatusFieldError{Doc: doc, Field: path.field("waitingFor"), Value: s.String(), Err: ErrStatusInconsistent}
	}
	for j, w := range waiting {
		if w == "" {
			return &StatusFieldError{Doc: doc, Field: fmt.Sprintf("%s.waitingFor[%d]", path.field(""), j), Err: ErrStatusEmptyID}
		}
	}
	return nil
}

// EdgeReportFrom turns the Report of an Apply or Clean walk into the edge
// report answering configuration revision; at is the report's time and the
// time of items that did not run.
//
// Per item, by outcome:
//   - Unchanged, Changed: EdgePresent or EdgeAbsent, by the item's presence.
//   - Failed in PhaseDiscover, PhaseGoal or PhaseCheck: EdgeCheckPresentFailed
//     or EdgeCheckAbsentFailed; in PhaseApply or PhaseRefresh:
//     EdgeCreatingFailed or EdgeRemovingFailed.
//   - Failed in PhaseVerify, openDuT's Assert step: when the item was
//     read again and still differs (ErrNotConverged), EdgeCreatingFailed or
//     EdgeRemovingFailed; when reading it again or checking it failed, its
//     state is unknown, so EdgeCheckPresentFailed or EdgeCheckAbsentFailed,
//     as openDuT's EDGAR reports an error of the check after the change.
//   - Waiting: EdgeWaitingForDependencies with the IDs it waited for.
//   - NotRun: EdgeNotRun, because the edge never looked at the item; the
//     central side counts it as not reported yet.
//
// A dry-run report is refused with an *EdgeWalkError matching ErrEdgeDryRun:
// it changed nothing, so reporting its simulated states would claim a
// convergence that did not happen. Revision 0 is refused (ErrStatusNoRevision).
func EdgeReportFrom(rep *Report, revision uint64, at time.Time) (*EdgeReport, error) {
	switch {
	case rep == nil:
		return nil, &EdgeWalkError{Err: ErrEdgeNoReport}
	case rep.Dry:
		return nil, &EdgeWalkError{Err: fmt.Errorf("%w (%s)", ErrEdgeDryRun, rep.Mode)}
	case revision == 0:
		return nil, &StatusFieldError{Doc: "edge report", Field: "revision", Value: "0", Err: ErrStatusNoRevision}
	}
	out := &EdgeReport{Revision: revision, Time: at, Items: make([]EdgeItem, 0, len(rep.Items))}
	for _, r := range rep.Items {
		it := EdgeItem{ID: r.ID, Time: at}
		if !r.Started.IsZero() {
			it.Time = r.Started.Add(r.Duration)
		}
		present := r.Presence == Present
		switch r.Outcome {
		case OutcomeUnchanged, OutcomeChanged:
			it.State = pick(present, EdgePresent, EdgeAbsent)
		case OutcomeFailed:
			switch r.Phase {
			case PhaseDiscover, PhaseGoal, PhaseCheck:
				it.State = pick(present, EdgeCheckPresentFailed, EdgeCheckAbsentFailed)
			case PhaseApply, PhaseRefresh:
				it.State = pick(present, EdgeCreatingFailed, EdgeRemovingFailed)
			case PhaseVerify:
				if errors.Is(r.Err, ErrNotConverged) {
					it.State = pick(present, EdgeCreatingFailed, EdgeRemovingFailed)
				} else {
					it.State = pick(present, EdgeCheckPresentFailed, EdgeCheckAbsentFailed)
				}
			default:
				return nil, &EdgeWalkError{ID: r.ID, Err: fmt.Errorf("%w: failed in phase %s", ErrEdgeBadOutcome, r.Phase)}
			}
			it.Message = itemMessage(r.Err)
		case OutcomeWaiting:
			it.State = EdgeWaitingForDependencies
			it.WaitingFor = append([]ID(nil), r.WaitingFor...)
		case OutcomeNotRun, outcomePending:
			it.State = EdgeNotRun
			it.Message = itemMessage(r.Err)
		default:
			return nil, &EdgeWalkError{ID: r.ID, Err: fmt.Errorf("%w: outcome %s", ErrEdgeBadOutcome, r.Outcome)}
		}
		out.Items = append(out.Items, it)
	}
	if err := out.Validate(); err != nil {
		return nil, err
	}
	return out, nil
}

func pick[T any](cond bool, a, b T) T {
	if cond {
		return a
	}
	return b
}

// itemMessage is the item's own error text, without the "item X: phase:"
// prefix the ID and state already say.
func itemMessage(err error) string {
	if err == nil {
		return ""
	}
	var ie *ItemError
	if errors.As(err, &ie) && ie.Err != nil {
		return ie.Err.Error()
	}
	return err.Error()
}

// DesiredItem is one entry of a desired configuration.
type DesiredItem struct {
	ID       ID
	Presence Presence
}

// Desired is what the central side asks an edge to converge to: items
// with their presence, under a revision. Items keep their order, which is the
// order of the derived status. The zero value is invalid (revision 0).
type Desired struct {
	// Revision identifies this configuration; it starts at 1 and grows
	// with every change.
	Revision uint64
	Items    []DesiredItem
}

// Validate reports the first problem as a *StatusFieldError: revision 0, an
// empty or duplicate ID, or an undeclared presence.
func (c Desired) Validate() error {
	const doc = "desired config"
	if c.Revision == 0 {
		return &StatusFieldError{Doc: doc, Field: "revision", Value: "0", Err: ErrStatusNoRevision}
	}
	repeat := firstRepeatedID(len(c.Items), func(i int) ID { return c.Items[i].ID })
	for i, it := range c.Items {
		p := entryPath{"items", i}
		if err := checkID(doc, p, it.ID, repeat); err != nil {
			return err
		}
		if it.Presence != Present && it.Presence != Absent {
			return &StatusFieldError{Doc: doc, Field: p.field("presence"), Value: it.Presence.String(), Err: ErrStatusUnknownValue}
		}
	}
	return nil
}

// StatusItem is the derived status of one item of the desired configuration.
type StatusItem struct {
	ID      ID
	Desired Presence
	// Edge is what the edge reported for the current revision, or
	// EdgeNotReported.
	Edge      EdgeState
	Status    Status
	Attention Attention
	// WaitingFor, Message and Time come from the edge report.
	WaitingFor []ID
	Message    string
	Time       time.Time
}

// Detected returns what the edge detected; see EdgeState.Detected.
func (it StatusItem) Detected() EdgeDetected { return it.Edge.Detected() }

// StatusDropped is an item the edge reported that is not in the desired
// configuration. It is left out of the status; Attention says whether a person
// should look (the edge may still hold it, or failed to remove it).
type StatusDropped struct {
	ID        ID
	Edge      EdgeState
	Attention Attention
	Message   string
	Time      time.Time
}

// StatusReport is the derived status of a desired configuration: one
// StatusItem per desired item, in configuration order, and the dropped
// entries of the edge report, in report order. Build one with DeriveStatus.
type StatusReport struct {
	// Revision is the revision of the desired configuration.
	Revision uint64
	// EdgeRevision is the revision of the edge report considered, 0 when
	// there was none.
	EdgeRevision uint64
	// Reported is true when the edge report answered Revision and was used.
	// A report for another revision is ignored: every item then counts as
	// not reported yet.
	Reported bool
	// EdgeTime is the time of the edge report considered (zero if none).
	EdgeTime time.Time
	Items    []StatusItem
	Dropped  []StatusDropped
}

// DeriveItemStatus returns the status and review flag of an item desired
// with presence p in the configuration for which the edge reported e
// (EdgeNotReported when it has not reported it for the current revision),
// by this table:
//
//	desired  edge reports                  status                        review
//	present  EdgePresent                   StatusPresent                 no
//	absent   EdgeAbsent                    StatusAbsent                  no
//	present  EdgeAbsent                    StatusCreating                no
//	absent   EdgePresent                   StatusRemoving                no
//	present  EdgeCreatingFailed            StatusCreatingFailed          yes
//	absent   EdgeRemovingFailed            StatusRemovingFailed          yes
//	present  EdgeCheckPresentFailed        StatusCheckPresentFailed      yes
//	absent   EdgeCheckAbsentFailed         StatusCheckAbsentFailed       yes
//	either   EdgeWaitingForDependencies    StatusWaitingForDependencies  no
//	present  EdgeNotReported               StatusCreating                no
//	absent   EdgeNotReported               StatusRemoving                no
//
// Beyond the table: EdgeNotRun counts as not reported (Creating or
// Removing, no review), since the edge did not look at the item. A failure
// the edge reports is never hidden: when it belongs to the opposite presence
// (desired present, edge reports EdgeRemovingFailed or
// EdgeCheckAbsentFailed, or the mirror cases), the status is that failure
// and needs review, because the edge acted against the configuration it
// claims to answer. An undeclared presence or edge state yields the zero
// Status and AttentionNeeded.
func DeriveItemStatus(p Presence, e EdgeState) (Status, Attention) {
	if p != Present && p != Absent {
		return 0, AttentionNeeded
	}
	present := p == Present
	switch e {
	case EdgeNotReported, EdgeNotRun:
		return pick(present, StatusCreating, StatusRemoving), AttentionNone
	case EdgePresent:
		return pick(present, StatusPresent, StatusRemoving), AttentionNone
	case EdgeAbsent:
		return pick(present, StatusCreating, StatusAbsent), AttentionNone
	case EdgeWaitingForDependencies:
		return StatusWaitingForDependencies, AttentionNone
	case EdgeCreatingFailed:
		return StatusCreatingFailed, AttentionNeeded
	case EdgeRemovingFailed:
		return StatusRemovingFailed, AttentionNeeded
	case EdgeCheckPresentFailed:
		return StatusCheckPresentFailed, AttentionNeeded
	case EdgeCheckAbsentFailed:
		return StatusCheckAbsentFailed, AttentionNeeded
	}
	return 0, AttentionNeeded
}

// DroppedAttention says, for an item the edge reports that is not in the
// desired configuration (its status is dropped), whether a person should
// look. EdgeAbsent needs none; EdgePresent maybe (the edge still holds
// something nobody asked for); every failure yes. Besides,
// EdgeWaitingForDependencies and EdgeNotRun need none: the edge did nothing
// with the item. An undeclared state needs review.
func (e EdgeState) DroppedAttention() Attention {
	switch e {
	case EdgeAbsent, EdgeWaitingForDependencies, EdgeNotRun, EdgeNotReported:
		return AttentionNone
	case EdgePresent:
		return AttentionMaybe
	}
	return AttentionNeeded
}

// DeriveStatus derives the status of every item of desired from the edge
// report edge, by DeriveItemStatus. A nil edge, or one whose revision is not
// desired.Revision (older or newer), counts as no report: every item is
// Creating or Removing. Items the edge reports that are not in desired are
// dropped: left out of the items, logged, and listed in Dropped with their
// review flag (EdgeState.DroppedAttention).
//
// logger receives one record per dropped entry (Warn when it needs review,
// Info otherwise) and one Info record when a report is ignored for its
// revision; nil means slog.Default(). Pass slog.New(slog.DiscardHandler) to
// log nothing.
//
// DeriveStatus fails with a *StatusFieldError when desired or edge is
// invalid (see their Validate methods); it then returns no report.
func DeriveStatus(desired Desired, edge *EdgeReport, logger *slog.Logger) (*StatusReport, error) {
	if err := desired.Validate(); err != nil {
		return nil, err
	}
	if edge != nil {
		if err := edge.Validate(); err != nil {
			return nil, err
		}
	}
	if logger == nil {
		logger = slog.Default()
	}
	ctx := context.Background()
	out := &StatusReport{Revision: desired.Revision, Items: make([]StatusItem, 0, len(desired.Items))}
	var reported map[ID]EdgeItem
	if edge != nil {
		out.EdgeRevision, out.EdgeTime = edge.Revision, edge.Time
		if edge.Revision == desired.Revision {
			out.Reported = true
			reported = make(map[ID]EdgeItem, len(edge.Items))
			for _, it := range edge.Items {
				reported[it.ID] = it
			}
		} else {
			logger.LogAttrs(ctx, slog.LevelInfo, "converge: edge report ignored: it answers another revision",
				slog.Uint64("revision", desired.Revision), slog.Uint64("edge_revision", edge.Revision))
		}
	}
	wanted := make(map[ID]struct{}, len(desired.Items))
	for _, d := range desired.Items {
		wanted[d.ID] = struct{}{}
		si := StatusItem{ID: d.ID, Desired: d.Presence}
		if e, ok := reported[d.ID]; ok {
			si.Edge = e.State
			si.WaitingFor = append([]ID(nil), e.WaitingFor...)
			si.Message, si.Time = e.Message, e.Time
		}
		si.Status, si.Attention = DeriveItemStatus(si.Desired, si.Edge)
		out.Items = append(out.Items, si)
	}
	if out.Reported {
		for _, e := range edge.Items {
			if _, ok := wanted[e.ID]; ok {
				continue
			}
			dr := StatusDropped{ID: e.ID, Edge: e.State, Attention: e.State.DroppedAttention(), Message: e.Message, Time: e.Time}
			out.Dropped = append(out.Dropped, dr)
			level := slog.LevelInfo
			if dr.Attention.Needed() {
				level = slog.LevelWarn
			}
			logger.LogAttrs(ctx, level, "converge: dropped edge entry not in the desired configuration",
				slog.String("id", string(dr.ID)), slog.String("edge", dr.Edge.String()),
				slog.String("review", dr.Attention.String()), slog.Uint64("revision", desired.Revision))
		}
	}
	return out, nil
}

// Item returns the status of item id.
func (s *StatusReport) Item(id ID) (StatusItem, bool) {
	if s == nil {
		return StatusItem{}, false
	}
	for _, it := range s.Items {
		if it.ID == id {
			return it, true
		}
	}
	return StatusItem{}, false
}

// Ready reports whether every item is final (Present or Absent). A
// configuration without items is ready; a nil report is not.
func (s *StatusReport) Ready() bool {
	if s == nil {
		return false
	}
	for _, it := range s.Items {
		if !it.Status.Final() {
			return false
		}
	}
	return true
}

// Transitional returns the IDs of the items that are Creating, Removing or
// WaitingForDependencies, in configuration order.
func (s *StatusReport) Transitional() []ID {
	return s.ids(func(it StatusItem) bool { return it.Status.Transitional() })
}

// Failed returns the IDs of the items in one of the four failure statuses.
func (s *StatusReport) Failed() []ID {
	return s.ids(func(it StatusItem) bool { return it.Status.Failed() })
}

// NeedsAttention returns the IDs that need a person (AttentionNeeded or AttentionMaybe):
// first the items, in configuration order, then the dropped entries, in
// report order.
func (s *StatusReport) NeedsAttention() []ID {
	out := s.ids(func(it StatusItem) bool { return it.Attention.Needed() })
	if s != nil {
		for _, d := range s.Dropped {
			if d.Attention.Needed() {
				out = append(out, d.ID)
			}
		}
	}
	return out
}

func (s *StatusReport) ids(keep func(StatusItem) bool) []ID {
	if s == nil {
		return nil
	}
	var out []ID
	for _, it := range s.Items {
		if keep(it) {
			out = append(out, it.ID)
		}
	}
	return out
}

// Count returns the number of items with status st.
func (s *StatusReport) Count(st Status) int {
	return len(s.ids(func(it StatusItem) bool { return it.Status == st }))
}

// Summary renders the report on one line for a person, for example
// "revision 4: not ready: 3 items: 1 present, 1 waiting-for-dependencies,
// 1 creating-failed; needs review: db". It names the items that need review
// and counts dropped entries; when the edge report answered another revision
// it says so.
func (s *StatusReport) Summary() string {
	if s == nil {
		return "no status"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "revision %d: %s: %d items", s.Revision, pick(s.Ready(), "ready", "not ready"), len(s.Items))
	sep := ": "
	for st := StatusPresent; int(st) < len(statusNames); st++ {
		if n := s.Count(st); n > 0 {
			fmt.Fprintf(&b, "%s%d %s", sep, n, st)
			sep = ", "
		}
	}
	switch {
	case s.Reported:
	case s.EdgeRevision != 0:
		fmt.Fprintf(&b, "; edge report is for revision %d", s.EdgeRevision)
	default:
		b.WriteString("; no edge report")
	}
	if r := s.NeedsAttention(); len(r) > 0 {
		fmt.Fprintf(&b, "; needs review: %s", joinIDs(r))
	}
	if n := len(s.Dropped); n > 0 {
		fmt.Fprintf(&b, "; %d dropped", n)
	}
	return b.String()
}
