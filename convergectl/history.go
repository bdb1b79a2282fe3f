package main

import (
	"fmt"
	"time"

	"github.com/convergekit/converge"
)

// maxCycle is the longest block of history entries that collapseHistory
// finds repeated: a plan flapping between SchedulableWait and Schedulable
// writes a block of 2 (the plan's two transitions) to 4 entries (its
// command's too).
const maxCycle = 4

// historyRow is a block of history entries that came in a row, times
// times: entries[i] first happened at entries[i].At and last at last[i].
type historyRow struct {
	entry converge.HistoryEntry
	times int
	last  time.Time
}

// sameTransition reports whether a and b are the same transition at
// different times.
func sameTransition(a, b converge.HistoryEntry) bool {
	if a.From != b.From || a.To != b.To || a.Reason != b.Reason || a.By != b.By {
		return false
	}
	if a.Subject == nil || b.Subject == nil {
		return a.Subject == nil && b.Subject == nil
	}
	return *a.Subject == *b.Subject
}

// repeats returns how many times the block hist[i:i+k] comes in a row
// from i.
func repeats(hist []converge.HistoryEntry, i, k int) int {
	n := 1
	for j := i + k; j+k <= len(hist); j += k {
		for m := 0; m < k; m++ {
			if !sameTransition(hist[i+m], hist[j+m]) {
				return n
			}
		}
		n++
	}
	return n
}

// collapseHistory folds blocks of up to maxCycle entries that repeat in
// a row (the same transitions, at different times) into one row per
// entry of the block, with the number of times the block came and when
// each of its entries came last. Of the block lengths, the one that folds
// the most entries wins, the shortest on a tie.
func collapseHistory(hist []converge.HistoryEntry) []historyRow {
	rows := make([]historyRow, 0, len(hist))
	for i := 0; i < len(hist); {
		bestK, bestN := 1, 1
		for k := 1; k <= maxCycle && i+2*k <= len(hist); k++ {
			if n := repeats(hist, i, k); n > 1 && n*k > bestN*bestK {
				bestK, bestN = k, n
			}
		}
		for m := 0; m < bestK; m++ {
			rows = append(rows, historyRow{entry: hist[i+m], times: bestN, last: hist[i+(bestN-1)*bestK+m].At})
		}
		i += bestK * bestN
	}
	return rows
}

// timesText says how often a row's block came, and when it came last.
func timesText(r historyRow) string {
	if r.times == 1 {
		return ""
	}
	return fmt.Sprintf("%d times, last %s", r.times, r.last.UTC().Format(time.RFC3339))
}
