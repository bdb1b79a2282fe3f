package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
	"github.com/convergekit/converge/controller"
	"github.com/convergekit/converge/plan"
)

// boltFixture writes the fixture (see fill) to a new bolt file, sealed
// with sealer when it is not nil, and returns its path.
func boltFixture(t *testing.T, sealer converge.Sealer) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "state.db")
	st, err := boltstore.Open(path, boltstore.Options{Sealer: sealer})
	require.NoError(t, err)
	fill(t, st)
	require.NoError(t, st.Close())
	return path
}

// objectsJSON is the shape of `objects -o json`.
type objectsJSON struct {
	Kind         string       `json:"kind"`
	Objects      []objectView `json:"objects"`
	SealedHidden int          `json:"sealedHidden"`
}

func keys(objs []objectView) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

// TestBoltObjects lists and shows the objects a controller left in a bolt
// file, with every filter, as JSON and as a table, and leaves the file as
// it was (it is opened read-only).
func TestBoltObjects(t *testing.T) {
	path := boltFixture(t, nil)
	before, err := os.ReadFile(path)
	require.NoError(t, err)

	var kinds struct {
		Kinds []struct {
			Kind    string `json:"kind"`
			Objects int    `json:"objects"`
		} `json:"kinds"`
	}
	ctlJSON(t, &kinds, "kinds", "--bolt", path)
	require.Len(t, kinds.Kinds, 1, "plans are not a kind")
	assert.Equal(t, "host", kinds.Kinds[0].Kind)
	assert.Equal(t, 4, kinds.Kinds[0].Objects)

	for _, tc := range []struct {
		flags []string
		want  []string
	}{
		{nil, []string{"bad", "good", "slow", "term"}},
		{[]string{"--state", "ready"}, []string{"good"}},
		{[]string{"--quarantined"}, []string{"bad"}},
		{[]string{"--terminal"}, []string{"term"}},
		{[]string{"--halted"}, []string{"bad", "term"}},
		{[]string{"--above-sla"}, []string{"slow"}},
		{[]string{"--state", "provisioning", "--quarantined"}, []string{"bad"}},
		{[]string{"--state", "ready", "--quarantined"}, []string{}},
	} {
		var got objectsJSON
		ctlJSON(t, &got, append([]string{"objects", "host", "--bolt", path}, tc.flags...)...)
		assert.Equal(t, "host", got.Kind)
		assert.Equal(t, tc.want, keys(got.Objects), "%v", tc.flags)
	}

	var all objectsJSON
	ctlJSON(t, &all, "objects", "--bolt", path, "host")
	bad := all.Objects[0]
	assert.Equal(t, controller.State("provisioning"), bad.State)
	assert.Equal(t, controller.HaltQuarantined, bad.Halted)
	assert.Equal(t, 1, bad.Retries)
	require.NotNil(t, bad.LastError)
	assert.Equal(t, "connection refused", bad.LastError.Error)
	assert.False(t, bad.Sealed)
	assert.Nil(t, bad.Data, "lists leave data out")
	assert.Nil(t, bad.RecentFailures, "lists leave the recent failures out")
	require.NotNil(t, bad.FailingSince)
	assert.True(t, bad.LastError.At.Equal(*bad.FailingSince), "failing since its only failure")
	assert.NotNil(t, bad.Since)

	// The table, for people.
	r := ctl(t, "objects", "host", "--bolt", path, "--quarantined")
	require.Equal(t, 0, r.code, r.err)
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	require.Len(t, lines, 2)
	assert.Regexp(t, `^KEY +STATE +AGE +HALTED +RETRIES +SLA +LAST ERROR$`, lines[0])
	assert.Regexp(t, `^bad +provisioning +\S+ +quarantined +1 +- +\S+ ago: connection refused$`, lines[1])

	// One object with its data and history.
	var good objectView
	ctlJSON(t, &good, "object", "host", "good", "--bolt", path)
	assert.Equal(t, controller.State("ready"), good.State)
	assert.JSONEq(t, `{"ip":"10.0.0.1"}`, string(good.Data))
	require.Len(t, good.History, 2)
	assert.Equal(t, "added", good.History[0].Reason)
	assert.Equal(t, "provisioning", good.History[1].From)
	assert.Equal(t, "ready", good.History[1].To)
	assert.Equal(t, "booted", good.History[1].Reason)

	assert.Nil(t, good.FailingSince, "never failed")
	assert.Empty(t, good.RecentFailures)
	assert.Equal(t, 9, good.Priority)
	r = ctl(t, "object", "host", "good", "--bolt", path)
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "Priority:  9\n")

	var badOne objectView
	ctlJSON(t, &badOne, "object", "host", "bad", "--bolt", path)
	require.Len(t, badOne.RecentFailures, 1)
	assert.Equal(t, controller.Failure{At: badOne.LastError.At, State: "provisioning", Error: "connection refused"}, badOne.RecentFailures[0])
	require.NotNil(t, badOne.FailingSince)
	assert.True(t, badOne.RecentFailures[0].At.Equal(*badOne.FailingSince))

	r = ctl(t, "object", "host", "bad", "--bolt", path)
	require.Equal(t, 0, r.code, r.err)
	assert.NotContains(t, r.out, "Priority:", "the default, 0, goes without saying")
	for _, want := range []string{"Key:       bad", "State:     provisioning since ", "Halted:    quarantined (convergectl release host bad)", "LastError: ", "connection refused", `Data:      {"ip":"10.0.0.2"}`, "Failing:   since ", "History:", "quarantined: connection refused"} {
		assert.Contains(t, r.out, want)
	}
	assert.Regexp(t, `(?m)^Recent failures:\n +AT +STATE +ERROR\n +\S+ +provisioning +connection refused$`, r.out)

	after, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, before, after, "reading changes nothing in the file")
}

