package systemd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// The suites below run twice: on the fake bus, in every test run, and on
// a real systemd as PID 1 inside a container (inner_internal_test.go, which
// TestRealSystemd starts), where they read what they check from systemd
// itself.

// testSystem is what a suite runs on.
type testSystem struct {
	m    *Manager
	root *hostcfg.Root
	// vendor is a Manager writing unit files where packages put theirs
	// (/usr/lib/systemd/system), for units to mask.
	vendor *Manager
	// counts returns the jobs systemd ran for unit and the daemon-reloads
	// since the last call.
	counts func(t *testing.T, unit string) (jobs, reloads int)
	// systemctl runs systemctl and returns its output, trimmed; nil on the
	// fake. A second opinion on what the Manager read over D-Bus.
	systemctl func(t *testing.T, args ...string) string
	// real is true on a real systemd.
	real bool
}

// uniqueUnit returns a unit name of its own for each call, so the suites
// never meet each other's units.
func uniqueUnit(kind string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "cvtest-" + kind + "-" + hex.EncodeToString(b) + ".service"
}

// serviceFile is a simple service running sleep with arg, enabled for
// multi-user.target.
func serviceFile(arg string) []byte {
	return []byte("[Unit]\nDescription=converge test service\n\n[Service]\nType=simple\nExecStart=/bin/sleep " + arg + "\n\n[Install]\nWantedBy=multi-user.target\n")
}

// walk applies (or dry-runs) a graph of items, each Present unless absent
// names it, dependencies as given, and returns the report.
type walkItem struct {
	node   converge.Node
	absent bool
	deps   []converge.ID
}

func walk(t *testing.T, dry bool, items ...walkItem) *converge.Report {
	t.Helper()
	g := converge.NewGraph()
	for _, it := range items {
		p := converge.Present
		if it.absent {
			p = converge.Absent
		}
		g.Add(it.node, p, it.deps...)
	}
	if dry {
		rep, err := converge.ApplyDry(context.Background(), g)
		require.NoError(t, err)
		return rep
	}
	rep, _ := converge.Apply(context.Background(), g)
	return rep
}

func result(t *testing.T, rep *converge.Report, id converge.ID) converge.ItemResult {
	t.Helper()
	for _, it := range rep.Items {
		if it.ID == id {
			return it
		}
	}
	require.Failf(t, "no result", "item %s is not in the report", id)
	return converge.ItemResult{}
}

func after(t *testing.T, rep *converge.Report, id converge.ID) UnitState {
	t.Helper()
	_, st, ok := converge.ResultStates[UnitState](result(t, rep, id))
	require.True(t, ok, "states of %s", id)
	return st
}

