package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/plan"
)

// TestHelpOnce: -h prints a command's usage once, to stdout, and exits 0;
// a bad flag prints the problem and the usage once, to stderr, and exits
// 2.
func TestHelpOnce(t *testing.T) {
	path := boltFixture(t, nil)
	for _, c := range commands {
		t.Run(c.name, func(t *testing.T) {
			for _, help := range []string{"-h", "--help"} {
				r := ctl(t, c.name, help)
				assert.Equal(t, exitOK, r.code)
				assert.Equal(t, 1, strings.Count(r.out, "usage: convergectl "+c.name), r.out)
				assert.Empty(t, r.err)
			}
			r := ctl(t, c.name, "--bolt", path, "--bogus")
			assert.Equal(t, exitUsage, r.code)
			assert.Empty(t, r.out)
			assert.Equal(t, 1, strings.Count(r.err, "usage: convergectl "+c.name), r.err)
			assert.Equal(t, 1, strings.Count(r.err, "flag provided but not defined: -bogus"), r.err)
		})
	}
}

// internalFixture is a bolt file holding one controller object of kind
// "host" and the records the library keeps for itself.
func internalFixture(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "internal.db")
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	ctx := context.Background()
	for _, key := range []string{"docker-hash-key/shop", converge.TargetRefreshKey("agent"), "converge.actions/reboot"} {
		_, err := st.Put(ctx, converge.StoreRecord{Key: key, Value: json.RawMessage(`{"x":1}`)})
		require.NoError(t, err)
	}
	_, err = st.Put(ctx, converge.StoreRecord{Key: "host/a", Value: json.RawMessage(`{"state":"ready"}`)})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	return path
}

// TestKindsHidesInternal: kinds lists controller kinds only, never the
// records the library keeps for itself (converge.IsInternalKind).
func TestKindsHidesInternal(t *testing.T) {
	path := internalFixture(t)
	var kinds struct {
		Kinds []struct {
			Kind    string `json:"kind"`
			Objects int    `json:"objects"`
		} `json:"kinds"`
	}
	ctlJSON(t, &kinds, "kinds", "--bolt", path)
	require.Len(t, kinds.Kinds, 1)
	assert.Equal(t, "host", kinds.Kinds[0].Kind)
	r := ctl(t, "kinds", "--bolt", path)
	require.Equal(t, exitOK, r.code, r.err)
	for _, internal := range []string{"docker-hash-key", "converge.refresh", "converge.actions"} {
		assert.NotContains(t, r.out, internal)
	}
	assert.Contains(t, r.out, "host")
}

// TestEmptyLists: a list with nothing in it says so on stderr, prints no
// lone header, and exits 0; JSON prints the empty list.
func TestEmptyLists(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "empty.db")
	st, err := boltstore.Open(empty, boltstore.Options{})
	require.NoError(t, err)
	require.NoError(t, st.Close())
	full := boltFixture(t, nil)
	tests := []struct {
		path string
		args []string
		want string
	}{
		{empty, []string{"kinds"}, "no controller objects in the store"},
		{empty, []string{"objects", "host"}, `no objects of kind "host"`},
		{full, []string{"objects", "nothing"}, `no objects of kind "nothing"`},
		{full, []string{"objects", "host", "--state", "gone"}, `no objects of kind "host" match the filters`},
		{empty, []string{"plans"}, "no plans in the store"},
		{full, []string{"plans", "--state", "Aborted"}, `no plans in state "Aborted"`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := ctl(t, append(tt.args, "--bolt", tt.path)...)
			assert.Equal(t, exitOK, r.code)
			assert.Empty(t, r.out)
			assert.Equal(t, tt.want+"\n", r.err)
			r = ctl(t, append(tt.args, "--bolt", tt.path, "-o", "json")...)
			assert.Equal(t, exitOK, r.code)
			assert.Empty(t, r.err)
			assert.Contains(t, r.out, "[]")
		})
	}
}

// TestTargets lists the target names with their revisions; sealed ones
// say so without the key.
func TestTargets(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	sealer, err := converge.NewAESGCMSealer(key)
	require.NoError(t, err)
	for _, tt := range []struct {
		name   string
		sealer converge.Sealer
	}{{"clear", nil}, {"sealed", sealer}} {
		t.Run(tt.name, func(t *testing.T) {
			path := boltFixture(t, tt.sealer)
			var got struct {
				Targets []targetView `json:"targets"`
			}
			ctlJSON(t, &got, "targets", "--bolt", path)
			require.Len(t, got.Targets, 1)
			assert.Equal(t, "agent", got.Targets[0].Name)
			assert.Equal(t, uint64(2), got.Targets[0].Revision)
			assert.Equal(t, tt.sealer != nil, got.Targets[0].Sealed)
			assert.Empty(t, got.Targets[0].Target, "the list has no values")
			r := ctl(t, "targets", "--bolt", path)
			require.Equal(t, exitOK, r.code, r.err)
			lines := strings.Split(strings.TrimSpace(r.out), "\n")
			require.Len(t, lines, 2, r.out)
			assert.Regexp(t, `^NAME\s+REVISION\s+VALUE$`, lines[0])
			assert.Regexp(t, `^agent\s+2\s+`, lines[1])
			assert.Equal(t, tt.sealer != nil, strings.Contains(lines[1], "sealed with key "+converge.SealKeyID(key)))
		})
	}
	r := ctl(t, "targets", "--bolt", internalFixture(t))
	assert.Equal(t, exitOK, r.code)
	assert.Empty(t, r.out)
	assert.Equal(t, "no targets in the store\n", r.err)
}

