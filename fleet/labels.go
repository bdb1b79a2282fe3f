package fleet

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// enrolIn is the optional body of the API's enrolment of a device.
type enrolIn struct {
	Labels map[string]string `json:"labels,omitempty"`
}

// MaxLabels is the most labels a device may carry; MaxLabelLen the
// longest label key or value, in bytes.
const (
	MaxLabels   = 64
	MaxLabelLen = 63
)

// CheckLabels returns a *RequestError (Field "labels.<key>") unless
// labels has at most MaxLabels entries whose keys are 1 to MaxLabelLen
// bytes and whose values are 0 to MaxLabelLen bytes, of ASCII letters,
// digits, '-', '_', '.' and (in keys) '/'. Labels appear in selectors, so
// nothing else is accepted.
func CheckLabels(labels map[string]string) error {
	if len(labels) > MaxLabels {
		return &RequestError{Field: "labels", Reason: fmt.Sprintf("%d labels, at most %d", len(labels), MaxLabels)}
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if err := checkLabelPart(k, true); err != nil {
			return &RequestError{Field: "labels", Reason: fmt.Sprintf("key %q: %s", k, err)}
		}
		if err := checkLabelPart(labels[k], false); err != nil {
			return &RequestError{Field: "labels." + k, Reason: err.Error()}
		}
	}
	return nil
}

func checkLabelPart(s string, key bool) error {
	switch {
	case key && s == "":
		return fmt.Errorf("empty")
	case len(s) > MaxLabelLen:
		return fmt.Errorf("longer than %d bytes", MaxLabelLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || key && c == '/') {
			return fmt.Errorf("character %q at offset %d", c, i)
		}
	}
	return nil
}

// Selector picks devices by their labels. Its text is the equality-based
// subset of Kubernetes label selectors: requirements separated by commas,
// each "key=value" (or "key==value"), "key!=value", "key" (the label is
// set) or "!key" (it is not); every requirement must hold. The empty
// selector picks every device.
type Selector struct {
	reqs []requirement
}

type requirement struct {
	key, value string
	op         string // "=", "!=", "exists", "!exists"
}

// ParseSelector reads a selector's text (see Selector); a malformed one
// is a *RequestError (Field "selector") naming the requirement.
func ParseSelector(text string) (Selector, error) {
	var sel Selector
	if strings.TrimSpace(text) == "" {
		return sel, nil
	}
	for part := range strings.SplitSeq(text, ",") {
		part = strings.TrimSpace(part)
		bad := func(why string) error {
			return &RequestError{Field: "selector", Reason: fmt.Sprintf("requirement %q: %s", part, why)}
		}
		var r requirement
		switch {
		case strings.Contains(part, "!="):
			k, v, _ := strings.Cut(part, "!=")
			r = requirement{key: strings.TrimSpace(k), value: strings.TrimSpace(v), op: "!="}
		case strings.Contains(part, "="):
			k, v, _ := strings.Cut(part, "=")
			r = requirement{key: strings.TrimSpace(k), value: strings.TrimSpace(strings.TrimPrefix(v, "=")), op: "="}
		case strings.HasPrefix(part, "!"):
			r = requirement{key: strings.TrimSpace(part[1:]), op: "!exists"}
		default:
			r = requirement{key: part, op: "exists"}
		}
		if err := checkLabelPart(r.key, true); err != nil {
			return Selector{}, bad("key: " + err.Error())
		}
		if err := checkLabelPart(r.value, false); err != nil {
			return Selector{}, bad("value: " + err.Error())
		}
		sel.reqs = append(sel.reqs, r)
	}
	return sel, nil
}

// Matches says whether labels meet every requirement of the selector.
func (s Selector) Matches(labels map[string]string) bool {
	for _, r := range s.reqs {
		v, ok := labels[r.key]
		switch r.op {
		case "=":
			if !ok || v != r.value {
				return false
			}
		case "!=":
			if ok && v == r.value {
				return false
			}
		case "exists":
			if !ok {
				return false
			}
		case "!exists":
			if ok {
				return false
			}
		}
	}
	return true
}
