package systemd

import (
	"context"
	"fmt"

	sd "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"

	"github.com/convergekit/converge"
)

// jobOp is a job systemd runs for a unit.
type jobOp string

const (
	opStart   jobOp = "start"
	opStop    jobOp = "stop"
	opRestart jobOp = "restart"
	opReload  jobOp = "reload"
)

// bus is what a Manager asks of systemd and logind: the D-Bus calls, one
// method each, so that tests outside a real system can stand in for it.
type bus interface {
	// properties returns the unit's properties of the
	// org.freedesktop.systemd1.Unit interface and, for a service, those of
	// org.freedesktop.systemd1.Service prefixed with "Service.".
	properties(ctx context.Context, unit string) (map[string]any, error)
	// job enqueues a job (mode "replace"); its result is sent on done,
	// which must have room for it.
	job(ctx context.Context, op jobOp, unit string, done chan<- string) error
	// enable enables the unit persistently and reports whether its unit
	// file has install information.
	enable(ctx context.Context, unit string) (bool, error)
	disable(ctx context.Context, unit string) error
	mask(ctx context.Context, unit string) error
	unmask(ctx context.Context, unit string) error
	resetFailed(ctx context.Context, unit string) error
	// reload is systemctl daemon-reload; it returns when systemd is done.
	reload(ctx context.Context) error
	// power asks logind for a reboot or a power-off.
	power(ctx context.Context, a converge.Action) error
	close()
}

// dbusBus is the bus of a real system: systemd through go-systemd,
// logind through godbus.
type dbusBus struct {
	conn *sd.Conn
}

func dialBus(ctx context.Context) (bus, error) {
	// The system bus; as root without one, systemd's private socket.
	conn, err := sd.NewWithContext(ctx)
	if err != nil {
		return nil, err
	}
	return &dbusBus{conn: conn}, nil
}

func (b *dbusBus) properties(ctx context.Context, unit string) (map[string]any, error) {
	props, err := b.conn.GetUnitPropertiesContext(ctx, unit)
	if err != nil {
		return nil, err
	}
	if unitType(unit) != "service" {
		return props, nil
	}
	svc, err := b.conn.GetUnitTypePropertiesContext(ctx, unit, "Service")
	if err != nil {
		return nil, err
	}
	for _, k := range []string{"MainPID", "Result"} {
		if v, ok := svc[k]; ok {
			props["Service."+k] = v
		}
	}
	return props, nil
}

func (b *dbusBus) job(ctx context.Context, op jobOp, unit string, done chan<- string) error {
	var err error
	switch op {
	case opStart:
		_, err = b.conn.StartUnitContext(ctx, unit, "replace", done)
	case opStop:
		_, err = b.conn.StopUnitContext(ctx, unit, "replace", done)
	case opRestart:
		_, err = b.conn.RestartUnitContext(ctx, unit, "replace", done)
	case opReload:
		_, err = b.conn.ReloadUnitContext(ctx, unit, "replace", done)
	default:
		panic("systemd: unknown job " + string(op))
	}
	return err
}

func (b *dbusBus) enable(ctx context.Context, unit string) (bool, error) {
	install, _, err := b.conn.EnableUnitFilesContext(ctx, []string{unit}, false, false)
	return install, err
}

func (b *dbusBus) disable(ctx context.Context, unit string) error {
	_, err := b.conn.DisableUnitFilesContext(ctx, []string{unit}, false)
	return err
}

func (b *dbusBus) mask(ctx context.Context, unit string) error {
	_, err := b.conn.MaskUnitFilesContext(ctx, []string{unit}, false, false)
	return err
}

func (b *dbusBus) unmask(ctx context.Context, unit string) error {
	_, err := b.conn.UnmaskUnitFilesContext(ctx, []string{unit}, false)
	return err
}

func (b *dbusBus) resetFailed(ctx context.Context, unit string) error {
	return b.conn.ResetFailedUnitContext(ctx, unit)
}

func (b *dbusBus) reload(ctx context.Context) error { return b.conn.ReloadContext(ctx) }

// logind's well-known name, object and interface.
const (
	login1Name      = "org.freedesktop.login1"
	login1Path      = "/org/freedesktop/login1"
	login1Interface = "org.freedesktop.login1.Manager"
)

// power calls logind's Reboot or PowerOff over a connection of its own
// (go-systemd's login1 package drops the call's error). interactive is
// false: nothing may ask a person for a password.
func (b *dbusBus) power(ctx context.Context, a converge.Action) error {
	method := map[converge.Action]string{converge.ActionReboot: "Reboot", converge.ActionShutdown: "PowerOff"}[a]
	if method == "" {
		return fmt.Errorf("%w %s", ErrUnknownAction, a)
	}
	conn, err := dbus.ConnectSystemBus(dbus.WithContext(ctx))
	if err != nil {
		return err
	}
	defer conn.Close()
	return conn.Object(login1Name, login1Path).CallWithContext(ctx, login1Interface+"."+method, 0, false).Err
}

func (b *dbusBus) close() { b.conn.Close() }