// TestYAML: -o yaml prints the documented JSON shapes as YAML, for every
// read command.
func TestYAML(t *testing.T) {
	path := boltFixture(t, nil)
	for _, args := range [][]string{
		{"kinds"}, {"objects", "host"}, {"object", "host", "good"}, {"plans"}, {"plan", "rollout"}, {"targets"}, {"target", "agent"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			args = append(args, "--bolt", path)
			var fromJSON, fromYAML any
			ctlJSON(t, &fromJSON, args...)
			r := ctl(t, append(args, "-o", "yaml")...)
			require.Equal(t, exitOK, r.code, r.err)
			assert.False(t, json.Valid([]byte(r.out)), "not JSON: %s", r.out)
			require.NoError(t, yaml.Unmarshal([]byte(r.out), &fromYAML), r.out)
			assert.Equal(t, fromJSON, fromYAML)
		})
	}
}

// flappingPlan writes to a bolt file the plan "flap", created, whose
// history then holds its command flapping between SchedulableWait and
// Schedulable n times, as a plan runner of old versions stored it.
func flappingPlan(t *testing.T, n int) string {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "flap.db")
	st, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, st.Close()) }()
	runner, err := plan.NewRunner(st, plan.RunnerConfig{})
	require.NoError(t, err)
	require.NoError(t, runner.Create(ctx, &plan.Document{Spec: plan.Plan{ID: "flap", Commands: []plan.Command{{
		Kind:    "update",
		Targets: []plan.CommandTargets{{Group: "workers", Discovery: plan.CommandDiscovery{Static: []string{"w1"}}}},
	}}}}))
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var hist []converge.HistoryEntry
	for range n {
		for _, step := range [][2]plan.State{{plan.StateSchedulableWait, plan.StateSchedulable}, {plan.StateSchedulable, plan.StateSchedulableWait}} {
			at = at.Add(time.Second)
			hist = append(hist,
				converge.HistoryEntry{At: at, From: string(step[0]), To: string(step[1]), Reason: "plan"},
				converge.HistoryEntry{At: at, From: string(step[0]), To: string(step[1]), Reason: "plan", Subject: &converge.HistorySubject{Command: 0}})
		}
	}
	rec, err := st.Get(ctx, plan.KeyPrefix+"flap")
	require.NoError(t, err)
	_, err = st.Put(ctx, rec, hist...)
	require.NoError(t, err)
	return path
}

// TestPlanHistoryCollapsed: a plan whose stored history flaps between two
// states prints each transition once, with how many times it came.
func TestPlanHistoryCollapsed(t *testing.T) {
	const flaps = 20
	path := flappingPlan(t, flaps)
	r := ctl(t, "plan", "flap", "--bolt", path)
	require.Equal(t, exitOK, r.code, r.err)
	_, history, ok := strings.Cut(r.out, "History:\n")
	require.True(t, ok, r.out)
	lines := strings.Split(strings.TrimRight(history, "\n"), "\n")
	// The header, "plan created", and the block of four transitions.
	require.Len(t, lines, 6, history)
	assert.Contains(t, lines[0], "REPEATED")
	assert.Contains(t, lines[1], "plan created")
	for _, l := range lines[2:] {
		assert.Contains(t, l, fmt.Sprintf("%d times, last 2026-12-01T10:00:", flaps))
	}
	assert.Regexp(t, `SchedulableWait\s+Schedulable\s+-\s+plan\s`, lines[2])
	assert.Regexp(t, `SchedulableWait\s+Schedulable\s+-\s+command 0\s`, lines[3])

	// JSON keeps every stored entry.
	var v planView
	ctlJSON(t, &v, "plan", "flap", "--bolt", path)
	assert.Len(t, v.History, 1+4*flaps)
}

func TestCollapseHistory(t *testing.T) {
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	entry := func(i int, from, to string) converge.HistoryEntry {
		return converge.HistoryEntry{At: at.Add(time.Duration(i) * time.Second), From: from, To: to}
	}
	type row struct {
		from, to string
		times    int
		last     int
	}
	tests := []struct {
		name string
		hist []converge.HistoryEntry
		want []row
	}{
		{"empty", nil, []row{}},
		{"no repeats", []converge.HistoryEntry{entry(0, "", "A"), entry(1, "A", "B")}, []row{{"", "A", 1, 0}, {"A", "B", 1, 1}}},
		{"one entry repeated", []converge.HistoryEntry{entry(0, "A", "A"), entry(1, "A", "A"), entry(2, "A", "A"), entry(3, "A", "B")},
			[]row{{"A", "A", 3, 2}, {"A", "B", 1, 3}}},
		{"flapping with a tail", []converge.HistoryEntry{entry(0, "", "W"), entry(1, "W", "S"), entry(2, "S", "W"), entry(3, "W", "S"), entry(4, "S", "W"), entry(5, "W", "S"), entry(6, "S", "C")},
			[]row{{"", "W", 1, 0}, {"W", "S", 2, 3}, {"S", "W", 2, 4}, {"W", "S", 1, 5}, {"S", "C", 1, 6}}},
		{"a different reason breaks a run", []converge.HistoryEntry{entry(0, "A", "A"), {At: at, From: "A", To: "A", Reason: "x"}},
			[]row{{"A", "A", 1, 0}, {"A", "A", 1, 0}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := []row{}
			for _, r := range collapseHistory(tt.hist) {
				got = append(got, row{r.entry.From, r.entry.To, r.times, int(r.last.Sub(at) / time.Second)})
			}
			assert.Equal(t, tt.want, got)
		})
	}
}
