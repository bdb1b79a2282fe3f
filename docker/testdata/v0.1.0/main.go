// Command goldengen writes the golden files of this directory with
// converge v0.1.0's own code (see README.md): the target a device agent
// stored through a TargetReconciler, and the labels v0.1.0 put on the
// containers of that target.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
	"github.com/convergekit/converge/docker/dockertest"
)

func main() {
	if err := run(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(dir string) error {
	ctx := context.Background()
	key := []byte(strings.Repeat("golden-key-not-a-secret-", 2)[:32])
	compose, err := os.ReadFile(filepath.Join(dir, "compose.yaml"))
	if err != nil {
		return err
	}
	p, err := docker.LoadCompose(ctx, compose, docker.LoadOptions{HashKey: key})
	if err != nil {
		return err
	}
	p.HashKey = key // as the device agent of v0.1.0 did before SetTarget
	eng := dockertest.New()
	eng.AddImage("converge-test/app:golden")
	store := converge.NewMemStore()
	r, err := converge.NewTargetReconciler(converge.TargetConfig[docker.Project]{Build: docker.TargetBuild(eng), Store: store})
	if err != nil {
		return err
	}
	if err := r.SetTarget(ctx, *p); err != nil {
		return err
	}
	stored, _, err := store.Target(ctx, converge.TargetDefaultName)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "target.json"), append(stored, '\n'), 0o644); err != nil {
		return err
	}
	g, err := p.Graph(eng)
	if err != nil {
		return err
	}
	w, err := converge.NewWalker(converge.Config{})
	if err != nil {
		return err
	}
	if _, err := w.Apply(ctx, g); err != nil {
		return err
	}
	labels := map[string]map[string]string{}
	for _, c := range eng.Containers() {
		labels[c.Name] = map[string]string{
			docker.LabelSpecHash:   c.Config.Labels[docker.LabelSpecHash],
			docker.LabelSpecFields: c.Config.Labels[docker.LabelSpecFields],
		}
	}
	b, err := json.MarshalIndent(labels, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "labels.json"), append(b, '\n'), 0o644)
}
