package fleet

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/internal/wire"
)

// FormatVersion is the format version of the records the fleet server
// keeps in its converge.Store (devices, targets, reports). A record of
// another version is refused with a *FormatError.
const FormatVersion = 1

// The prefixes of the fleet's keys in the store; the device ID follows.
const (
	keyDevices = "fleet/devices/"
	keyTargets = "fleet/targets/"
	keyReports = "fleet/reports/"
)

// MaxDeviceID is the longest device ID, in bytes.
const MaxDeviceID = 63

// CheckDeviceID returns a *RequestError (Field "device") unless id is 1 to
// MaxDeviceID ASCII letters, digits, '-', '_' or '.', and not "." or "..".
// Device IDs appear in URLs and store keys, so nothing else is accepted.
func CheckDeviceID(id string) error {
	bad := func(reason string) error { return &RequestError{Field: "device", Reason: reason} }
	switch {
	case id == "":
		return bad("empty ID")
	case len(id) > MaxDeviceID:
		return bad(fmt.Sprintf("ID longer than %d bytes", MaxDeviceID))
	case id == "." || id == "..":
		return bad(fmt.Sprintf("ID %q is reserved", id))
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return bad(fmt.Sprintf("ID has character %q at offset %d", c, i))
		}
	}
	return nil
}

// tokenBytes is the entropy of a device credential: 256 bits.
const tokenBytes = 32

// newToken returns a fresh credential of device id and its SHA-256 hash:
// the ID, a dot, and 256 random bits in unpadded base64url. The credential
// is shown once, to the enrolling program; only the hash is stored.
func newToken(id string) (token string, hash [sha256.Size]byte) {
	b := make([]byte, tokenBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+).
	token = id + "." + base64.RawURLEncoding.EncodeToString(b)
	return token, sha256.Sum256([]byte(token))
}

// tokenMatches compares the hash of token with want in constant time.
func tokenMatches(token string, want []byte) bool {
	h := sha256.Sum256([]byte(token))
	return subtle.ConstantTimeCompare(h[:], want) == 1
}

// deviceDoc is the stored form of an enrolled device.
type deviceDoc struct {
	Format int `json:"format"`
	// TokenSHA256 is the hex SHA-256 of the device's credential.
	TokenSHA256 string    `json:"token_sha256"`
	Enrolled    time.Time `json:"enrolled"`
	Revoked     time.Time `json:"revoked,omitzero"`
	// Labels are the device's labels, given at enrolment.
	Labels map[string]string `json:"labels,omitempty"`
}

func (d deviceDoc) hash() []byte {
	b, err := hex.DecodeString(d.TokenSHA256)
	if err != nil || len(b) != sha256.Size {
		return nil // matches nothing
	}
	return b
}

// targetDoc is the stored form of a device's target; its wire form is the
// body of the target a device reads.
type targetDoc struct {
	Format  int              `json:"format"`
	Desired converge.Desired `json:"desired"`
	Payload json.RawMessage  `json:"payload,omitempty"`
	Set     time.Time        `json:"set"`
	// TraceParent is the W3C traceparent of the span that set the target
	// (Server.SetTarget's context), "" for none.
	TraceParent string `json:"traceparent,omitempty"`
}

// reportDoc is the stored form of a device's latest report.
type reportDoc struct {
	Format   int                  `json:"format"`
	Received time.Time            `json:"received"`
	Report   *converge.EdgeReport `json:"report"`
}

// decodeRecord reads a stored record strictly and checks its format.
func decodeRecord(key string, b []byte, v any, format func() int) error {
	if pr := wire.Decode(b, v); pr != nil {
		return &FormatError{Key: key, Err: fmt.Errorf("%s: %w", pr.Path, pr.Err)}
	}
	if f := format(); f != FormatVersion {
		return &FormatError{Key: key, Err: fmt.Errorf("format %d, want %d", f, FormatVersion)}
	}
	return nil
}

