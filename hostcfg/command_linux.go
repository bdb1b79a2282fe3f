//go:build linux

package hostcfg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// runProcess runs one process in a process group of its own, with the
// combined output in a pipe, and kills the group on timeout, on
// cancellation of ctx, and once the leader exited (what it left behind).
//
// The group is only ever signalled while its leader is not reaped (it
// runs, or is a zombie that waitid(WNOWAIT) saw): the leader's pid is the
// group's ID and cannot be reused meanwhile, so the kill never reaches
// another process group.
func runProcess(ctx context.Context, spec procSpec) procResult {
	res := procResult{exit: -1}
	if err := ctx.Err(); err != nil {
		res.cancelled = err // nothing started
		return res
	}
	d, err := spec.root.r.Open(spec.dir.rel)
	if err != nil {
		res.startErr = spec.root.fail("chdir", spec.dir.name, err)
		return res
	}
	defer d.Close()
	if fi, err := d.Stat(); err != nil {
		res.startErr = &PathError{Op: "chdir", Path: spec.dir.name, Err: err}
		return res
	} else if !fi.IsDir() {
		res.startErr = wrongType("chdir", spec.dir.name, fi.Mode())
		return res
	}
	r, w, err := os.Pipe()
	if err != nil {
		res.startErr = err
		return res
	}
	defer r.Close()
	cmd := &exec.Cmd{
		Path:        spec.path,
		Args:        spec.args,
		Env:         spec.env,
		Dir:         workDirPath(spec, d),
		Stdout:      w,
		Stderr:      w,
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	err = cmd.Start()
	w.Close()
	d.Close()
	if err != nil {
		res.startErr = err
		return res
	}
	pid := cmd.Process.Pid
	out := &tailBuffer{max: commandKeepBytes}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(out, r)
	}()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		waitExited(pid)
	}()

	timer := time.NewTimer(spec.timeout)
	defer timer.Stop()
	select {
	case <-exited:
	case <-ctx.Done():
		res.cancelled = ctx.Err()
	case <-timer.C:
		res.timedOut = true
	}
	// The leader exited or is to be killed: either way, nothing of the
	// group may stay.
	killGroup(pid)
	<-exited
	werr := cmd.Wait()

	drain := time.NewTimer(commandDrain)
	defer drain.Stop()
	select {
	case <-copied:
	case <-drain.C:
		// A process that left the group holds the output open.
		r.Close()
		<-copied
	}
	res.output = out.bytes()

	st := cmd.ProcessState
	if st == nil {
		res.startErr = werr
		return res
	}
	ws, _ := st.Sys().(syscall.WaitStatus)
	if ws.Exited() {
		// It exited by itself, before the timeout's or the
		// cancellation's kill could reach it.
		res.timedOut, res.cancelled = false, nil
	}
	switch {
	case res.timedOut || res.cancelled != nil:
		// Killed by us.
	case ws.Signaled():
		res.signal = ws.Signal().String()
	default:
		res.exit = st.ExitCode()
	}
	return res
}

// waitExited blocks until the process pid, a child not reaped yet, has
// exited, without reaping it. (waitid can fail otherwise only for a pid
// that is not an unreaped child, which cmd.Wait alone reaps.)
func waitExited(pid int) {
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// killGroup sends SIGKILL to the process group pgid.
func killGroup(pgid int) {
	_ = unix.Kill(-pgid, unix.SIGKILL)
}

// workDirPath is the directory the process starts in: the open directory
// d through /proc/self/fd, which the child (that holds a copy of d until
// it executes the program) resolves to d itself, so no path is resolved
// again between the check and the chdir. Without /proc it is the
// directory's host path.
func workDirPath(spec procSpec, d *os.File) string {
	p := fmt.Sprintf("/proc/self/fd/%d", d.Fd())
	if fi, err := os.Stat(p); err == nil {
		if st, err := d.Stat(); err == nil && os.SameFile(fi, st) {
			return p
		}
	}
	return spec.root.host(spec.dir.rel)
}
