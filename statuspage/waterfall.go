package statuspage

import (
	"cmp"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// MaxWaterfallRows is how many items the waterfall of a pass shows at
// most. A larger pass shows its failed items and then its longest ones,
// in time order, and counts the others (WaterfallView.More).
const MaxWaterfallRows = 200

// WaterfallView is the time line of a target's newest pass that ended:
// every walk of every stage and, in it, every item, from its start to its
// end. On the target's page it is drawn as a waterfall (an SVG, no
// script).
type WaterfallView struct {
	Pass   int    `json:"pass"`
	Result string `json:"result"`
	// Started is when the pass's first walk started; the times of the
	// rows are in milliseconds since then.
	Started time.Time `json:"started"`
	// TotalMs is the length of the time line: until the last walk ended.
	TotalMs float64        `json:"totalMs"`
	Rows    []WaterfallRow `json:"rows"`
	// More counts the items left out beyond MaxWaterfallRows.
	More int `json:"more,omitempty"`
}

// WaterfallRow is one item of one walk on the time line.
type WaterfallRow struct {
	Stage string `json:"stage"`
	// Round is the walk's number in its stage, from 1.
	Round int    `json:"round"`
	Item  string `json:"item"`
	// Outcome is the item's converge.Outcome; Phase the phase a failed
	// item failed in.
	Outcome string `json:"outcome"`
	Phase   string `json:"phase,omitempty"`
	// StartMs and DurationMs place the item on the time line. An item
	// that did not run (it waited, or was not run) spans its walk.
	StartMs    float64 `json:"startMs"`
	DurationMs float64 `json:"durationMs"`
	// ApplyStartMs and ApplyMs place its Apply, when it applied: before
	// it the item discovered and checked, after it it verified.
	ApplyStartMs float64 `json:"applyStartMs,omitempty"`
	ApplyMs      float64 `json:"applyMs,omitempty"`
	// Skipped is true for an item that did not run.
	Skipped bool `json:"skipped,omitempty"`
}

// newWaterfall makes the time line of the walks of a pass; nil when the
// pass ran no walk.
func newWaterfall(pass int, result string, walks []converge.TargetWalk) *WaterfallView {
	var start, end time.Time
	for _, w := range walks {
		if w.Report == nil || w.Report.Started.IsZero() {
			continue
		}
		if start.IsZero() || w.Report.Started.Before(start) {
			start = w.Report.Started
		}
		if e := w.Report.Started.Add(w.Report.Duration); e.After(end) {
			end = e
		}
	}
	if start.IsZero() {
		return nil
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	v := &WaterfallView{Pass: pass, Result: result, Started: start, Rows: []WaterfallRow{}}
	for _, w := range walks {
		rep := w.Report
		if rep == nil || rep.Started.IsZero() {
			continue
		}
		first := len(v.Rows)
		for _, it := range rep.Items {
			row := WaterfallRow{Stage: w.Stage, Round: w.Round, Item: string(it.ID), Outcome: it.Outcome.String()}
			if it.Outcome == converge.OutcomeFailed {
				row.Phase = it.Phase.String()
			}
			if it.Started.IsZero() {
				row.Skipped = true
				row.StartMs, row.DurationMs = ms(rep.Started.Sub(start)), ms(rep.Duration)
			} else {
				row.StartMs, row.DurationMs = ms(it.Started.Sub(start)), ms(it.Duration)
				if it.ApplyDuration > 0 || it.ApplyStart > 0 {
					row.ApplyStartMs, row.ApplyMs = ms(it.Started.Sub(start)+it.ApplyStart), ms(it.ApplyDuration)
				}
			}
			if e := row.StartMs + row.DurationMs; e > v.TotalMs {
				v.TotalMs = e
			}
			v.Rows = append(v.Rows, row)
		}
		// In a walk, by start; the items that did not run last.
		slices.SortStableFunc(v.Rows[first:], func(a, b WaterfallRow) int {
			if a.Skipped != b.Skipped {
				if a.Skipped {
					return 1
				}
				return -1
			}
			return cmp.Compare(a.StartMs, b.StartMs)
		})
	}
	if t := ms(end.Sub(start)); t > v.TotalMs {
		v.TotalMs = t
	}
	if len(v.Rows) > MaxWaterfallRows {
		v.Rows, v.More = capRows(v.Rows, MaxWaterfallRows), len(v.Rows)-MaxWaterfallRows
	}
	return v
}

// capRows keeps n of rows, in their order: the failed ones first, then
// the longest.
func capRows(rows []WaterfallRow, n int) []WaterfallRow {
	idx := make([]int, len(rows))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		fa, fb := rows[a].Outcome == converge.OutcomeFailed.String(), rows[b].Outcome == converge.OutcomeFailed.String()
		if fa != fb {
			if fa {
				return -1
			}
			return 1
		}
		return cmp.Compare(rows[b].DurationMs, rows[a].DurationMs)
	})
	keep := idx[:n]
	slices.Sort(keep)
	out := make([]WaterfallRow, n)
	for i, k := range keep {
		out[i] = rows[k]
	}
	return out
}