// suiteLifecycle: a unit written, reloaded, enabled and started; left
// alone by a walk that changes nothing; restarted once for a new
// ExecStart and once for a changed configuration file; a dry run that
// changes nothing; stopped, disabled, removed.
func suiteLifecycle(t *testing.T, s testSystem) {
	name := uniqueUnit("life")
	id := converge.ID("unit:" + name)
	confPath := "/etc/" + strings.TrimSuffix(name, ".service") + ".conf"
	conf := &hostcfg.File{Root: s.root, Path: confPath, Content: []byte("level=1\n")}
	t.Cleanup(func() { cleanupUnit(s, name, confPath) })

	var pid uint32
	type step struct {
		name    string
		content string
		enable  Enablement
		active  Activation
		conf    string // "" leaves the configuration file out of the graph
		dry     bool
		absent  bool
		check   func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int)
	}
	steps := []step{
		{name: "written, reloaded, enabled and started", content: "infinity", enable: Enabled, active: Started,
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				assert.Equal(t, converge.OutcomeChanged, result(t, rep, id).Outcome)
				assert.Equal(t, "loaded", st.LoadState)
				assert.Equal(t, "active", st.ActiveState)
				assert.Equal(t, "running", st.SubState)
				assert.Equal(t, "enabled", st.UnitFileState)
				assert.False(t, st.NeedDaemonReload)
				assert.NotZero(t, st.MainPID)
				assert.Equal(t, 1, jobs, "one start job")
				assert.Equal(t, 1, reloads, "one daemon-reload for the new file and its enablement")
				if s.systemctl != nil {
					assert.Equal(t, "active", s.systemctl(t, "is-active", name))
					assert.Equal(t, "enabled", s.systemctl(t, "is-enabled", name))
					assert.Equal(t, fmt.Sprint(st.MainPID), s.systemctl(t, "show", "-P", "MainPID", name))
				}
			}},
		{name: "a second walk changes nothing", content: "infinity", enable: Enabled, active: Started,
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				assert.Equal(t, converge.OutcomeUnchanged, result(t, rep, id).Outcome)
				assert.Equal(t, pid, st.MainPID)
				assert.Zero(t, jobs, "no job")
				assert.Zero(t, reloads, "no daemon-reload")
			}},
		{name: "a dry run of a new ExecStart changes nothing", content: "86400", enable: Enabled, active: Started, dry: true,
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				assert.Equal(t, converge.OutcomeWouldChange, result(t, rep, id).Outcome)
				assert.Equal(t, []string{"write /etc/systemd/system/" + name, "daemon-reload", "restart"}, st.Changes)
				assert.Contains(t, st.File.Diff, "+ExecStart=/bin/sleep 86400")
				assert.Zero(t, jobs, "no job")
				assert.Zero(t, reloads, "no daemon-reload")
				cur, err := (&Unit{Manager: s.m, Name: name, Content: []byte{}}).read(context.Background())
				require.NoError(t, err)
				assert.Equal(t, serviceFile("infinity"), cur.File.Content, "the unit file is unchanged")
				assert.Equal(t, pid, cur.MainPID, "the service was not restarted")
				assert.False(t, cur.RestartPending)
			}},
		{name: "a new ExecStart: one daemon-reload and a restart", content: "86400", enable: Enabled, active: Started,
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				assert.Equal(t, converge.OutcomeChanged, result(t, rep, id).Outcome)
				assert.Equal(t, "active", st.ActiveState)
				assert.NotZero(t, st.MainPID)
				assert.NotEqual(t, pid, st.MainPID, "restarted: a new main process")
				assert.False(t, st.RestartPending, "the mark of the restart is gone")
				assert.Equal(t, 1, jobs, "one restart job")
				assert.Equal(t, 1, reloads, "one daemon-reload")
				if s.systemctl != nil {
					assert.Contains(t, s.systemctl(t, "show", "-P", "ExecStart", name), "/bin/sleep 86400")
				}
			}},
		{name: "a configuration file added: one restart through Refresh", content: "86400", enable: Enabled, active: Started, conf: "level=1\n",
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				r := result(t, rep, id)
				assert.Equal(t, converge.OutcomeChanged, r.Outcome)
				assert.Equal(t, []converge.ID{conf.ID()}, r.Refresh)
				assert.NotEqual(t, pid, st.MainPID, "restarted")
				assert.Equal(t, 1, jobs, "one restart job")
				assert.Zero(t, reloads, "no daemon-reload: no unit file changed")
			}},
		{name: "the configuration file changed: one restart through Refresh", content: "86400", enable: Enabled, active: Started, conf: "level=2\n",
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				r := result(t, rep, id)
				assert.Equal(t, converge.OutcomeChanged, r.Outcome)
				assert.Equal(t, []converge.ID{conf.ID()}, r.Refresh)
				assert.NotEqual(t, pid, st.MainPID, "restarted")
				assert.Equal(t, 1, jobs, "one restart job")
				assert.Zero(t, reloads)
			}},
		{name: "nothing changed: no refresh", content: "86400", enable: Enabled, active: Started, conf: "level=2\n",
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				r := result(t, rep, id)
				assert.Equal(t, converge.OutcomeUnchanged, r.Outcome)
				assert.Empty(t, r.Refresh)
				assert.Equal(t, pid, st.MainPID)
				assert.Zero(t, jobs)
				assert.Zero(t, reloads)
			}},
		{name: "a dry run of a changed configuration file refreshes nothing", content: "86400", enable: Enabled, active: Started, conf: "level=3\n", dry: true,
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				r := result(t, rep, id)
				assert.Equal(t, converge.OutcomeWouldChange, r.Outcome)
				assert.Equal(t, []converge.ID{conf.ID()}, r.Refresh)
				assert.Zero(t, jobs)
				assert.Zero(t, reloads)
				cur, err := conf.StateCurrent(context.Background(), nil)
				require.NoError(t, err)
				assert.Equal(t, "level=2\n", string(cur.Content))
			}},
		{name: "unit file and configuration changed together: one restart", content: "infinity", enable: Enabled, active: Started, conf: "level=3\n",
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				r := result(t, rep, id)
				assert.Equal(t, converge.OutcomeChanged, r.Outcome)
				assert.NotEqual(t, pid, st.MainPID, "restarted")
				assert.Equal(t, 1, jobs, "the restart of Apply; Refresh adds none")
				assert.Equal(t, 1, reloads)
			}},
		{name: "stopped and disabled", content: "infinity", enable: Disabled, active: Stopped,
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				assert.Equal(t, converge.OutcomeChanged, result(t, rep, id).Outcome)
				assert.Equal(t, "inactive", st.ActiveState)
				assert.Equal(t, "disabled", st.UnitFileState)
				assert.Zero(t, st.MainPID)
				assert.Equal(t, 1, jobs, "one stop job")
				assert.Equal(t, 1, reloads, "one daemon-reload for the disable")
				if s.systemctl != nil {
					assert.Equal(t, "inactive", s.systemctl(t, "is-active", name))
					assert.Equal(t, "disabled", s.systemctl(t, "is-enabled", name))
				}
			}},
		{name: "removed", content: "infinity", absent: true,
			check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
				assert.Equal(t, converge.OutcomeChanged, result(t, rep, id).Outcome)
				assert.False(t, st.File.Exists)
				assert.Equal(t, "not-found", st.LoadState)
				assert.Zero(t, jobs)
				assert.Equal(t, 1, reloads)
			}},
	}
	for _, tc := range steps {
		t.Run(tc.name, func(t *testing.T) {
			s.counts(t, name)
			u := &Unit{Manager: s.m, Name: name, Content: serviceFile(tc.content), Enable: tc.enable, Active: tc.active}
			items := []walkItem{{node: u.Node(), absent: tc.absent}}
			if tc.conf != "" {
				conf.Content = []byte(tc.conf)
				items = append([]walkItem{{node: conf.Node()}}, walkItem{node: u.Node(), deps: []converge.ID{conf.ID()}})
			}
			rep := walk(t, tc.dry, items...)
			require.NoError(t, rep.Err(), "%s", rep.Summary())
			jobs, reloads := s.counts(t, name)
			st := after(t, rep, id)
			tc.check(t, rep, st, jobs, reloads)
			if !tc.dry {
				pid = st.MainPID
			}
		})
	}
}

