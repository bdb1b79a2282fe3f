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
	if c.json() {
		return writeJSON(e.out, v)
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
