package converge

import (
	"errors"
	"fmt"
)

// DefaultMaxDocumentBytes is the largest document, in bytes, that the
// decoders of documents from outside the process read unless told
// otherwise (DecodeLimits): edge reports, desired configurations and status
// reports here, plan documents in the plan and autopilot packages. It
// holds an edge report of about 250,000 items, or a plan of 10,000 targets
// many times over.
const DefaultMaxDocumentBytes = 8 << 20

// ErrTooLarge is matched by every *LimitError: a document is larger than
// the decoder's cap and was not decoded.
var ErrTooLarge = errors.New("converge: document too large")

// DecodeLimits caps what a decoder reads from outside the process. The
// cap is checked before anything is decoded, so a document too large costs
// nothing but its bytes. The zero value holds the defaults.
type DecodeLimits struct {
	// MaxBytes is the largest document read, in bytes: 0 means
	// DefaultMaxDocumentBytes, and a negative value means no cap (for
	// documents the program trusts).
	MaxBytes int64
}

// Check returns a *LimitError when a document of n bytes is larger than
// l allows; doc names the document in the error ("edge report").
func (l DecodeLimits) Check(doc string, n int) error {
	limit := l.MaxBytes
	if limit == 0 {
		limit = DefaultMaxDocumentBytes
	}
	if limit > 0 && int64(n) > limit {
		return &LimitError{Doc: doc, Limit: "MaxBytes", Max: limit, Size: int64(n)}
	}
	return nil
}

// LimitError reports a document larger than its decoder's cap. It matches
// ErrTooLarge.
type LimitError struct {
	// Doc names the document ("edge report"); it is empty when the error
	// is wrapped by one that names it.
	Doc string
	// Limit names the cap (the DecodeLimits field): "MaxBytes".
	Limit string
	// Max is the cap and Size what the document had.
	Max, Size int64
}

// Error describes the problem, naming the cap.
func (e *LimitError) Error() string {
	doc := ""
	if e.Doc != "" {
		doc = e.Doc + ": "
	}
	return fmt.Sprintf("converge: %s%d bytes, more than the limit of %d (DecodeLimits.%s)", doc, e.Size, e.Max, e.Limit)
}

// Is makes LimitError match ErrTooLarge.
func (e *LimitError) Is(target error) bool { return target == ErrTooLarge }