// cleanupUnit removes what a suite left of a unit, whatever happened.
func cleanupUnit(s testSystem, name string, files ...string) {
	ctx := context.Background()
	u := &Unit{Manager: s.m, Name: name, Content: []byte{}}
	if st, err := u.read(ctx); err == nil {
		if !stopped(st.ActiveState) {
			_ = s.m.runJob(ctx, opStop, name)
		}
		if masked(st) {
			_ = s.m.bus.unmask(ctx, name)
		}
		if enabled(st.UnitFileState) {
			_ = s.m.bus.disable(ctx, name)
		}
	}
	for _, p := range append(files, path.Join(s.m.cfg.UnitDir, name), path.Join("/usr/lib/systemd/system", name), path.Join(s.m.cfg.StateDir, name+".restart")) {
		_ = applyItem[hostcfg.FileState](ctx, &hostcfg.File{Root: s.root, Path: p}, true)
	}
	_ = s.m.DaemonReload(ctx)
}

// suiteMask: a unit that a package installs, masked (stopped first) and
// unmasked again.
func suiteMask(t *testing.T, s testSystem) {
	name := uniqueUnit("mask")
	id := converge.ID("unit:" + name)
	t.Cleanup(func() { cleanupUnit(s, name) })

	vendor := &Unit{Manager: s.vendor, Name: name, Content: serviceFile("infinity"), Active: Started}
	rep := walk(t, false, walkItem{node: vendor.Node()})
	require.NoError(t, rep.Err(), "%s", rep.Summary())
	require.Equal(t, "active", after(t, rep, id).ActiveState)

	steps := []struct {
		name   string
		enable Enablement
		check  func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int)
	}{
		{name: "masked, stopped first", enable: Masked, check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
			assert.Equal(t, converge.OutcomeChanged, result(t, rep, id).Outcome)
			assert.Equal(t, "masked", st.LoadState)
			assert.Equal(t, "masked", st.UnitFileState)
			assert.Equal(t, "inactive", st.ActiveState)
			assert.Equal(t, 1, jobs, "one stop job")
			assert.Equal(t, 1, reloads)
			if s.systemctl != nil {
				assert.Equal(t, "masked", s.systemctl(t, "is-enabled", name))
			}
		}},
		{name: "masked: a second walk changes nothing", enable: Masked, check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
			assert.Equal(t, converge.OutcomeUnchanged, result(t, rep, id).Outcome)
			assert.Zero(t, jobs)
			assert.Zero(t, reloads)
		}},
		{name: "unmasked by Disabled", enable: Disabled, check: func(t *testing.T, rep *converge.Report, st UnitState, jobs, reloads int) {
			assert.Equal(t, converge.OutcomeChanged, result(t, rep, id).Outcome)
			assert.Equal(t, "loaded", st.LoadState)
			assert.Equal(t, "disabled", st.UnitFileState)
			assert.Zero(t, jobs)
			assert.Equal(t, 1, reloads)
			if s.systemctl != nil {
				assert.Equal(t, "disabled", s.systemctl(t, "is-enabled", name))
			}
		}},
	}
	for _, tc := range steps {
		t.Run(tc.name, func(t *testing.T) {
			s.counts(t, name)
			u := &Unit{Manager: s.m, Name: name, Enable: tc.enable}
			rep := walk(t, false, walkItem{node: u.Node()})
			require.NoError(t, rep.Err(), "%s", rep.Summary())
			jobs, reloads := s.counts(t, name)
			tc.check(t, rep, after(t, rep, id), jobs, reloads)
		})
	}
}

