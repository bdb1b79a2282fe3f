package statuspage

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
)

var wfStart = time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)

// ms is n milliseconds.
func ms(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }

// walkOf is a report of a walk that started at 0 ms+at and took took ms.
func walkOf(at, took float64, items ...converge.ItemResult) *converge.Report {
	return &converge.Report{Started: wfStart.Add(ms(at)), Duration: ms(took), Items: items}
}

// ran is an item that ran from at for took ms.
func ran(id string, o converge.Outcome, at, took float64) converge.ItemResult {
	return converge.ItemResult{ID: converge.ID(id), Outcome: o, Started: wfStart.Add(ms(at)), Duration: ms(took)}
}

// svgElements decodes svg as XML (it must be well formed) and returns its
// elements as name[class], and the texts of its <title> elements.
func svgElements(t *testing.T, svg string) (elems, titles []string) {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(svg))
	var inTitle bool
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return elems, titles
		}
		require.NoError(t, err, "the SVG is well-formed XML")
		switch tok := tok.(type) {
		case xml.StartElement:
			class := ""
			for _, a := range tok.Attr {
				if a.Name.Local == "class" {
					class = a.Value
				}
			}
			elems = append(elems, tok.Name.Local+"["+class+"]")
			inTitle = tok.Name.Local == "title"
		case xml.CharData:
			if inTitle {
				titles = append(titles, string(tok))
			}
		case xml.EndElement:
			inTitle = false
		}
	}
}

func TestWaterfallRowsOfAPass(t *testing.T) {
	changed := ran("file:/etc/motd", converge.OutcomeChanged, 2, 30)
	changed.ApplyStart, changed.ApplyDuration = ms(5), ms(20)
	failed := ran("container:web", converge.OutcomeFailed, 3, 10)
	failed.Phase = converge.PhaseApply
	waiting := converge.ItemResult{ID: "container:proxy", Outcome: converge.OutcomeWaiting}
	walks := []converge.TargetWalk{
		{Stage: "host", Round: 1, Report: walkOf(0, 40, ran("dir:/etc", converge.OutcomeUnchanged, 1, 1), changed)},
		{Stage: "host", Round: 2, Report: walkOf(40, 5, ran("dir:/etc", converge.OutcomeUnchanged, 41, 1), ran("file:/etc/motd", converge.OutcomeUnchanged, 42, 2))},
		{Stage: "apps", Round: 1, Report: walkOf(50, 20, waiting, ran("image:web", converge.OutcomeUnchanged, 51, 2), failed)},
	}
	walks[2].Report.Items[2].Started = wfStart.Add(ms(53))
	v := newWaterfall(7, PassFailed, walks)
	require.NotNil(t, v)
	assert.Equal(t, 7, v.Pass)
	assert.Equal(t, wfStart, v.Started)
	assert.InDelta(t, 70, v.TotalMs, 1e-9, "until the last walk ended")
	var rows []string
	for _, r := range v.Rows {
		rows = append(rows, fmt.Sprintf("%s#%d %s %s %g+%g", r.Stage, r.Round, r.Item, r.Outcome, r.StartMs, r.DurationMs))
	}
	assert.Equal(t, []string{
		"host#1 dir:/etc unchanged 1+1",
		"host#1 file:/etc/motd changed 2+30",
		"host#2 dir:/etc unchanged 41+1",
		"host#2 file:/etc/motd unchanged 42+2",
		"apps#1 image:web unchanged 51+2",
		"apps#1 container:web failed 53+10",
		"apps#1 container:proxy waiting 50+20", // did not run: spans its walk, last
	}, rows)
	assert.InDelta(t, 7, v.Rows[1].ApplyStartMs, 1e-9, "the apply, on the pass's time line")
	assert.InDelta(t, 20, v.Rows[1].ApplyMs, 1e-9)
	assert.Equal(t, "apply", v.Rows[5].Phase)
	assert.True(t, v.Rows[6].Skipped)
	assert.Zero(t, v.More)

	svg := string(waterfallSVG(v))
	elems, titles := svgElements(t, svg)
	assert.Equal(t, "svg[waterfall]", elems[0])
	var bars []string
	for _, e := range elems {
		if strings.HasPrefix(e, "g[bar ") {
			bars = append(bars, e)
		}
	}
	assert.Equal(t, []string{"g[bar unchanged]", "g[bar changed]", "g[bar unchanged]", "g[bar unchanged]", "g[bar unchanged]", "g[bar failed]", "g[bar waiting]"}, bars, "one bar per row")
	assert.Contains(t, elems, "rect[apply]", "the apply drawn in its item's bar")
	require.Len(t, titles, 1+len(v.Rows), "a title for the picture and one per bar")
	assert.Equal(t, "container:web (apps #1): failed, at 53 ms for 10 ms, failed in apply", titles[6])
	assert.Equal(t, "file:/etc/motd (host #1): changed, at 2 ms for 30 ms, apply at 7 ms for 20 ms", titles[2])
	assert.Regexp(t, `<g class="bar failed"><title>[^<]*</title><text [^>]*fill="#aa0000">container:web.*?</text><rect [^>]*fill="#aa0000"/>`, svg, "the failed item is red")
	assert.Regexp(t, `<g class="bar waiting">.*?<rect [^>]*fill="#c8c8c8"`, svg, "a skipped item is grey")
	for _, tick := range []string{">0<", ">10<", ">70<"} {
		assert.Contains(t, svg, tick, "the axis in ms")
	}
	assert.Nil(t, newWaterfall(1, PassFailed, nil), "no walk, no waterfall")
	assert.Empty(t, waterfallSVG(nil))
}