// TestBoltRelease releases a quarantined object: the store no longer has
// it halted, and its history records the release and who did it.
func TestBoltRelease(t *testing.T) {
	path := boltFixture(t, nil)
	var out struct {
		Released bool            `json:"released"`
		Was      controller.Halt `json:"was"`
		Object   objectView      `json:"object"`
	}
	ctlJSON(t, &out, "release", "host", "bad", "--bolt", path, "--as", "alice")
	assert.True(t, out.Released)
	assert.Equal(t, controller.HaltQuarantined, out.Was)
	assert.Empty(t, out.Object.Halted)
	assert.Equal(t, 0, out.Object.Retries)

	// Read back through the store itself.
	st, err := boltstore.Open(path, boltstore.Options{ReadOnly: true})
	require.NoError(t, err)
	rec, err := st.Get(context.Background(), "host/bad")
	require.NoError(t, err)
	var o controller.Object
	require.NoError(t, json.Unmarshal(rec.Value, &o))
	assert.Empty(t, o.Halted)
	hist, err := st.History(context.Background(), "host/bad")
	require.NoError(t, err)
	require.NoError(t, st.Close())
	last := hist[len(hist)-1]
	assert.Equal(t, controller.ReasonReleased, last.Reason)
	assert.Equal(t, "alice", last.By)

	r := ctl(t, "object", "host", "bad", "--bolt", path)
	assert.Regexp(t, `provisioning +provisioning +alice +released`, r.out)

	// Releasing it again changes nothing, and says so.
	r = ctl(t, "release", "host", "bad", "--bolt", path)
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, `host "bad" is not halted`)

	// Without --as, the user running the command did it.
	r = ctl(t, "release", "host", "term", "--bolt", path)
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, `released host "term" (was terminal)`)
	var term objectView
	ctlJSON(t, &term, "object", "host", "term", "--bolt", path)
	assert.Equal(t, currentUser(), term.History[len(term.History)-1].By)
}

