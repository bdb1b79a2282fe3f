package converge_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/convergetest"
)

// TestReportErrCountsWhatItLists cancels a walk of 20 items in the middle
// (8 applying, some done, some not started) and checks that the error's
// headline counts the items its lines are about: the failed items, one
// line each, and the items not run, in one line that says how many.
func TestReportErrCountsWhatItLists(t *testing.T) {
	headline := regexp.MustCompile(`^converge: apply failed: (\d+) items: (\d+) failed, (\d+) not run:$`)
	notRunLine := regexp.MustCompile(`^\t\* (\d+) items? not run: context canceled$`)
	for _, tc := range []struct {
		name        string
		parallelism int
		cancelAfter time.Duration
	}{
		{name: "cancelled in the second round", parallelism: 8, cancelAfter: 1500 * time.Millisecond},
		{name: "cancelled in the first round", parallelism: 8, cancelAfter: 500 * time.Millisecond},
		{name: "cancelled with two not run", parallelism: 6, cancelAfter: 2500 * time.Millisecond},
		{name: "cancelled with one not run", parallelism: 19, cancelAfter: 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				g := converge.NewGraph()
				for i := range 20 {
					g.Add((&convergetest.Item{Key: converge.ID(fmt.Sprintf("item:%02d", i)), Goal: "x", Latency: time.Second}).Node(), converge.Present)
				}
				w, err := converge.NewWalker(converge.WalkerConfig{Parallelism: tc.parallelism})
				require.NoError(t, err)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				time.AfterFunc(tc.cancelAfter, cancel)
				rep, err := w.Apply(ctx, g)
				require.Error(t, err)
				require.ErrorIs(t, err, converge.ErrNotRun)
				require.ErrorIs(t, err, context.Canceled)

				failed, notRun := rep.Count(converge.OutcomeFailed), rep.Count(converge.OutcomeNotRun)
				require.Positive(t, failed, "items were applying")
				require.Positive(t, notRun, "items had not started")
				lines := strings.Split(err.Error(), "\n")
				m := headline.FindStringSubmatch(lines[0])
				require.NotNil(t, m, "headline: %q", lines[0])
				assert.Equal(t, strconv.Itoa(failed+notRun), m[1], "the headline counts items, as listed")
				assert.Equal(t, strconv.Itoa(failed), m[2])
				assert.Equal(t, strconv.Itoa(notRun), m[3])
				itemLines := 0
				for _, l := range lines[1 : len(lines)-1] {
					if strings.HasPrefix(l, "\t* item \"") {
						itemLines++
					}
				}
				assert.Equal(t, failed, itemLines, "one line per failed item")
				last := notRunLine.FindStringSubmatch(lines[len(lines)-1])
				require.NotNil(t, last, "the not-run line: %q", lines[len(lines)-1])
				assert.Equal(t, strconv.Itoa(notRun), last[1])
				// The summary's headline counts the same items.
				assert.Contains(t, rep.Summary(), fmt.Sprintf("%d failed, %d not-run", failed, notRun))
			})
		})
	}
}

// TestReportErrNotRunAlone checks the message of a walk whose only
// problem is items not run, one or several.
func TestReportErrNotRunAlone(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			g := converge.NewGraph()
			for i := range n {
				g.Add((&convergetest.Item{Key: converge.ID(fmt.Sprintf("item:%d", i)), Goal: "x"}).Node(), converge.Present)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := converge.Apply(ctx, g)
			require.ErrorIs(t, err, converge.ErrNotRun)
			require.True(t, errors.Is(err, context.Canceled))
			noun := "items"
			if n == 1 {
				noun = "item"
			}
			assertReadsOnce(t, err.Error())
			assert.Regexp(t, fmt.Sprintf(`^converge: %d %s not run: context canceled$`, n, noun), err.Error())
		})
	}
}