// suiteTemplate: a template's unit file written and reloaded, an
// instance of it started, and restarted once (through Refresh) when the
// template changed.
func suiteTemplate(t *testing.T, s testSystem) {
	base := strings.TrimSuffix(uniqueUnit("tpl"), ".service")
	tplName, instName := base+"@.service", base+"@1.service"
	t.Cleanup(func() { cleanupUnit(s, instName); cleanupUnit(s, tplName) })
	var pid uint32
	for i, arg := range []string{"infinity", "infinity", "86400"} {
		t.Run(fmt.Sprintf("walk %d, ExecStart /bin/sleep %s", i+1, arg), func(t *testing.T) {
			s.counts(t, instName)
			tpl := &Unit{Manager: s.m, Name: tplName, Content: serviceFile(arg)}
			inst := &Unit{Manager: s.m, Name: instName, Active: Started}
			rep := walk(t, false, walkItem{node: tpl.Node()}, walkItem{node: inst.Node(), deps: []converge.ID{tpl.ID()}})
			require.NoError(t, rep.Err(), "%s", rep.Summary())
			jobs, reloads := s.counts(t, instName)
			st := after(t, rep, inst.ID())
			assert.Equal(t, "active", st.ActiveState)
			assert.NotZero(t, st.MainPID)
			switch i {
			case 0:
				assert.Equal(t, 1, jobs, "started")
				assert.Equal(t, 1, reloads)
			case 1:
				assert.Equal(t, converge.OutcomeUnchanged, result(t, rep, inst.ID()).Outcome)
				assert.Equal(t, pid, st.MainPID)
				assert.Zero(t, jobs)
				assert.Zero(t, reloads)
			case 2:
				assert.Equal(t, []converge.ID{tpl.ID()}, result(t, rep, inst.ID()).Refresh)
				assert.NotEqual(t, pid, st.MainPID, "restarted for the new template")
				assert.Equal(t, 1, jobs, "one restart")
				assert.Equal(t, 1, reloads)
				if s.systemctl != nil {
					assert.Contains(t, s.systemctl(t, "show", "-P", "ExecStart", instName), "/bin/sleep 86400")
				}
			}
			pid = st.MainPID
		})
	}
}

// suiteFailingUnit: a unit whose ExecStart fails is a *UnitError naming
// it, with the job's result and the unit's state; a second walk tries
// again (reset-failed, start) and fails the same way.
func suiteFailingUnit(t *testing.T, s testSystem) {
	name := uniqueUnit("fail")
	t.Cleanup(func() { cleanupUnit(s, name) })
	u := &Unit{Manager: s.m, Name: name, Active: Started,
		Content: []byte("[Unit]\nDescription=converge test failing unit\n\n[Service]\nType=oneshot\nExecStart=/bin/false\n")}
	for _, attempt := range []string{"first walk", "second walk"} {
		t.Run(attempt, func(t *testing.T) {
			rep := walk(t, false, walkItem{node: u.Node()})
			r := result(t, rep, u.ID())
			assert.Equal(t, converge.OutcomeFailed, r.Outcome)
			assert.Equal(t, converge.PhaseApply, r.Phase)
			require.ErrorIs(t, rep.Err(), ErrJobFailed)
			var ue *UnitError
			require.ErrorAs(t, rep.Err(), &ue)
			assert.Equal(t, name, ue.Unit)
			assert.Equal(t, "start", ue.Op)
			assert.Equal(t, "failed", ue.JobResult)
			assert.Equal(t, "failed", ue.ActiveState)
			assert.Equal(t, "exit-code", ue.Result)
			assert.Contains(t, ue.Error(), name)
			assert.Contains(t, ue.Error(), `job result "failed"`)
		})
	}
}