// TestBoltPlans lists and shows plans, with their progress per command
// and host, then aborts one and retries the failed one, each recorded
// with who asked.
func TestBoltPlans(t *testing.T) {
	path := boltFixture(t, nil)
	var list struct {
		Plans []planView `json:"plans"`
	}
	ctlJSON(t, &list, "plans", "--bolt", path)
	require.Len(t, list.Plans, 3)
	byID := map[string]planView{}
	for _, p := range list.Plans {
		byID[p.ID] = p
	}
	assert.Equal(t, plan.StateApplyFailed, byID["rollout"].State)
	assert.Equal(t, plan.StateCompleted, byID["done"].State)
	assert.Equal(t, plan.StateNewPlan, byID["next"].State)
	assert.Equal(t, 1, byID["rollout"].Hosts.Failed)
	assert.Equal(t, 1, byID["done"].CommandsCompleted)

	ctlJSON(t, &list, "plans", "--bolt", path, "--state", "ApplyFailed")
	require.Len(t, list.Plans, 1)
	assert.Equal(t, "rollout", list.Plans[0].ID)

	var p planView
	ctlJSON(t, &p, "plan", "rollout", "--bolt", path)
	require.Len(t, p.Commands, 1)
	cmd := p.Commands[0]
	assert.Equal(t, "update", cmd.Kind)
	assert.Equal(t, plan.StateApplyFailed, cmd.State)
	var w2 *hostView
	for i := range cmd.Targets {
		if cmd.Targets[i].Name == "w2" {
			w2 = &cmd.Targets[i]
		}
	}
	require.NotNil(t, w2)
	assert.Equal(t, "workers", w2.Group)
	assert.Equal(t, plan.TargetApplyFailed, w2.State)
	assert.Equal(t, "disk full", w2.Reason)
	assert.NotEmpty(t, p.History)

	r := ctl(t, "plan", "rollout", "--bolt", path)
	require.Equal(t, 0, r.code, r.err)
	assert.Regexp(t, `(?m)^ +0 +workers +w2 +SignalApplyFailed +0 +\S+ +disk full$`, r.out)
	assert.Regexp(t, `(?m)^ +0 +update +ApplyFailed +1/3 `, r.out)

	// Abort the plan that has not started, as bob.
	var aborted planView
	ctlJSON(t, &aborted, "abort", "next", "--bolt", path, "--as", "bob", "--reason", "wrong image")
	assert.Equal(t, "wrong image", aborted.Abort)
	ctlJSON(t, &p, "plan", "next", "--bolt", path)
	last := p.History[len(p.History)-1]
	assert.Equal(t, "abort requested: wrong image", last.Reason)
	assert.Equal(t, "bob", last.By)

	// Retry the failed one, as carol: w2 is pending again.
	var retried planView
	ctlJSON(t, &retried, "retry", "rollout", "--bolt", path, "--as", "carol")
	assert.False(t, retried.State.IsError(), retried.State)
	ctlJSON(t, &p, "plan", "rollout", "--bolt", path)
	for _, h := range p.Commands[0].Targets {
		if h.Name == "w2" {
			assert.Equal(t, plan.TargetPending, h.State)
		}
	}
	var byCarol int
	for _, h := range p.History {
		if h.By == "carol" {
			byCarol++
		}
	}
	assert.GreaterOrEqual(t, byCarol, 2, "the retry and the host it sends back are carol's")

	// What cannot be done is refused.
	r = ctl(t, "retry", "done", "--bolt", path, "-o", "json")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, `"kind":"conflict"`)
	r = ctl(t, "abort", "done", "--bolt", path)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, "finished")
}

// TestBoltTarget shows a target reconciler's last target and revision.
func TestBoltTarget(t *testing.T) {
	path := boltFixture(t, nil)
	var tv targetView
	ctlJSON(t, &tv, "target", "agent", "--bolt", path)
	assert.Equal(t, uint64(2), tv.Revision)
	assert.JSONEq(t, `{"image":"app:2"}`, string(tv.Target))
	r := ctl(t, "target", "agent", "--bolt", path)
	require.Equal(t, 0, r.code, r.err)
	assert.Contains(t, r.out, "Revision:  2")
	assert.Contains(t, r.out, `"image": "app:2"`)
}

