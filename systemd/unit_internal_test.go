package systemd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// fakeSystem is a testSystem on the fake bus, in a temporary root.
func fakeSystem(t *testing.T) (testSystem, *fakeBus) {
	t.Helper()
	dir := t.TempDir()
	etc := filepath.Join(dir, "etc", "systemd", "system")
	usr := filepath.Join(dir, "usr", "lib", "systemd", "system")
	require.NoError(t, os.MkdirAll(etc, 0o755))
	require.NoError(t, os.MkdirAll(usr, 0o755))
	root, err := hostcfg.OpenRoot(dir)
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	b := newFakeBus(etc, usr)
	m := newManager(Config{Root: root}, b)
	vendor := newManager(Config{Root: root, UnitDir: "/usr/lib/systemd/system"}, b)
	t.Cleanup(func() { m.Close(); vendor.Close() })
	return testSystem{
		m: m, root: root, vendor: vendor,
		counts: func(_ *testing.T, unit string) (int, int) { return b.counts(unit) },
	}, b
}

func TestLifecycleOnFake(t *testing.T) {
	s, _ := fakeSystem(t)
	suiteLifecycle(t, s)
}

func TestMaskOnFake(t *testing.T) {
	s, _ := fakeSystem(t)
	suiteMask(t, s)
}

func TestTemplateOnFake(t *testing.T) {
	s, _ := fakeSystem(t)
	suiteTemplate(t, s)
}

func TestFailingUnitOnFake(t *testing.T) {
	s, _ := fakeSystem(t)
	suiteFailingUnit(t, s)
}

func TestInvalidItemsOnFake(t *testing.T) {
	s, _ := fakeSystem(t)
	suiteInvalid(t, s)
}

func TestPowerRefusedOnFake(t *testing.T) {
	s, _ := fakeSystem(t)
	suitePowerRefused(t, s)
}

// TestPowerAcceptedOnFake: with no lock held, or forced past one, the
// request reaches logind; refused, it does not.
func TestPowerAcceptedOnFake(t *testing.T) {
	s, b := fakeSystem(t)
	ctx := context.Background()
	lock := "/run/app/updates.lock"
	held := func(t *testing.T) {
		require.NoError(t, applyItem[hostcfg.DirState](ctx, &hostcfg.Dir{Root: s.root, Path: "/run/app"}, false))
		require.NoError(t, applyItem[hostcfg.FileState](ctx, &hostcfg.File{Root: s.root, Path: lock}, false))
	}
	released := func(t *testing.T) {
		require.NoError(t, applyItem[hostcfg.FileState](ctx, &hostcfg.File{Root: s.root, Path: lock}, true))
	}
	cases := []struct {
		name   string
		lock   func(t *testing.T)
		ctx    context.Context
		action converge.Action
		opts   PowerOptions
		want   []converge.Action
		err    error
	}{
		{"reboot, no lock held", released, ctx, converge.ActionReboot, PowerOptions{UpdateLocks: []string{lock}}, []converge.Action{converge.ActionReboot}, nil},
		{"power-off, no lock held", released, ctx, converge.ActionShutdown, PowerOptions{UpdateLocks: []string{lock}}, []converge.Action{converge.ActionShutdown}, nil},
		{"reboot refused", held, ctx, converge.ActionReboot, PowerOptions{UpdateLocks: []string{lock}}, nil, converge.ErrLocked},
		{"reboot forced by the options", held, ctx, converge.ActionReboot, PowerOptions{UpdateLocks: []string{lock}, Force: true}, []converge.Action{converge.ActionReboot}, nil},
		{"reboot forced by the context", held, converge.WithForce(ctx), converge.ActionReboot, PowerOptions{UpdateLocks: []string{lock}}, []converge.Action{converge.ActionReboot}, nil},
		{"guard passed", released, ctx, converge.ActionReboot, PowerOptions{Guard: func(context.Context) error { return nil }}, []converge.Action{converge.ActionReboot}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b.mu.Lock()
			b.powered = nil
			b.mu.Unlock()
			tc.lock(t)
			err := s.m.Act(tc.ctx, tc.action, tc.opts)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
			} else {
				require.NoError(t, err)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			assert.Equal(t, tc.want, b.powered)
		})
	}

	t.Run("logind refuses", func(t *testing.T) {
		released(t)
		b.mu.Lock()
		b.powerErr = errors.New("Interactive authentication required.")
		b.mu.Unlock()
		err := s.m.Reboot(ctx, PowerOptions{})
		var pe *PowerError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, converge.ActionReboot, pe.Action)
		assert.NotErrorIs(t, err, converge.ErrLocked)
	})
}