// suiteInvalid: what systemd would refuse is refused before anything is
// asked of it, with a typed error naming the unit.
func suiteInvalid(t *testing.T, s testSystem) {
	long := strings.Repeat("a", MaxNameLen-len(".service")+1) + ".service"
	cases := []struct {
		name string
		unit *Unit
		want error
	}{
		{"no suffix", &Unit{Name: "app"}, ErrInvalidName},
		{"unknown suffix", &Unit{Name: "app.daemon"}, ErrInvalidName},
		{"a slash", &Unit{Name: "../etc/passwd.service"}, ErrInvalidName},
		{"a space", &Unit{Name: "my app.service"}, ErrInvalidName},
		{"too long", &Unit{Name: long}, ErrInvalidName},
		{"starts with @", &Unit{Name: "@x.service"}, ErrInvalidName},
		{"masked with a unit file of ours", &Unit{Name: "cvtest-x.service", Content: []byte("[Unit]\n"), Enable: Masked}, ErrInvalidUnit},
		{"masked and started", &Unit{Name: "cvtest-x.service", Enable: Masked, Active: Started}, ErrInvalidUnit},
		{"a template started", &Unit{Name: "cvtest-x@.service", Active: Started}, ErrInvalidUnit},
		{"an unknown enablement", &Unit{Name: "cvtest-x.service", Enable: 9}, ErrInvalidUnit},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := tc.unit
			u.Manager = s.m
			s.counts(t, u.Name)
			rep := walk(t, false, walkItem{node: u.Node()})
			require.ErrorIs(t, rep.Err(), tc.want)
			assert.Equal(t, converge.PhaseDiscover, result(t, rep, u.ID()).Phase)
			assert.Contains(t, rep.Err().Error(), fmt.Sprintf("%q", u.Name))
			jobs, reloads := s.counts(t, u.Name)
			assert.Zero(t, jobs)
			assert.Zero(t, reloads)
		})
	}
}

// suitePowerRefused: a reboot or power-off is refused while an update
// lock is held (a lock file, a Guard), and when a lock cannot be read.
// Only refusals: on a real system an accepted request stops it (see
// TestRealSystemd).
func suitePowerRefused(t *testing.T, s testSystem) {
	ctx := context.Background()
	lock := "/tmp/" + strings.TrimSuffix(uniqueUnit("lock"), ".service") + "/updates.lock"
	require.NoError(t, applyItem[hostcfg.DirState](ctx, &hostcfg.Dir{Root: s.root, Path: path.Dir(lock)}, false))
	require.NoError(t, applyItem[hostcfg.FileState](ctx, &hostcfg.File{Root: s.root, Path: lock}, false))
	t.Cleanup(func() {
		_ = applyItem[hostcfg.FileState](ctx, &hostcfg.File{Root: s.root, Path: lock}, true)
		_ = applyItem[hostcfg.DirState](ctx, &hostcfg.Dir{Root: s.root, Path: path.Dir(lock)}, true)
	})
	errBusy := errors.New("container web holds its update lock")

	cases := []struct {
		name   string
		action converge.Action
		opts   PowerOptions
		check  func(t *testing.T, err error)
	}{
		{"reboot while a lock file exists", converge.ActionReboot, PowerOptions{UpdateLocks: []string{"/tmp/none.lock", lock}}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, converge.ErrLocked)
			var le *LockError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, lock, le.Lock)
			assert.Equal(t, converge.ActionReboot, le.Action)
			assert.Contains(t, err.Error(), lock)
		}},
		{"power-off while a lock file exists", converge.ActionShutdown, PowerOptions{UpdateLocks: []string{lock}}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, converge.ErrLocked)
		}},
		{"reboot while the guard refuses", converge.ActionReboot, PowerOptions{Guard: func(context.Context) error { return errBusy }}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, converge.ErrLocked)
			require.ErrorIs(t, err, errBusy)
		}},
		{"reboot when a lock cannot be read", converge.ActionReboot, PowerOptions{UpdateLocks: []string{path.Dir(lock)}}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, hostcfg.ErrWrongType)
			require.NotErrorIs(t, err, converge.ErrLocked)
			var pe *PowerError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, path.Dir(lock), pe.Lock)
		}},
		{"an unknown action", converge.Action(9), PowerOptions{}, func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrUnknownAction)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.check(t, s.m.Act(ctx, tc.action, tc.opts))
			if s.systemctl != nil {
				assert.Contains(t, []string{"running", "degraded"}, s.systemctl(t, "is-system-running"), "the system is still up")
			}
		})
	}
}

// onReal reports whether this process runs the inner tests, inside the
// container of TestRealSystemd.
func onReal() bool { return os.Getenv(innerEnv) == "1" }