// TestBoltLocked: a bolt file a running agent holds is refused, for
// writing and for reading (bbolt lets no reader share it), quickly and
// with an error that says what to do; nothing hangs.
func TestBoltLocked(t *testing.T) {
	path := boltFixture(t, nil)
	agent, err := boltstore.Open(path, boltstore.Options{})
	require.NoError(t, err)
	defer agent.Close()

	for _, args := range [][]string{
		{"release", "host", "bad"},
		{"objects", "host"},
		{"plans"},
	} {
		r := ctl(t, append(args, "--bolt", path)...)
		assert.Equal(t, 1, r.code, args)
		assert.Contains(t, r.err, "is held by another process", args)
		assert.Contains(t, r.err, path)
		r = ctl(t, append(args, "--bolt", path, "-o", "json")...)
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.err, `"kind":"locked"`)
	}
	r := ctl(t, "release", "host", "bad", "--bolt", path)
	assert.Contains(t, r.err, "cannot be written while that process has it open")

	// Once the agent is gone, it opens.
	require.NoError(t, agent.Close())
	r = ctl(t, "objects", "host", "--bolt", path)
	assert.Equal(t, 0, r.code, r.err)
}

// TestBoltSealed: without the key, sealed values are shown as sealed and
// never printed; with the key file, they are.
func TestBoltSealed(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	sealer, err := converge.NewAESGCMSealer(key)
	require.NoError(t, err)
	path := boltFixture(t, sealer)
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte("# the store's key\n"+hexOf(key)+"\n"), 0o600))
	id := converge.SealKeyID(key)

	secret := "10.0.0.1"
	for _, args := range [][]string{
		{"objects", "host"},
		{"object", "host", "good"},
		{"plans"},
		{"plan", "rollout"},
		{"target", "agent"},
	} {
		for _, o := range []string{"table", "json"} {
			r := ctl(t, append(args, "--bolt", path, "-o", o)...)
			require.Equal(t, 0, r.code, "%v: %s", args, r.err)
			assert.NotContains(t, r.out+r.err, secret, args)
			assert.NotContains(t, r.out+r.err, "app:2", args)
			if o == "table" {
				assert.Contains(t, r.out, "sealed with key "+id, args)
			} else {
				assert.Contains(t, r.out, `"sealed": true`, args)
			}
		}
	}
	var obj objectView
	ctlJSON(t, &obj, "object", "host", "good", "--bolt", path)
	assert.True(t, obj.Sealed)
	assert.Equal(t, id, obj.KeyID)
	assert.Empty(t, obj.State)
	assert.NotEmpty(t, obj.History, "history is kept in clear")

	var filtered objectsJSON
	ctlJSON(t, &filtered, "objects", "host", "--bolt", path, "--quarantined")
	assert.Empty(t, filtered.Objects)
	assert.Equal(t, 4, filtered.SealedHidden)

	// A write needs the key.
	r := ctl(t, "release", "host", "bad", "--bolt", path, "-o", "json")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, `"kind":"sealed"`)
	r = ctl(t, "release", "host", "bad", "--bolt", path)
	assert.Contains(t, r.err, `convergectl: host "bad" is sealed: give --key-file with a key`)

	// With the key, everything reads.
	ctlJSON(t, &obj, "object", "host", "good", "--bolt", path, "--key-file", keyFile)
	assert.False(t, obj.Sealed)
	assert.JSONEq(t, `{"ip":"10.0.0.1"}`, string(obj.Data))
	var tv targetView
	ctlJSON(t, &tv, "target", "agent", "--bolt", path, "--key-file", keyFile)
	assert.JSONEq(t, `{"image":"app:2"}`, string(tv.Target))
	ctlJSON(t, &filtered, "objects", "host", "--bolt", path, "--quarantined", "--key-file", keyFile)
	assert.Equal(t, []string{"bad"}, keys(filtered.Objects))
	var rel struct {
		Released bool `json:"released"`
	}
	ctlJSON(t, &rel, "release", "host", "bad", "--bolt", path, "--key-file", keyFile)
	assert.True(t, rel.Released)

	// A wrong key opens nothing, and a key file that is not hex is
	// refused without printing it.
	wrong := filepath.Join(t.TempDir(), "wrong")
	require.NoError(t, os.WriteFile(wrong, []byte(hexOf([]byte("fedcba9876543210fedcba9876543210"))), 0o600))
	r = ctl(t, "object", "host", "good", "--bolt", path, "--key-file", wrong, "-o", "json")
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, `"kind":"sealed"`)
	assert.Contains(t, r.err, `host \"good\" is sealed with a key that --key-file does not hold`)
	notHex := filepath.Join(t.TempDir(), "nothex")
	require.NoError(t, os.WriteFile(notHex, []byte("s3cr3t-not-hex\n"), 0o600))
	r = ctl(t, "objects", "host", "--bolt", path, "--key-file", notHex)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, `nothex" line 1: not a hex key`)
	assert.NotContains(t, r.err, "s3cr3t")
	// A key file others may read is refused, as the program that wrote it
	// refuses it (converge.ReadKeyFile).
	open := filepath.Join(t.TempDir(), "open")
	require.NoError(t, os.WriteFile(open, []byte(hexOf(key)+"\n"), 0o644))
	require.NoError(t, os.Chmod(open, 0o644))
	r = ctl(t, "objects", "host", "--bolt", path, "--key-file", open)
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, "may be read by others (mode 0644)")
	r = ctl(t, "objects", "host", "--bolt", path, "--key-file", filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, 1, r.code)
	assert.Contains(t, r.err, `missing": does not exist`)
}

