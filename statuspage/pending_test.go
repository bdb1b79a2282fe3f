package statuspage_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/statuspage"
)

// bootIDs is the boot ID of a fake host, changed by a reboot.
type bootIDs struct {
	mu sync.Mutex
	id string
}

func (b *bootIDs) read(context.Context) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.id, nil
}

func (b *bootIDs) reboot(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.id = id
}

func TestPendingHostActionsSurviveARestartOfTheAgent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := converge.NewMemStore()
		boot := &bootIDs{id: "boot-1"}
		d := newDevice() // the host, which keeps its state across restarts of the agent
		// agent is the program: a reconciler on the store, its page, and a
		// pass of its target.
		agent := func(target string) (*statuspage.Handler, *converge.TargetReconciler[string]) {
			r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{Build: d.build, Store: store, BootID: boot.read})
			require.NoError(t, err)
			tg := statuspage.WatchTarget(r, statuspage.TargetOptions[string]{Name: "device"})
			t.Cleanup(tg.Close)
			h, err := statuspage.New(statuspage.Options{Targets: []*statuspage.Target{tg}, Dot: "-"})
			require.NoError(t, err)
			if target == "" {
				_, err = r.Load(t.Context())
			} else {
				err = r.SetTarget(t.Context(), target)
			}
			require.NoError(t, err)
			return h, r
		}
		run := func(r *converge.TargetReconciler[string]) {
			ctx, cancel := context.WithCancel(t.Context())
			stopped := make(chan error, 1)
			go func() { stopped <- r.Run(ctx) }()
			synctest.Wait()
			cancel()
			require.NoError(t, <-stopped)
		}
		asked := time.Now().UTC()
		h, r := agent("v1")
		run(r) // the kernel item asks for a reboot

		want := []statuspage.PendingActionView{{Action: "reboot", Item: "dir", Reason: "kernel v1", Revision: 1, Since: asked}}
		check := func(t *testing.T, h *statuspage.Handler, want []statuspage.PendingActionView) {
			t.Helper()
			var v statuspage.TargetView
			getJSON(t, h, "/targets/device", &v)
			assert.Equal(t, want, v.PendingActions)
			var ov statuspage.OverviewView
			getJSON(t, h, "/", &ov)
			var items []statuspage.AttentionItem
			for _, it := range ov.NeedsAttention {
				if it.Problem == statuspage.ProblemActionPending {
					items = append(items, it)
				}
			}
			require.Len(t, items, len(want))
			for i, p := range want {
				assert.Equal(t, statuspage.AttentionItem{Kind: "target", Name: "device", Problem: statuspage.ProblemActionPending,
					Action: p.Action, Revision: p.Revision, Error: "reboot asked by dir: kernel v1", Since: p.Since, Path: "targets/device"}, items[i])
			}
		}
		check(t, h, want)
		_, body := get(t, h, "/", false)
		assert.Contains(t, body, `reboot required <span class="muted">(revision 1)</span>`)
		_, body = get(t, h, "/targets/device", false)
		assert.Contains(t, body, `<span class="bad pending-action">reboot required</span> since`)

		// The agent restarts before the reboot: a new page, which saw no
		// event, still shows it.
		h, r = agent("")
		check(t, h, want)

		// The host reboots: the next pass finds the action done.
		boot.reboot("boot-2")
		h, r = agent("")
		run(r)
		check(t, h, []statuspage.PendingActionView{})
	})
}
