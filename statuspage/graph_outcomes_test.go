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
		}{
			{"dir applied, file failed", func() {}, 1, "changed", "failed"},
			{"file applied after the backoff", func() { time.Sleep(time.Minute) }, 2, "unchanged", "changed"},
			{"a pass that changed nothing", func() { r.Trigger() }, 3, "unchanged", "unchanged"},
			{"dir cannot be read, file waits", func() {
				d.dir.FailAt(converge.PhaseDiscover, 1, errIO)
				r.Trigger()
			}, 4, "failed", "waiting"},
			{"converged again", func() { time.Sleep(time.Minute) }, 5, "unchanged", "unchanged"},
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
			// The drawings show the same outcomes, never an older pass's.
			assert.Contains(t, st.DOT, `dir\n`+tt.dir, tt.name)
			assert.Contains(t, st.DOT, `file\n`+tt.file, tt.name)
			assert.Contains(t, st.Mermaid, `dir<br/>`+tt.dir, tt.name)
			assert.Contains(t, st.Mermaid, `file<br/>`+tt.file, tt.name)
		}
		_, body := get(t, h, "/targets/device/graph", false)
		assert.Contains(t, body, "outcomes of pass #5")
	})
}
