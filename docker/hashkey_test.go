package docker_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/docker"
)

func TestLoadHashKeyIsCreatedOnceAndKept(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	first, err := docker.LoadHashKey(ctx, store, "shop")
	require.NoError(t, err)
	assert.Len(t, first, docker.HashKeySize)
	again, err := docker.LoadHashKey(ctx, store, "shop")
	require.NoError(t, err)
	assert.Equal(t, first, again, "kept")
	rec, err := store.Get(ctx, docker.HashKeyRecord("shop"))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), rec.Version, "written once")
	other, err := docker.LoadHashKey(ctx, store, "blog")
	require.NoError(t, err)
	assert.NotEqual(t, first, other, "one random key per project")
}

// racedStore is a store in which another process creates the record
// between a caller's read, which found nothing, and its create.
type racedStore struct {
	converge.Store
	theirs []byte
	once   sync.Once
}

func (s *racedStore) Put(ctx context.Context, rec converge.StoreRecord, h ...converge.HistoryEntry) (uint64, error) {
	s.once.Do(func() {
		_, err := s.Store.Put(ctx, converge.StoreRecord{Key: rec.Key, Value: []byte(`{"key":"` + base64.StdEncoding.EncodeToString(s.theirs) + `"}`)})
		if err != nil {
			panic(err)
		}
	})
	return s.Store.Put(ctx, rec, h...)
}

func TestLoadHashKeyRacingProcessesAgree(t *testing.T) {
	theirs := bytes.Repeat([]byte{7}, docker.HashKeySize)
	store := &racedStore{Store: converge.NewMemStore(), theirs: theirs}
	k, err := docker.LoadHashKey(context.Background(), store, "shop")
	require.NoError(t, err)
	assert.Equal(t, theirs, k, "the key the other process created first")
}

func TestLoadHashKeyRefusesADamagedRecord(t *testing.T) {
	for name, value := range map[string]string{
		"not an object": `"key"`,
		"too short":     `{"key":"AAECAwQFBgcICQ=="}`,
		"no key":        `{"other":1}`,
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := converge.NewMemStore()
			_, err := store.Put(ctx, converge.StoreRecord{Key: docker.HashKeyRecord("shop"), Value: []byte(value)})
			require.NoError(t, err)
			_, err = docker.LoadHashKey(ctx, store, "shop")
			require.ErrorIs(t, err, docker.ErrBadHashKey)
			assert.Equal(t, "docker: hash key record docker-hash-key/shop: not a hash key", err.Error())
			rec, err := store.Get(ctx, docker.HashKeyRecord("shop"))
			require.NoError(t, err)
			assert.Equal(t, value, string(rec.Value), "left as it is")
		})
	}
}

// TestLoadHashKeyKeepsContainersAcrossRestarts: a program that takes its
// hash key from its store computes the same labels after a restart, so
// nothing is recreated; the labels are not those of the key derived from
// the project name, which anyone could recompute.
func TestLoadHashKeyKeepsContainersAcrossRestarts(t *testing.T) {
	ctx := context.Background()
	store := converge.NewMemStore()
	f := newFake()
	project := func() *docker.Project {
		key, err := docker.LoadHashKey(ctx, store, "shop")
		require.NoError(t, err)
		return &docker.Project{Name: "shop", HashKey: key, Containers: []docker.ContainerSpec{{Service: "db", Image: "app:1",
			Env: map[string]string{"DB_PASSWORD": "hunter2"}}}}
	}
	apply(t, f, project())
	c, _ := f.Container("shop-db")

	f.ResetCalls()
	rep := apply(t, f, project()) // the program restarted
	assert.Empty(t, rep.IDs(converge.OutcomeChanged))
	assert.Zero(t, f.WriteCalls())

	// The same project without the key: its labels are not the ones the
	// container carries.
	unkeyed := newFake()
	p := project()
	p.HashKey = nil
	apply(t, unkeyed, p)
	u, _ := unkeyed.Container("shop-db")
	assert.NotEqual(t, u.Config.Labels[docker.LabelSpecHash], c.Config.Labels[docker.LabelSpecHash])
	assert.NotEqual(t, u.Config.Labels[docker.LabelSpecFields], c.Config.Labels[docker.LabelSpecFields])
}
