package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/convergekit/converge"
)

// PullRecordKey is the key of the converge.Store record in which the
// package keeps the time of the last pull of image ref for project, for
// PullRefresh (Project.PullRecords).
func PullRecordKey(project, ref string) string {
	return "docker-pull/" + project + "/" + normalizeRef(ref)
}

// ErrBadPullRecord means a pull record (PullRecordKey) holds no time: it
// is damaged or another program wrote it. The image is not pulled on its
// account; the error names the record.
var ErrBadPullRecord = errors.New("not a pull record")

// pullRecord is the JSON document of a pull record.
type pullRecord struct {
	// Pulled is when the pull finished, as the process's clock read it.
	Pulled time.Time `json:"pulled"`
}

// pullRecords reads and writes the pull records of one project.
type pullRecords struct {
	store   converge.Store
	project string
	clock   func() time.Time
}

func (r *pullRecords) now() time.Time {
	if r.clock != nil {
		return r.clock()
	}
	return time.Now()
}

// last returns the time of the last recorded pull of ref; ok is false
// when none is recorded.
func (r *pullRecords) last(ctx context.Context, ref string) (time.Time, bool, error) {
	key := PullRecordKey(r.project, ref)
	rec, err := r.store.Get(ctx, key)
	if errors.Is(err, converge.ErrStoreNotFound) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, storeRecordErr("pull record", key, err)
	}
	var doc pullRecord
	if err := json.Unmarshal(rec.Value, &doc); err != nil || doc.Pulled.IsZero() {
		return time.Time{}, false, fmt.Errorf("pull record %s: %w", key, ErrBadPullRecord)
	}
	return doc.Pulled, true, nil
}

// record writes now as the time of the last pull of ref. A write that
// another process made first (converge.ErrStoreStale) stands: it recorded
// a pull as recent.
func (r *pullRecords) record(ctx context.Context, ref string) error {
	key := PullRecordKey(r.project, ref)
	value, err := json.Marshal(pullRecord{Pulled: r.now()})
	if err != nil {
		return err
	}
	var version uint64
	rec, err := r.store.Get(ctx, key)
	switch {
	case err == nil:
		version = rec.Version
	case !errors.Is(err, converge.ErrStoreNotFound):
		return storeRecordErr("pull record", key, err)
	}
	if _, err := r.store.Put(ctx, converge.StoreRecord{Key: key, Version: version, Value: value}); err != nil && !errors.Is(err, converge.ErrStoreStale) {
		return storeRecordErr("pull record", key, err)
	}
	return nil
}

// storeRecordErr is a store's error about the record key, of the kind
// named, without the store's own package prefix.
func storeRecordErr(kind, key string, err error) error {
	return fmt.Errorf("%s %s: %w", kind, key, &causeError{msg: strings.TrimPrefix(err.Error(), "converge: "), err: err})
}
