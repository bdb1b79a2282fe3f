package statuspage_test

import (
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/statuspage"
)

func TestGraphShowsTheOutcomesOfTheLatestPass(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := newDevice()
		errIO := errors.New("i/o error")
		d.file.FailAt(converge.PhaseApply, 1, errIO)
		r, h, stop := runDevice(t, d)
		defer stop()

		tests := []struct {
			name string
			// next makes the next pass run, and what happens in it.
			next func()
			pass int
			// dir and file are the outcomes of the items.
			dir, file string
			// drawn says whether the drawings colour the outcomes (they
			// come from a walk's report).
			drawn bool
		}{
			{"dir applied, file failed", func() {}, 1, "changed", "failed", true},
			{"file applied after the backoff", func() { time.Sleep(time.Minute) }, 2, "unchanged", "changed", true},
			{"a pass that changed nothing", func() { r.Trigger() }, 3, "unchanged", "unchanged", false},
			{"dir cannot be read, file waits", func() {
				d.dir.FailAt(converge.PhaseDiscover, 1, errIO)
				r.Trigger()
			}, 4, "failed", "waiting", false},
			{"converged again", func() { time.Sleep(time.Minute) }, 5, "unchanged", "unchanged", false},
		}
		for _, tt := range tests {
			tt.next()
			synctest.Wait()
			var v statuspage.GraphView
			getJSON(t, h, "/targets/device/graph", &v)
			require.Len(t, v.Stages, 1)
			st := v.Stages[0]
			assert.Equal(t, tt.pass, st.Pass, tt.name)
			assert.Equal(t, []statuspage.GraphItem{
				{ID: "dir", Presence: "present", Outcome: tt.dir},
				{ID: "file", Presence: "present", Dependencies: []string{"dir"}, Outcome: tt.file},
			}, st.Items, tt.name)
			if tt.drawn {
				assert.Contains(t, st.DOT, `dir\n`+tt.dir, tt.name)
				assert.Contains(t, st.DOT, `file\n`+tt.file, tt.name)
				continue
			}
			assert.Contains(t, st.DOT, `"dir" [label="dir"];`, "%s: no older pass's colours in the drawing", tt.name)
			assert.Contains(t, st.DOT, `"file" [label="file"];`, "%s: no older pass's colours in the drawing", tt.name)
			assert.NotContains(t, st.Mermaid, "changed", "%s: no older pass's outcomes in the drawing", tt.name)
		}
		_, body := get(t, h, "/targets/device/graph", false)
		assert.Contains(t, body, "outcomes of pass #5")
	})
}
