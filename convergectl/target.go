package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/convergekit/converge"
)

func init() {
	register(&command{
		name:    "targets",
		summary: "List the names of the targets stored for target reconcilers, with their revisions.",
		run:     runTargets,
	})
	register(&command{
		name:    "target",
		args:    "NAME",
		nargs:   1,
		summary: "Show the last target stored for the target reconciler NAME and its revision.",
		run:     runTarget,
	})
}

// targetView is a target as the target command prints it in JSON.
type targetView struct {
	Name     string          `json:"name"`
	Revision uint64          `json:"revision"`
	Sealed   bool            `json:"sealed"`
	KeyID    string          `json:"keyID,omitempty"`
	Target   json.RawMessage `json:"target,omitempty"`
}

// targetsError is a store that cannot name its targets (it is not a
// converge.TargetLister).
type targetsError struct{ store string }

func (e *targetsError) Error() string {
	return fmt.Sprintf("convergectl: the store (%s) cannot list its targets", e.store)
}

func runTargets(ctx context.Context, e *env, c *common, _ []string) error {
	st, closer, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	lister, ok := st.(converge.TargetLister)
	if !ok {
		return &targetsError{store: fmt.Sprintf("%T", st)}
	}
	names, err := lister.TargetNames(ctx)
	if err != nil {
		return err
	}
	out := []targetView{}
	for _, name := range names {
		raw, rev, err := st.Target(ctx, name)
		if errors.Is(err, converge.ErrStoreNotFound) {
			continue // removed since it was listed
		}
		if err != nil {
			return err
		}
		v := targetView{Name: name, Revision: rev}
		if id, ok := sealedValue(raw); ok {
			v.Sealed, v.KeyID = true, id
		}
		out = append(out, v)
	}
	if c.structured() {
		return c.emit(e.out, map[string]any{"targets": out})
	}
	if len(out) == 0 {
		fmt.Fprintln(e.errOut, "no targets in the store")
		return nil
	}
	t := newTable(e.out, "NAME", "REVISION", "VALUE")
	for _, v := range out {
		value := ""
		if v.Sealed {
			value = sealedText(v.KeyID)
		}
		t.row(v.Name, fmt.Sprint(v.Revision), value)
	}
	return t.flush()
}

func runTarget(ctx context.Context, e *env, c *common, args []string) error {
	st, closer, err := c.open(ctx, false)
	if err != nil {
		return err
	}
	defer closer.Close()
	name := args[0]
	raw, rev, err := st.Target(ctx, name)
	if errors.Is(err, converge.ErrStoreNotFound) {
		return &notFoundError{what: "target", name: name}
	}
	if errors.Is(err, converge.ErrSealed) {
		return &sealedError{what: "target", name: name, withKey: c.keyFile != "", err: err}
	}
	if err != nil {
		return err
	}
	v := targetView{Name: name, Revision: rev, Target: raw}
	if id, ok := sealedValue(raw); ok {
		v.Sealed, v.KeyID, v.Target = true, id, nil
	}
	if !c.showSecrets {
		v.redact()
	}
	if c.structured() {
		return c.emit(e.out, v)
	}
	fmt.Fprintf(e.out, "Name:      %s\nRevision:  %d\n", v.Name, v.Revision)
	if v.Sealed {
		fmt.Fprintf(e.out, "Target:    %s\n", sealedText(v.KeyID))
		return nil
	}
	fmt.Fprintln(e.out, "Target:")
	b, err := json.MarshalIndent(v.Target, "  ", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(e.out, "  %s\n", b)
	return nil
}