// The geometry of the waterfall, in pixels.
const (
	wfWidth  = 960
	wfLabel  = 300 // the column of the items' names
	wfRight  = 16
	wfRow    = 18
	wfBar    = 12
	wfAxis   = 28 // the axis above the rows
	wfFooter = 22
	wfName   = 44 // the longest name drawn in full, in characters
)

// The waterfall's colours by outcome; failed is the page's red.
var wfColours = map[string]string{
	converge.OutcomeUnchanged.String():   "#8fb3d9",
	converge.OutcomeChanged.String():     "#3b8f3b",
	converge.OutcomeWouldChange.String(): "#7fbf7f",
	converge.OutcomeFailed.String():      "#aa0000",
	converge.OutcomeWaiting.String():     "#c8c8c8",
	converge.OutcomeNotRun.String():      "#c8c8c8",
}

// wfLegend is the legend under the waterfall.
var wfLegend = []struct{ fill, extra, text string }{
	{wfColours["unchanged"], "", "unchanged"},
	{wfColours["changed"], "", "changed"},
	{wfColours["would-change"], "", "would change"},
	{wfColours["failed"], "", "failed"},
	{wfColours["waiting"], "", "waited or not run"},
	{"#000", ` fill-opacity="0.3"`, "its apply"},
}

// waterfallSVG draws v as an SVG to put inline in the page: one row per
// item, bars on a time line in milliseconds, the apply a darker band in
// its item's bar, a <title> on each bar; every name escaped.
func waterfallSVG(v *WaterfallView) template.HTML {
	if v == nil {
		return ""
	}
	rows := len(v.Rows)
	height := wfAxis + rows*wfRow + wfFooter
	plot := float64(wfWidth - wfLabel - wfRight)
	total := v.TotalMs
	if total <= 0 {
		total = 1
	}
	step := tickStep(total)
	scale := plot / (math.Ceil(total/step) * step)
	x := func(ms float64) float64 { return float64(wfLabel) + ms*scale }

	var b strings.Builder
	esc := template.HTMLEscapeString
	fmt.Fprintf(&b, `<svg class="waterfall" xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-labelledby="waterfall-title" font-family="system-ui,sans-serif" font-size="11">`,
		wfWidth, height, wfWidth, height)
	fmt.Fprintf(&b, `<title id="waterfall-title">pass #%d %s: %d items on a time line of %s ms</title>`,
		v.Pass, esc(v.Result), rows+v.More, fmtMs(v.TotalMs))
	// The axis: a tick and a grid line per step.
	for t := 0.0; t <= total+step/2; t += step {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e4e4e4"/>`, x(t), wfAxis-4, x(t), wfAxis+rows*wfRow)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`, x(t), wfAxis-8, fmtMs(t))
	}
	fmt.Fprintf(&b, `<text x="4" y="%d" fill="#555">item</text><text x="%d" y="%d" text-anchor="end" fill="#555">ms</text>`, wfAxis-8, wfLabel-6, wfAxis-8)
	stage := ""
	for i, r := range v.Rows {
		y := wfAxis + i*wfRow
		if i%2 == 1 {
			fmt.Fprintf(&b, `<rect x="0" y="%d" width="%d" height="%d" fill="#f7f7f7"/>`, y, wfWidth, wfRow)
		}
		walk := fmt.Sprintf("%s #%d", r.Stage, r.Round)
		if walk != stage {
			stage = walk
			fmt.Fprintf(&b, `<line x1="0" y1="%d" x2="%d" y2="%d" stroke="#999"/>`, y, wfWidth, y)
		}
		name := r.Item
		if len([]rune(name)) > wfName {
			name = string([]rune(name)[:wfName-1]) + "…"
		}
		fill := wfColours[r.Outcome]
		if fill == "" {
			fill = "#c8c8c8"
		}
		class := "bar " + r.Outcome
		text := "#222"
		if r.Outcome == converge.OutcomeFailed.String() {
			text = "#aa0000"
		} else if r.Skipped {
			text = "#777"
		}
		title := fmt.Sprintf("%s (%s): %s, at %s ms for %s ms", r.Item, walk, r.Outcome, fmtMs(r.StartMs), fmtMs(r.DurationMs))
		if r.Phase != "" {
			title += ", failed in " + r.Phase
		}
		if r.ApplyMs > 0 {
			title += fmt.Sprintf(", apply at %s ms for %s ms", fmtMs(r.ApplyStartMs), fmtMs(r.ApplyMs))
		}
		fmt.Fprintf(&b, `<g class="%s"><title>%s</title>`, esc(class), esc(title))
		fmt.Fprintf(&b, `<text x="4" y="%d" fill="%s">%s <tspan fill="#999">%s</tspan></text>`, y+wfRow-5, text, esc(name), esc(walk))
		w := math.Max(r.DurationMs*scale, 1.5)
		opacity := ""
		if r.Skipped {
			opacity = ` fill-opacity="0.6"`
		}
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"%s/>`, x(r.StartMs), y+(wfRow-wfBar)/2, w, wfBar, fill, opacity)
		if r.ApplyMs > 0 {
			fmt.Fprintf(&b, `<rect class="apply" x="%.1f" y="%d" width="%.1f" height="%d" fill="#000" fill-opacity="0.3"/>`,
				x(r.ApplyStartMs), y+(wfRow-wfBar)/2+2, math.Max(r.ApplyMs*scale, 1), wfBar-4)
		}
		b.WriteString(`</g>`)
	}
	foot := wfAxis + rows*wfRow + 15
	lx := 4
	if v.More > 0 {
		more := fmt.Sprintf("%d more items not shown;", v.More)
		fmt.Fprintf(&b, `<text class="more" x="%d" y="%d" fill="#555">%s</text>`, lx, foot, more)
		lx += 7*len(more) + 8
	}
	for _, l := range wfLegend {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"%s/><text x="%d" y="%d" fill="#555">%s</text>`,
			lx, foot-9, l.fill, l.extra, lx+14, foot, l.text)
		lx += 14 + 7*len(l.text) + 12
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every name is escaped above
}

// tickStep is the step of the axis's ticks for a time line of total ms:
// 1, 2 or 5 times a power of ten, for about 8 ticks.
func tickStep(total float64) float64 {
	raw := total / 8
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// fmtMs renders ms with at most three significant decimals.
func fmtMs(ms float64) string {
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f", ms)
	case ms >= 1:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", ms), "0"), ".")
	default:
		return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", ms), "0"), ".")
	}
}
