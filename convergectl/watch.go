package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"time"
)

// defaultWatchInterval is how often --watch reads the store again.
const defaultWatchInterval = 2 * time.Second

// storeWatcher is a store that announces changes (pgstore's LISTEN/NOTIFY;
// see converge.Queue.Watch).
type storeWatcher interface {
	Watch(ctx context.Context, prefix string, fn func(key string)) (stop func(), err error)
}

// rendering is one reading of the store by a command: what it printed,
// and how it failed. key tells two readings apart: it leaves out what
// changes with the clock alone (the ages in a table).
type rendering struct {
	key, out, errOut string
	err              error
}

// watchLoop prints render's reading, and again every time it changes,
// until ctx ends: render runs at once, every interval, and when wake
// says the store changed. A first reading that fails ends the loop with
// its error; a later one is printed (once while it lasts), and the loop
// goes on, written by report. sep is written between two readings.
func watchLoop(ctx context.Context, out, errOut io.Writer, interval time.Duration, wake <-chan struct{}, sep string, report func(io.Writer, error), render func() rendering) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	last, first := "", true
	for {
		r := render()
		if ctx.Err() != nil {
			return nil
		}
		if first && r.err != nil {
			return r.err
		}
		key := r.key
		if r.err != nil {
			key = "error: " + r.err.Error()
		}
		if first || key != last {
			if !first && sep != "" {
				fmt.Fprint(out, sep)
			}
			fmt.Fprint(out, r.out)
			fmt.Fprint(errOut, r.errOut)
			if r.err != nil {
				report(errOut, r.err)
			}
			last, first = key, false
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-wake:
		}
	}
}

// watch runs the read command c with com and args as --watch asks: see
// watchLoop. A database store is kept open, and its watch (where it has
// one) wakes the loop; a bolt file is opened for each reading, so that the
// program that owns it can open it in between.
func watch(ctx context.Context, e *env, c *command, com *common, args []string) error {
	interval := com.watchInterval
	if interval <= 0 {
		return &usageError{msg: fmt.Sprintf("--watch-interval %s: give a duration above zero", interval)}
	}
	wake := make(chan struct{}, 1)
	if com.pg != "" {
		st, closer, err := com.open(ctx, false)
		if err != nil {
			return err
		}
		defer closer.Close()
		com.kept = st
		if w, ok := st.(storeWatcher); ok {
			stop, err := w.Watch(ctx, "", func(string) {
				select {
				case wake <- struct{}{}:
				default:
				}
			})
			if err == nil {
				defer stop()
			}
			// Without a watch, polling alone sees the changes.
		}
	}
	keyed := *com
	keyed.output = "json"
	sep := ""
	switch com.output {
	case "yaml":
		sep = "---\n"
	case "table":
		sep = "\n"
	}
	read := func(com *common) rendering {
		var out, errOut bytes.Buffer
		err := c.run(ctx, &env{out: &out, errOut: &errOut, now: time.Now()}, com, args)
		return rendering{key: out.String() + errOut.String(), out: out.String(), errOut: errOut.String(), err: err}
	}
	reportErr := func(w io.Writer, err error) { report(w, com.json(), err) }
	return watchLoop(ctx, e.out, e.errOut, interval, wake, sep, reportErr, func() rendering {
		r := read(com)
		if r.err == nil && !com.structured() {
			// A table shows ages, which change with the clock alone: tell
			// readings apart by their JSON.
			k := read(&keyed)
			r.key, r.err = k.key, k.err
		}
		return r
	})
}

// nopCloser closes nothing: a store kept open for the readings of a
// watch is closed once, when the watch ends.
type nopCloser struct{}

func (nopCloser) Close() error { return nil }