// Target is what a device is asked to converge to: the desired items the
// server derives the device's status against, under the target's
// revision, and a payload the device's agent turns into its own target (a
// TargetReconciler's T, as JSON). The server gives each target of a device
// the next revision (Desired.Revision), one more than the last, so the
// revisions of a device only grow, across server replicas and restarts.
//
// Target is also the target type of a device's converge.TargetReconciler
// under an Agent: stored with the reconciler's target, the server's
// revision (Desired.Revision) survives a restart, and is the ETag the
// agent resumes its long poll with.
type Target struct {
	Desired converge.Desired `json:"desired"`
	// Payload is an opaque JSON document for the agent; nil sends none.
	Payload json.RawMessage `json:"payload,omitempty"`
	// TraceParent is the W3C traceparent of the span under which the
	// server set the target (Server.SetTarget with a context carrying a
	// converge.Tracer and its span), as a device receives it; SetTarget
	// ignores it. A device's reconciler makes its passes children of it
	// with TargetReconcilerConfig.TraceParent set to TargetTraceParent.
	TraceParent string `json:"traceparent,omitempty"`
}

// MaxTraceParent caps the length of a target's TraceParent (a version 00
// traceparent has 55 characters).
const MaxTraceParent = 256

// TargetTraceParent returns t.TraceParent: the function a device's
// TargetReconcilerConfig[Target].TraceParent takes, so that its passes
// join the trace of the server's span that set their target.
func TargetTraceParent(t Target) string { return t.TraceParent }

// DecodeTarget reads the body of a target as a device receives it
// (GET .../target), strictly: unknown or repeated fields, invalid UTF-8,
// trailing data and a document larger than lim allows are refused with a
// *RequestError naming the culprit (wrapping a *converge.LimitError for
// the size).
func DecodeTarget(b []byte, lim converge.DecodeLimits) (Target, error) {
	if err := lim.Check("target", len(b)); err != nil {
		return Target{}, &RequestError{Field: "target", Err: err}
	}
	var d targetDoc
	if pr := wire.Decode(b, &d); pr != nil {
		return Target{}, &RequestError{Field: "target" + dotPath(pr.Path), Err: pr.Err}
	}
	if d.Format != FormatVersion {
		return Target{}, &RequestError{Field: "target.format", Reason: fmt.Sprintf("format %d, want %d", d.Format, FormatVersion)}
	}
	if err := d.Desired.Validate(); err != nil {
		return Target{}, &RequestError{Field: "target.desired", Err: err}
	}
	if len(d.TraceParent) > MaxTraceParent {
		return Target{}, &RequestError{Field: "target.traceparent", Reason: fmt.Sprintf("%d bytes, at most %d", len(d.TraceParent), MaxTraceParent)}
	}
	return Target{Desired: d.Desired, Payload: d.Payload, TraceParent: d.TraceParent}, nil
}

// dotPath joins a document path to its prefix.
func dotPath(p string) string {
	if p == "" {
		return ""
	}
	return "." + p
}

// setTargetIn is the body of the server's own PUT of a device's target.
type setTargetIn struct {
	Items   json.RawMessage `json:"items"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// decodeSetTarget reads the body of an API request setting a target.
func decodeSetTarget(b []byte, lim converge.DecodeLimits) (Target, error) {
	if err := lim.Check("target request", len(b)); err != nil {
		return Target{}, &RequestError{Field: "body", Err: err}
	}
	var in setTargetIn
	if pr := wire.Decode(b, &in); pr != nil {
		return Target{}, &RequestError{Field: "body" + dotPath(pr.Path), Err: pr.Err}
	}
	if in.Items == nil {
		return Target{}, &RequestError{Field: "body.items", Reason: "missing"}
	}
	// The items are read by the core's desired decoder, under a revision
	// the server replaces.
	doc := append(append([]byte(`{"revision":1,"items":`), in.Items...), '}')
	d, err := converge.DecodeDesired(doc, converge.DecodeLimits{MaxBytes: -1})
	if err != nil {
		return Target{}, &RequestError{Field: "body.items", Err: err}
	}
	return Target{Desired: converge.Desired{Items: d.Items}, Payload: in.Payload}, nil
}

// errorBody is the JSON body of every error answer.
type errorBody struct {
	Error string `json:"error"`
}