func TestWaterfallEscapesItemNames(t *testing.T) {
	hostile := `</svg><script>alert("x")</script>&amp;<b onload='1'>`
	v := newWaterfall(1, PassFinished, []converge.TargetWalk{
		{Stage: `st"<age>`, Round: 1, Report: walkOf(0, 5, ran(hostile, converge.OutcomeChanged, 0, 5))},
	})
	svg := string(waterfallSVG(v))
	assert.NotContains(t, svg, "<script")
	assert.NotContains(t, svg, "</svg><")
	assert.NotContains(t, svg, "<b ")
	assert.NotContains(t, svg, `st"<age>`)
	_, titles := svgElements(t, svg)
	require.Len(t, titles, 2)
	assert.Equal(t, hostile+` (st"<age> #1): changed, at 0 ms for 5 ms`, titles[1], "the name reads back as it is")
}

func TestWaterfallCapsAHugePass(t *testing.T) {
	const n = MaxWaterfallRows + 50
	items := make([]converge.ItemResult, n)
	for i := range items {
		items[i] = ran(fmt.Sprintf("item-%03d", i), converge.OutcomeUnchanged, float64(i), 1)
	}
	items[n-1].Outcome = converge.OutcomeFailed // short, late: kept because it failed
	items[10].Duration = ms(100)                // long: kept
	v := newWaterfall(3, PassFailed, []converge.TargetWalk{{Stage: "s", Round: 1, Report: walkOf(0, n+1, items...)}})
	require.Len(t, v.Rows, MaxWaterfallRows)
	assert.Equal(t, 50, v.More)
	assert.Equal(t, fmt.Sprintf("item-%03d", n-1), v.Rows[len(v.Rows)-1].Item, "the failed item is kept")
	assert.Equal(t, "item-010", v.Rows[10].Item, "the long item is kept, in time order")
	for i := 1; i < len(v.Rows); i++ {
		assert.LessOrEqual(t, v.Rows[i-1].StartMs, v.Rows[i].StartMs, "in time order")
	}
	svg := string(waterfallSVG(v))
	assert.Contains(t, svg, "50 more items not shown")
	assert.Contains(t, svg, fmt.Sprintf("%d items", n), "the picture's title counts them all")
	assert.Less(t, len(svg), 400*MaxWaterfallRows+4000, "bounded size")
	assert.Contains(t, svg, fmt.Sprintf(`height="%d"`, wfAxis+MaxWaterfallRows*wfRow+wfFooter))
}
