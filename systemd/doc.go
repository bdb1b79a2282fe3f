// Package systemd manages a host's systemd units and reboots through
// systemd's D-Bus API (github.com/coreos/go-systemd over
// github.com/godbus/dbus), as a device supervisor does: unit files,
// enablement, activity, restarts when configuration changed, and reboots
// or power-offs through logind that wait for update locks.
//
// # First steps
//
// Open the host's root with hostcfg, connect a Manager, and add Units to
// a graph like any other item:
//
//	root, err := hostcfg.OpenRoot("/")
//	...
//	m, err := systemd.New(ctx, systemd.Config{Root: root})
//	...
//	defer m.Close()
//
//	conf := &hostcfg.File{Root: root, Path: "/etc/app/app.conf", Content: []byte("level=info\n")}
//	app := &systemd.Unit{
//		Manager: m,
//		Name:    "app.service",
//		Content: []byte("[Unit]\nDescription=app\n\n[Service]\nExecStart=/usr/bin/app\n\n[Install]\nWantedBy=multi-user.target\n"),
//		Enable:  systemd.Enabled,
//		Active:  systemd.Started,
//	}
//	g := converge.NewGraph()
//	g.Add(conf.Node(), converge.Present)
//	g.Add(app.Node(), converge.Present, conf.ID()) // restarted when app.conf changes
//	rep, err := converge.Apply(ctx, g)
//
// The program runs as root (or with the polkit rights to manage units and
// reboot), on a host where systemd is PID 1 and the system bus is up.
//
// # Units
//
// A Unit's state is read from systemd every time (LoadState, ActiveState,
// SubState, UnitFileState, NeedDaemonReload and, for a service, MainPID
// and Result), never assumed, and its unit file (Content) is written
// atomically through hostcfg under Config.UnitDir. Apply orders the steps
// as systemctl would need them: stop, unmask/disable/mask, write the unit
// file, enable, daemon-reload, start or restart; it waits for each job's
// result (Config.JobTimeout) and reads the state again, and the walk's
// verification reads it once more. A running unit whose unit file changed
// is restarted, so the new definition runs; a restart due survives the
// process being killed (UnitState.RestartPending). Daemon-reloads are
// asked for only when a unit file or an enablement changed, or systemd
// reports NeedDaemonReload, and the units of a walk share them (see
// Manager). A second walk with nothing changed runs no job and no reload.
//
// Refresh: a Unit is a converge.Refresher. Add it with its configuration
// files as dependencies, and a walk that changed any of them restarts the
// running unit once (or reloads it, OnRefresh RefreshReload), after the
// unit itself converged; a walk that changed nothing does not, and a dry
// run never does.
//
// A job that fails (ExecStart= exits non-zero for a oneshot, a dependency
// fails, systemd's own timeout passes) fails the item with a *UnitError
// naming the unit, the operation, the job's result and the unit's state
// (ActiveState, SubState, Result), matching ErrJobFailed; a unit found
// failed right after its start matches ErrUnitFailed; a job still running
// after Config.JobTimeout matches ErrJobTimeout. A unit that starts and
// fails later is seen by the next read: the walk's verification or the
// next pass. A unit name systemd would refuse is a *NameError
// (ValidateName), and contradicting fields (a masked unit with a unit file
// of ours, a template started) a *UnitError matching ErrInvalidUnit, before
// anything is asked of systemd.
//
// # Reboots and update locks
//
// When a walk's items ask for a reboot (converge.RequireAction; a
// TargetReconciler reports it in a TargetActionRequired event), the agent
// calls Manager.Act (or Reboot, PowerOff) with the update locks of its
// applications (PowerOptions.UpdateLocks, lock files in the root, and
// PowerOptions.Guard for others). While a lock is held the request is
// refused with a *LockError matching converge.ErrLocked, as the docker
// module refuses to recreate a locked container, and nothing is asked of
// logind; a forced request (PowerOptions.Force, or converge.WithForce as
// in a TargetReconciler's forced pass) goes past the locks. See
// ExampleManager_Act.
//
// # Tests
//
// The package's tests run against a real systemd as PID 1 in a container
// (the image .ci/run builds, named by CONVERGE_SYSTEMD_IMAGE), including a
// reboot that stops the container; without Docker or the image they skip,
// unless CONVERGE_REQUIRE_DOCKER=1.
package systemd
