package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
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
