package systemd

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/convergekit/converge"
)

// fakeBus stands in for systemd and logind in the tests that run without
// a real systemd: it keeps each unit's activity and enablement, loads unit
// files from the root's unit directory on a daemon-reload (so
// NeedDaemonReload tells a file changed since), and counts jobs and
// reloads. Its limits: no dependencies between units, no [Install]
// parsing beyond the presence of the section, and jobs end at once;
// "ExecStart=/bin/false" in a unit file makes its start fail.
type fakeBus struct {
	dirs []string // the unit directories on disk, in systemd's order

	mu      sync.Mutex
	units   map[string]*fakeUnit
	nextPID uint32
	jobs    map[string]int // unit -> jobs run
	reloads int
	powered []converge.Action
	// reloadHook, when set, runs inside every daemon-reload, outside mu.
	reloadHook func(ctx context.Context)
	// powerErr fails power calls.
	powerErr error
}

type fakeUnit struct {
	active, sub string
	pid         uint32
	result      string
	fileState   string // "enabled", "disabled", "masked"; "" when unknown
	loaded      []byte // the unit file systemd loaded; nil when none
}

func newFakeBus(dirs ...string) *fakeBus {
	return &fakeBus{dirs: dirs, units: map[string]*fakeUnit{}, nextPID: 100, jobs: map[string]int{}}
}

func (b *fakeBus) unit(name string) *fakeUnit {
	u := b.units[name]
	if u == nil {
		u = &fakeUnit{active: "inactive", sub: "dead", result: "success"}
		u.loaded = b.disk(name)
		b.units[name] = u
	}
	return u
}

func (b *fakeBus) disk(name string) []byte {
	files := []string{name}
	if kind, _ := ValidateName(name); kind == NameInstance {
		// An instance without a file of its own is its template's.
		at, dot := strings.IndexByte(name, '@'), strings.LastIndexByte(name, '.')
		files = append(files, name[:at+1]+name[dot:])
	}
	for _, f := range files {
		for _, dir := range b.dirs {
			if data, err := os.ReadFile(filepath.Join(dir, f)); err == nil {
				return data
			}
		}
	}
	return nil
}

func (b *fakeBus) properties(_ context.Context, name string) (map[string]any, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.unit(name)
	disk := b.disk(name)
	load := "loaded"
	fileState := u.fileState
	switch {
	case fileState == "masked":
		load = "masked"
	case u.loaded == nil:
		load = "not-found"
	}
	if disk == nil && fileState != "masked" {
		fileState = ""
	} else if fileState == "" {
		fileState = "disabled"
	}
	need := (disk == nil) != (u.loaded == nil) || !bytes.Equal(disk, u.loaded)
	if fileState == "masked" {
		need = false
	}
	return map[string]any{
		"LoadState": load, "ActiveState": u.active, "SubState": u.sub, "UnitFileState": fileState,
		"NeedDaemonReload": need, "Service.MainPID": u.pid, "Service.Result": u.result,
	}, nil
}

func (b *fakeBus) job(_ context.Context, op jobOp, name string, done chan<- string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.unit(name)
	if u.loaded == nil && op != opStop {
		return errors.New("Unit " + name + " not found.")
	}
	if u.fileState == "masked" && op != opStop {
		return errors.New("Unit " + name + " is masked.")
	}
	b.jobs[name]++
	switch op {
	case opStart, opRestart:
		if op == opStart && running(u.active) {
			done <- "done"
			return nil
		}
		if bytes.Contains(u.loaded, []byte("ExecStart=/bin/false")) {
			u.active, u.sub, u.pid, u.result = "failed", "failed", 0, "exit-code"
			done <- "failed"
			return nil
		}
		b.nextPID++
		u.active, u.sub, u.pid, u.result = "active", "running", b.nextPID, "success"
	case opStop:
		u.active, u.sub, u.pid = "inactive", "dead", 0
	case opReload:
		if !running(u.active) {
			done <- "skipped"
			return nil
		}
	}
	done <- "done"
	return nil
}

func (b *fakeBus) setFileState(name, state string, need func(*fakeUnit) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.unit(name)
	if need != nil {
		if err := need(u); err != nil {
			return err
		}
	}
	u.fileState = state
	return nil
}

func (b *fakeBus) enable(_ context.Context, name string) (bool, error) {
	b.mu.Lock()
	disk := b.disk(name)
	b.mu.Unlock()
	if disk == nil {
		return false, errors.New("Unit file " + name + " does not exist.")
	}
	if !bytes.Contains(disk, []byte("[Install]")) {
		return false, nil
	}
	return true, b.setFileState(name, "enabled", nil)
}

func (b *fakeBus) disable(_ context.Context, name string) error {
	return b.setFileState(name, "disabled", nil)
}

func (b *fakeBus) mask(_ context.Context, name string) error {
	return b.setFileState(name, "masked", nil)
}

func (b *fakeBus) unmask(_ context.Context, name string) error {
	return b.setFileState(name, "", nil)
}

func (b *fakeBus) resetFailed(_ context.Context, name string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.unit(name)
	if u.active == "failed" {
		u.active, u.sub, u.result = "inactive", "dead", "success"
	}
	return nil
}

func (b *fakeBus) reload(ctx context.Context) error {
	b.mu.Lock()
	hook := b.reloadHook
	b.mu.Unlock()
	if hook != nil {
		hook(ctx)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.reloads++
	for name, u := range b.units {
		u.loaded = b.disk(name)
	}
	return nil
}

func (b *fakeBus) power(_ context.Context, a converge.Action) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.powerErr != nil {
		return b.powerErr
	}
	b.powered = append(b.powered, a)
	return nil
}

func (b *fakeBus) close() {}

// counts returns the jobs run for unit and the reloads, and resets both.
func (b *fakeBus) counts(unit string) (jobs, reloads int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	jobs, reloads = b.jobs[unit], b.reloads
	b.jobs, b.reloads = map[string]int{}, 0
	return jobs, reloads
}