func hexOf(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// TestUsageAndErrors: bad command lines exit 2 with what is wrong; a
// store, object, plan or target that is not there exits 1 naming it;
// every command answers -h.
func TestUsageAndErrors(t *testing.T) {
	path := boltFixture(t, nil)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: convergectl COMMAND"},
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"objects", "host"}, 2, "name the store: --bolt FILE or --pg DSN"},
		{[]string{"objects", "host", "--bolt", path, "--pg", "postgres://x"}, 2, "give one"},
		{[]string{"objects", "--bolt", path}, 2, "objects takes KIND, got 0 arguments"},
		{[]string{"objects", "host", "--bolt", path, "--bogus"}, 2, "flag provided but not defined: -bogus"},
		{[]string{"objects", "host", "--bolt", path, "-o", "xml"}, 2, `-o "xml": the formats are table, json and yaml`},
		{[]string{"objects", "a/b", "--bolt", path}, 2, `kind "a/b"`},
		{[]string{"objects", "plan", "--bolt", path}, 2, `kind "plan": the library keeps these records for itself`},
		{[]string{"object", "converge.refresh", "agent", "--bolt", path}, 2, `kind "converge.refresh": the library keeps these records for itself`},
		{[]string{"object", "host", "nope", "--bolt", path}, 1, `convergectl: host "nope" is not in the store`},
		{[]string{"release", "host", "nope", "--bolt", path}, 1, `host "nope" is not in the store`},
		{[]string{"plan", "nope", "--bolt", path}, 1, `plan "nope" is not in the store`},
		{[]string{"abort", "nope", "--bolt", path}, 1, `plan "nope" is not in the store`},
		{[]string{"target", "nope", "--bolt", path}, 1, `target "nope" is not in the store`},
		{[]string{"objects", "host", "--bolt", filepath.Join(t.TempDir(), "missing.db")}, 1, "no such file"},
	} {
		r := ctl(t, tc.args...)
		assert.Equal(t, tc.code, r.code, "%v: %s", tc.args, r.err)
		assert.Contains(t, r.err, tc.want, tc.args)
		assert.Empty(t, r.out, tc.args)
	}
	r := ctl(t, "object", "host", "nope", "--bolt", path, "-o", "json")
	var e struct {
		Error struct{ Kind, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(r.err), &e), r.err)
	assert.Equal(t, "not-found", e.Error.Kind)
	assert.Contains(t, e.Error.Message, `"nope"`)

	for _, c := range commands {
		r := ctl(t, c.name, "-h")
		assert.Equal(t, 0, r.code, c.name)
		assert.Contains(t, r.out, "usage: convergectl "+c.name, c.name)
		assert.Contains(t, r.out, "-bolt FILE", c.name)
		if c.write {
			assert.Contains(t, r.out, "-as", c.name)
		}
	}
	r = ctl(t, "-h")
	assert.Equal(t, 0, r.code)
	assert.Contains(t, r.out, "Exit codes: 0")
}
