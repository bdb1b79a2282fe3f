package statuspage

import (
	"fmt"
	"time"

	"github.com/convergekit/converge"
)

// dict is the template function that hands a nested template the root,
// "as of" time and kept query of the page or nested template p, and v.
func dict(p any, v any) (sub, error) {
	switch p := p.(type) {
	case page:
		return sub{Root: p.Root, Now: p.Now, Keep: p.Keep, V: v}, nil
	case sub:
		return sub{Root: p.Root, Now: p.Now, Keep: p.Keep, V: v}, nil
	}
	return sub{}, fmt.Errorf("statuspage: dict of a %T, want the page or a part of it", p)
}

// ago says how long before now t was, for people: "just now", "40 s
// ago", "3 min ago", "5 h ago", "2 d ago" ("in 3 min" for a time after
// now, from a clock ahead of the page's); "" for the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return ""
	}
	d := now.Sub(t)
	suffix := " ago"
	if d < 0 {
		d, suffix = -d, ""
	}
	var s string
	switch {
	case d < time.Second:
		return "just now"
	case d < time.Minute:
		s = fmt.Sprintf("%d s", int(d/time.Second))
	case d < time.Hour:
		s = fmt.Sprintf("%d min", int(d/time.Minute))
	case d < 48*time.Hour:
		s = fmt.Sprintf("%d h", int(d/time.Hour))
	default:
		s = fmt.Sprintf("%d d", int(d/(24*time.Hour)))
	}
	if suffix == "" {
		return "in " + s
	}
	return s + suffix
}

// historyGroup is a run of identical consecutive history entries (same
// From, To, Reason, By and Subject): the page shows it as one row, "×N,
// first … last …".
type historyGroup struct {
	converge.HistoryEntry
	// Count is how many entries the run holds; First is the At of its
	// oldest, HistoryEntry.At that of its newest.
	Count int
	First time.Time
}

// groupHistory groups the identical consecutive entries of h.
func groupHistory(h []converge.HistoryEntry) []historyGroup {
	var out []historyGroup
	for _, e := range h {
		if n := len(out); n > 0 && sameEntry(out[n-1].HistoryEntry, e) {
			out[n-1].Count++
			out[n-1].At = e.At
			continue
		}
		out = append(out, historyGroup{HistoryEntry: e, Count: 1, First: e.At})
	}
	return out
}

// sameEntry reports whether a and b say the same but for their time.
func sameEntry(a, b converge.HistoryEntry) bool {
	return a.From == b.From && a.To == b.To && a.Reason == b.Reason && a.By == b.By &&
		(a.Subject == nil) == (b.Subject == nil) && (a.Subject == nil || *a.Subject == *b.Subject)
}

// moreLink is what the template "more" gets: a list of Shown objects out
// of Count, and the page of them all.
type moreLink struct {
	Count, Shown int
	Link         string
}

// more is the template function that makes a moreLink for the objects of
// kind with status.
func more(kind, status string, count, shown int) moreLink {
	return moreLink{Count: count, Shown: shown, Link: objectsLink(kind, status)}
}

// statuses are the status filters, for the template's choice.
func statuses() []string {
	return []string{StatusQuarantined, StatusTerminal, StatusHalted, StatusAboveSLA}
}
