package systemd_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/hostcfg"
	"github.com/convergekit/converge/systemd"
)

// A unit file of ours, enabled and started, restarted when its
// configuration file changes. It needs a host where systemd runs (and
// root), so it has no output to check.
func ExampleUnit() {
	ctx := context.Background()
	root, err := hostcfg.OpenRoot("/")
	if err != nil {
		log.Fatal(err)
	}
	defer root.Close()
	m, err := systemd.New(ctx, systemd.Config{Root: root})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	conf := &hostcfg.File{Root: root, Path: "/etc/app/app.conf", Content: []byte("level=info\n")}
	app := &systemd.Unit{
		Manager: m,
		Name:    "app.service",
		Content: []byte(`[Unit]
Description=app

[Service]
ExecStart=/usr/local/bin/app --config /etc/app/app.conf

[Install]
WantedBy=multi-user.target
`),
		Enable: systemd.Enabled,
		Active: systemd.Started,
	}
	g := converge.NewGraph()
	g.Add((&hostcfg.Dir{Root: root, Path: "/etc/app"}).Node(), converge.Present)
	g.Add(conf.Node(), converge.Present, "dir:/etc/app")
	g.Add(app.Node(), converge.Present, conf.ID()) // a changed app.conf restarts app.service

	rep, err := converge.Apply(ctx, g)
	fmt.Print(rep.Summary())
	var ue *systemd.UnitError
	if errors.As(err, &ue) {
		fmt.Printf("%s: %s failed, the unit is %s (%s)\n", ue.Unit, ue.Op, ue.ActiveState, ue.Result)
	}
}

// A device agent reboots when a pass asks for it, unless an application
// holds its update lock; it tries again later, and a forced pass goes
// past the lock.
func ExampleManager_Act() {
	ctx := context.Background()
	root, err := hostcfg.OpenRoot("/")
	if err != nil {
		log.Fatal(err)
	}
	m, err := systemd.New(ctx, systemd.Config{Root: root})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	r, err := converge.NewTargetReconciler(converge.TargetReconcilerConfig[string]{
		Build: func(ctx context.Context, target string) ([]converge.TargetStage, error) {
			// Boot configuration items call converge.RequireAction.
			return []converge.TargetStage{{Name: "host", Graph: converge.NewGraph()}}, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	r.Subscribe(func(ev converge.TargetEvent) {
		if ev.Kind != converge.TargetActionRequired {
			return
		}
		err := m.Act(ctx, ev.Action.Action, systemd.PowerOptions{
			UpdateLocks: []string{"/tmp/app/updates.lock"}, // the applications' locks
			Force:       ev.Forced,                         // a forced pass goes past them
		})
		switch {
		case errors.Is(err, converge.ErrLocked):
			log.Printf("%s for %s waits: %v", ev.Action.Action, ev.Action.ID, err)
			time.AfterFunc(time.Minute, r.Trigger) // ask again
		case err != nil:
			log.Printf("%s: %v", ev.Action.Action, err)
		}
	})
	_ = r.Run(ctx)
}

func ExampleValidateName() {
	for _, name := range []string{"app.service", "getty@.service", "getty@tty1.service", "app", "my app.service"} {
		kind, err := systemd.ValidateName(name)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(name, kind)
	}
	// Output:
	// app.service plain
	// getty@.service template
	// getty@tty1.service instance
	// systemd: invalid unit name "app": no unit type suffix (.service, .socket, .timer, ...)
	// systemd: invalid unit name "my app.service": character ' ' at byte 2 is not allowed (letters, digits and ":-_.\@" are)
}

// What a failed start reads like, and how to branch on it.
func ExampleUnitError() {
	var err error = &systemd.UnitError{
		Unit: "app.service", Op: "start", JobResult: "failed",
		ActiveState: "failed", SubState: "failed", Result: "exit-code",
		Err: systemd.ErrJobFailed,
	}
	fmt.Println(err)
	fmt.Println(errors.Is(err, systemd.ErrJobFailed))
	// Output:
	// systemd: unit "app.service": start: job failed (job result "failed"); the unit is failed with result "exit-code"; see journalctl -u app.service
	// true
}

// A reboot refused while an update lock is held matches converge.ErrLocked,
// as a locked container of the docker module does.
func ExampleLockError() {
	var err error = &systemd.LockError{Action: converge.ActionReboot, Lock: "/tmp/app/updates.lock"}
	fmt.Println(err)
	fmt.Println(errors.Is(err, converge.ErrLocked))
	// Output:
	// systemd: reboot refused: update lock /tmp/app/updates.lock is held (a forced request goes past it)
	// true
}
