package systemd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/godbus/dbus/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
)

// The inner tests: TestRealSystemd copies this package's test binary into
// a container where systemd runs as PID 1 and runs them there, as root,
// with innerEnv set. Anywhere else they skip.
const (
	// innerEnv, set to 1, selects the inner tests.
	innerEnv = "CONVERGE_SYSTEMD_INNER"
	// powerEnv selects what TestPowerInner asks logind for: "reboot" or
	// "poweroff-forced". Unset, it skips: nothing else ever reboots.
	powerEnv = "CONVERGE_SYSTEMD_POWER"
	// powerAccepted is the line TestPowerInner prints once logind accepted
	// its request, for the outer test to see before the container stops.
	powerAccepted = "converge-systemd: logind accepted the request"
	// powerBusClosed is the line TestPowerInner prints when the system bus
	// closed before logind answered: the system was already going down.
	powerBusClosed = "converge-systemd: the bus closed as the system went down"
)

// realSystem is the testSystem of the real systemd this process runs on:
// the root file system, the system bus, and systemd's own signals for
// counting jobs and reloads.
func realSystem(t *testing.T) testSystem {
	t.Helper()
	if !onReal() {
		t.Skipf("runs on a real systemd, inside the container of TestRealSystemd (%s=1)", innerEnv)
	}
	ctx := context.Background()
	root, err := hostcfg.OpenRoot("/")
	require.NoError(t, err)
	t.Cleanup(func() { root.Close() })
	m, err := New(ctx, Config{Root: root})
	require.NoError(t, err)
	vendor, err := New(ctx, Config{Root: root, UnitDir: "/usr/lib/systemd/system"})
	require.NoError(t, err)
	t.Cleanup(func() { m.Close(); vendor.Close() })
	w := newWatcher(t)
	return testSystem{m: m, root: root, vendor: vendor, counts: w.counts, systemctl: systemctl, real: true}
}

// systemctl runs systemctl and returns its output, trimmed; its exit
// status is ignored ("systemctl is-active" of a stopped unit exits 3).
func systemctl(t *testing.T, args ...string) string {
	t.Helper()
	out, _ := exec.Command("systemctl", args...).CombinedOutput()
	return strings.TrimSpace(string(out))
}

// watcher counts systemd's JobNew and Reloading signals on a connection
// of its own, subscribed to the manager's signals.
type watcher struct {
	conn *dbus.Conn
	obj  dbus.BusObject
	ch   chan *dbus.Signal
}