// TestDaemonReloadsAreShared: requests made while a reload runs share the
// next one, so any number of concurrent requests costs at most two.
func TestDaemonReloadsAreShared(t *testing.T) {
	s, b := fakeSystem(t)
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	b.reloadHook = func(context.Context) {
		once.Do(func() {
			close(entered)
			<-release
		})
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	wg.Go(func() { errs <- s.m.DaemonReload(ctx) })
	<-entered
	for range 9 {
		wg.Go(func() { errs <- s.m.DaemonReload(ctx) })
	}
	// Wait (without sleeping) until all nine asked.
	for {
		s.m.rmu.Lock()
		n := s.m.requested
		s.m.rmu.Unlock()
		if n == 10 {
			break
		}
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	_, reloads := b.counts("")
	assert.Equal(t, 2, reloads, "the running reload and one for everyone who asked during it")
	assert.EqualValues(t, 2, s.m.DaemonReloads())

	require.NoError(t, s.m.DaemonReload(ctx))
	_, reloads = b.counts("")
	assert.Equal(t, 1, reloads, "a request after the others gets a reload of its own")
}

// TestDaemonReloadTimeout: a reload that does not end within JobTimeout
// is ErrJobTimeout; a caller's cancellation is its own error.
func TestDaemonReloadTimeout(t *testing.T) {
	s, b := fakeSystem(t)
	m := newManager(Config{Root: s.root, JobTimeout: time.Millisecond}, b)
	b.reloadHook = func(ctx context.Context) { <-ctx.Done() } // a reload that never ends
	err := m.DaemonReload(context.Background())
	require.ErrorIs(t, err, ErrJobTimeout)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = s.m.DaemonReload(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, ErrJobTimeout)
}

// TestRestartDueSurvivesACrash: the mark written before a unit file
// change makes the next walk restart the unit, as a process killed
// between the write and the restart would need.
func TestRestartDueSurvivesACrash(t *testing.T) {
	s, b := fakeSystem(t)
	ctx := context.Background()
	name := "app.service"
	u := &Unit{Manager: s.m, Name: name, Content: serviceFile("infinity"), Active: Started}
	rep := walk(t, false, walkItem{node: u.Node()})
	require.NoError(t, rep.Err())
	pid := after(t, rep, u.ID()).MainPID

	// What a process killed right after writing a new unit file leaves:
	// the mark, the new file, no reload, no restart.
	require.NoError(t, u.setMark(ctx, true))
	require.NoError(t, applyItem[hostcfg.FileState](ctx, &hostcfg.File{Root: s.root, Path: "/etc/systemd/system/" + name, Content: serviceFile("86400"), Mode: 0o644}, false))
	b.counts(name)

	u2 := &Unit{Manager: s.m, Name: name, Content: serviceFile("86400"), Active: Started}
	cur, err := u2.StateCurrent(ctx, nil)
	require.NoError(t, err)
	assert.True(t, cur.RestartPending)
	assert.True(t, cur.NeedDaemonReload)
	rep = walk(t, false, walkItem{node: u2.Node()})
	require.NoError(t, rep.Err())
	st := after(t, rep, u2.ID())
	assert.NotEqual(t, pid, st.MainPID)
	assert.False(t, st.RestartPending)
	jobs, reloads := b.counts(name)
	assert.Equal(t, 1, jobs)
	assert.Equal(t, 1, reloads)
}

func TestConfigValidate(t *testing.T) {
	root, err := hostcfg.OpenRoot(t.TempDir())
	require.NoError(t, err)
	defer root.Close()
	cases := []struct {
		name  string
		cfg   Config
		field string
	}{
		{"valid", Config{Root: root}, ""},
		{"defaults", func() Config { c := DefaultConfig(); c.Root = root; return c }(), ""},
		{"no root", Config{}, "Root"},
		{"relative unit dir", Config{Root: root, UnitDir: "etc/systemd/system"}, "UnitDir"},
		{"unclean state dir", Config{Root: root, StateDir: "/run/../run/x"}, "StateDir"},
		{"negative job timeout", Config{Root: root, JobTimeout: -time.Second}, "JobTimeout"},
		{"negative call timeout", Config{Root: root, CallTimeout: -time.Second}, "CallTimeout"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var ce *converge.ConfigError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.field, ce.Field)
			require.ErrorIs(t, err, converge.ErrInvalidConfig)
		})
	}
	_, err = New(context.Background(), Config{})
	require.ErrorIs(t, err, converge.ErrInvalidConfig, "New validates before it connects")
	m := newManager(Config{Root: root}, newFakeBus())
	assert.Equal(t, DefaultUnitDir, m.Config().UnitDir)
	assert.Equal(t, DefaultStateDir, m.Config().StateDir)
	assert.Equal(t, DefaultJobTimeout, m.Config().JobTimeout)
	assert.Equal(t, DefaultCallTimeout, m.Config().CallTimeout)
	require.NoError(t, m.Close())
	require.NoError(t, m.Close())
	_, err = (&Unit{Manager: m, Name: "a.service"}).StateCurrent(context.Background(), nil)
	require.Error(t, err, "a closed Manager fails")
}