func newWatcher(t *testing.T) *watcher {
	t.Helper()
	conn, err := dbus.ConnectSystemBus()
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	w := &watcher{conn: conn, obj: conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1"), ch: make(chan *dbus.Signal, 4096)}
	require.NoError(t, conn.AddMatchSignal(dbus.WithMatchInterface("org.freedesktop.systemd1.Manager"), dbus.WithMatchObjectPath("/org/freedesktop/systemd1")))
	conn.Signal(w.ch)
	require.NoError(t, w.obj.Call("org.freedesktop.systemd1.Manager.Subscribe", 0).Err)
	return w
}

// counts returns the jobs systemd created for unit and the daemon-reloads
// it began since the last call. The Ping is a barrier: systemd answers it
// after every signal it sent before, and the connection hands signals to
// the (roomy) channel before it reads the answer.
func (w *watcher) counts(t *testing.T, unit string) (jobs, reloads int) {
	t.Helper()
	require.NoError(t, w.obj.Call("org.freedesktop.DBus.Peer.Ping", 0).Err)
	for {
		select {
		case s := <-w.ch:
			switch s.Name {
			case "org.freedesktop.systemd1.Manager.JobNew":
				if len(s.Body) == 3 && s.Body[2] == unit {
					jobs++
				}
			case "org.freedesktop.systemd1.Manager.Reloading":
				if len(s.Body) == 1 && s.Body[0] == true {
					reloads++
				}
			}
		default:
			return jobs, reloads
		}
	}
}

func TestInnerLifecycle(t *testing.T) { suiteLifecycle(t, realSystem(t)) }

func TestInnerMask(t *testing.T) { suiteMask(t, realSystem(t)) }

func TestInnerTemplate(t *testing.T) { suiteTemplate(t, realSystem(t)) }

func TestInnerFailingUnit(t *testing.T) { suiteFailingUnit(t, realSystem(t)) }

func TestInnerInvalidItems(t *testing.T) { suiteInvalid(t, realSystem(t)) }

func TestInnerPowerRefused(t *testing.T) { suitePowerRefused(t, realSystem(t)) }

// TestInnerNamesAgreeWithSystemd asks systemd to load each name of the
// table of TestValidateName: it refuses the names ValidateName refuses
// (InvalidArgs), and templates, which it never loads (only their
// instances); it loads the others, as units that may not exist.
func TestInnerNamesAgreeWithSystemd(t *testing.T) {
	realSystem(t)
	conn, err := dbus.ConnectSystemBus()
	require.NoError(t, err)
	defer conn.Close()
	obj := conn.Object("org.freedesktop.systemd1", "/org/freedesktop/systemd1")
	for _, tc := range names {
		switch {
		case tc.name == "":
			continue // "" asks systemd for the caller's own unit
		case strings.ContainsRune(tc.name, 0):
			continue // a D-Bus string cannot carry it: refused before systemd sees it
		}
		t.Run(tc.name, func(t *testing.T) {
			var path dbus.ObjectPath
			err := obj.Call("org.freedesktop.systemd1.Manager.LoadUnit", 0, tc.name).Store(&path)
			var de dbus.Error
			invalid := errors.As(err, &de) && de.Name == "org.freedesktop.DBus.Error.InvalidArgs"
			switch tc.kind {
			case 0, NameTemplate:
				assert.True(t, invalid, "systemd refuses %q as an invalid name: %v", tc.name, err)
			default:
				assert.NoError(t, err, "systemd loads %q", tc.name)
			}
		})
	}
}

// TestPowerInner asks logind for a reboot or a power-off, which stops the
// container; TestRealSystemd runs it alone, in a container of its own,
// with powerEnv set, and watches the container stop.
//
// "reboot": refused while the update lock is held, then asked again once
// it is released, and accepted. "poweroff-forced": forced past the held
// lock (converge.WithForce) and accepted.
func TestPowerInner(t *testing.T) {
	mode := os.Getenv(powerEnv)
	if mode == "" {
		t.Skipf("reboots or powers off the system: runs alone in a container of TestRealSystemd (%s)", powerEnv)
	}
	s := realSystem(t)
	ctx := context.Background()
	lock := "/run/cvtest-app/updates.lock"
	require.NoError(t, applyItem[hostcfg.DirState](ctx, &hostcfg.Dir{Root: s.root, Path: "/run/cvtest-app"}, false))
	require.NoError(t, applyItem[hostcfg.FileState](ctx, &hostcfg.File{Root: s.root, Path: lock}, false))
	opts := PowerOptions{UpdateLocks: []string{lock}}
	require.Contains(t, []string{"running", "degraded"}, systemctl(t, "is-system-running"))

	var err error
	switch mode {
	case "reboot":
		err = s.m.Reboot(ctx, opts)
		require.ErrorIs(t, err, converge.ErrLocked)
		require.Contains(t, []string{"running", "degraded"}, systemctl(t, "is-system-running"), "refused: still up")
		require.NoError(t, applyItem[hostcfg.FileState](ctx, &hostcfg.File{Root: s.root, Path: lock}, true))
		err = s.m.Reboot(ctx, opts)
	case "poweroff-forced":
		err = s.m.PowerOff(converge.WithForce(ctx), opts)
	default:
		t.Fatalf("%s=%q: want reboot or poweroff-forced", powerEnv, mode)
	}
	if errors.Is(err, io.EOF) {
		// The system went down before logind's answer reached us: the
		// bus closed under the call. TestRealSystemd checks that the
		// container stopped.
		fmt.Println(powerBusClosed)
		return
	}
	require.NoError(t, err)
	fmt.Println(powerAccepted)
}
