package boltstore_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/boltstore"
)

// The corruption test damages copies of a store file in every way a disk
// does (truncations, flipped bits in every kind of page) and opens and
// reads every copy in a child process (this test binary run again), so
// that a fault in bbolt's own goroutines, which no recover catches, is seen
// as a crash of the child and cannot kill the test.
const (
	envCorruptDir   = "BOLTSTORE_CORRUPT_DIR"   // the child's work directory: fixture.db, specs.json
	envCorruptRange = "BOLTSTORE_CORRUPT_RANGE" // "from-to": the copies the child examines
)

const (
	fixtureRecords = 300
	// copiesPerChild bounds the work one child process does; a crash
	// loses no result, as the child reports every copy before the next.
	copiesPerChild = 250
)

var fixtureTime = time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)

// fixtureState is what the fixture store holds.
type fixtureState struct {
	Records map[string]converge.StoreRecord
	History map[string][]string // key -> To of every entry
	Targets map[string]json.RawMessage
}

func fixtureKey(i int) string { return fmt.Sprintf("obj/%03d", i) }

// fixtureValue is record i's value at version v: sizes vary from a few
// bytes to more than a page, so the file has overflow pages.
func fixtureValue(i int, v uint64) []byte {
	pad := strings.Repeat("abcdefgh", (i%7)*6)
	if i%50 == 11 {
		pad = strings.Repeat("0123456789", 600)
	}
	return fmt.Appendf(nil, `{"n":%d,"v":%d,"name":"object %d","pad":%q}`, i, v, i, pad)
}

// buildFixture writes the fixture store at path (its last commit puts the
// record "last") and returns what it holds.
func buildFixture(t *testing.T, path string) fixtureState {
	t.Helper()
	ctx := context.Background()
	st, err := boltstore.Open(path, boltstore.Options{Now: func() time.Time { return fixtureTime }, Retention: converge.Retention{Entries: -1}})
	require.NoError(t, err)
	want := fixtureState{Records: map[string]converge.StoreRecord{}, History: map[string][]string{}, Targets: map[string]json.RawMessage{}}
	put := func(key string, version uint64, value []byte, to string) {
		v, err := st.Put(ctx, converge.StoreRecord{Key: key, Version: version, Value: value}, converge.HistoryEntry{At: fixtureTime, To: to, Reason: "fixture"})
		require.NoError(t, err)
		want.Records[key] = converge.StoreRecord{Key: key, Version: v, Value: value}
		want.History[key] = append(want.History[key], to)
	}
	for i := range fixtureRecords {
		put(fixtureKey(i), 0, fixtureValue(i, 1), "s"+strconv.Itoa(i%5))
	}
	for i := 0; i < fixtureRecords; i += 3 {
		put(fixtureKey(i), 1, fixtureValue(i, 2), "updated")
	}
	for i := 7; i < fixtureRecords; i += 25 {
		key := fixtureKey(i)
		require.NoError(t, st.Delete(ctx, key, want.Records[key].Version, converge.HistoryEntry{At: fixtureTime, To: "deleted"}))
		delete(want.Records, key)
		want.History[key] = append(want.History[key], "deleted")
	}
	for i := 0; i < fixtureRecords; i += 10 {
		_, err := st.Claim(ctx, fixtureKey(i), "fixture", time.Hour)
		require.NoError(t, err)
	}
	want.Targets["agent"] = []byte(`{"project":"demo","replicas":3}`)
	want.Targets["big"] = fmt.Appendf(nil, `{"blob":%q}`, strings.Repeat("target-", 700))
	for _, name := range []string{"agent", "big"} {
		_, err := st.PutTarget(ctx, name, want.Targets[name])
		require.NoError(t, err)
	}
	put("last", 0, []byte(`{"last":true}`), "last")
	require.NoError(t, st.Close())
	return want
}

// Page kinds of the fixture file, from its own (undamaged) pages.
const (
	kindMeta     = "meta"
	kindBranch   = "branch"
	kindLeaf     = "leaf"
	kindOverflow = "overflow"
	kindFreelist = "freelist"
	kindFree     = "free"   // below the high water mark, in no tree
	kindBeyond   = "beyond" // past the high water mark: room the file grew into
)

// pageMap classifies every page of the bbolt file b and returns the page
// size, each page's kind and the bytes of its headers (page header plus
// element headers), where flips hit the structure bbolt trusts.
func pageMap(t *testing.T, b []byte) (ps int, kinds []string, heads []int) {
	t.Helper()
	ne := binary.NativeEndian
	ps = int(ne.Uint32(b[16+8:]))
	require.Positive(t, ps)
	meta := b[16:]
	if ne.Uint64(b[ps+16+48:]) > ne.Uint64(meta[48:]) {
		meta = b[ps+16:]
	}
	root, freelist, hwm := ne.Uint64(meta[16:]), ne.Uint64(meta[32:]), int(ne.Uint64(meta[40:]))
	n := len(b) / ps
	kinds, heads = make([]string, n), make([]int, n)
	for i := range kinds {
		kinds[i], heads[i] = kindFree, 16
		if i >= hwm {
			kinds[i] = kindBeyond
		}
	}
	kinds[0], kinds[1] = kindMeta, kindMeta
	heads[0], heads[1] = 16+64, 16+64
	if freelist != ^uint64(0) {
		kinds[freelist] = kindFreelist
	}
	var visit func(id uint64)
	visit = func(id uint64) {
		p := b[int(id)*ps:]
		flags, count, over := ne.Uint16(p[8:]), int(ne.Uint16(p[10:])), int(ne.Uint32(p[12:]))
		heads[id] = 16 + 16*count
		kinds[id] = kindLeaf
		if flags == 0x01 {
			kinds[id] = kindBranch
		}
		for j := 1; j <= over; j++ {
			kinds[int(id)+j] = kindOverflow
		}
		for e := range count {
			el := p[16+16*e:]
			if flags == 0x01 {
				visit(ne.Uint64(el[8:]))
				continue
			}
			if ne.Uint32(el)&1 != 0 { // a bucket: its root, unless inline
				v := el[ne.Uint32(el[4:])+ne.Uint32(el[8:]):]
				if r := ne.Uint64(v); r != 0 {
					visit(r)
				}
			}
		}
	}
	visit(root)
	return ps, kinds, heads
}

// damageSpec is one damaged copy of the fixture: the file cut to Trunc
// bytes (when positive) and/or bits flipped.
type damageSpec struct {
	Kind  string // page kind hit ("truncate" for a cut)
	Trunc int64
	Flips []int64 // bit offsets in the file
}

func (d damageSpec) apply(b []byte) []byte {
	out := slices.Clone(b)
	if d.Trunc > 0 {
		out = out[:d.Trunc]
	}
	for _, bit := range d.Flips {
		out[bit/8] ^= 1 << (bit % 8)
	}
	return out
}

// damageSpecs returns the copies to make of the file b: a cut at every
// page boundary, in the middle of every page and at a random offset in
// it; and, in every page below the high water mark, flipped bits in its
// headers and anywhere in it, one or three at a time; a few in the room
// past the high water mark.
func damageSpecs(t *testing.T, b []byte) []damageSpec {
	ps, kinds, heads := pageMap(t, b)
	rng := rand.New(rand.NewPCG(26, 2))
	var specs []damageSpec
	for p := 1; p < len(kinds); p++ {
		at := int64(p * ps)
		specs = append(specs,
			damageSpec{Kind: "truncate", Trunc: at},
			damageSpec{Kind: "truncate", Trunc: at - int64(ps/2)},
			damageSpec{Kind: "truncate", Trunc: at - 1 - rng.Int64N(int64(ps-1))},
		)
	}
	bitIn := func(p, from, to int) int64 { return int64(p*ps+from+rng.IntN(to-from)) * 8 }
	for p, kind := range kinds {
		flips := func(n, from, to int) {
			d := damageSpec{Kind: kind}
			for range n {
				d.Flips = append(d.Flips, bitIn(p, from, to)+rng.Int64N(8))
			}
			specs = append(specs, d)
		}
		if kind == kindBeyond {
			if p%8 == 0 {
				flips(1, 0, ps)
			}
			continue
		}
		head := min(heads[p], ps)
		if kind == kindOverflow {
			head = ps // no header of its own: all of it is data
		}
		for range 4 {
			flips(1, 0, head) // the headers
			flips(1, 0, ps)   // anywhere
		}
		flips(3, 0, ps)
		flips(3, 0, ps)
	}
	return specs
}

// TestCorruptCopies is the corruption test: none of the damaged copies
// crashes (or hangs) the process that opens and reads it, and none
// returns a wrong value without an error.
func TestCorruptCopies(t *testing.T) {
	dir := t.TempDir()
	fixture := filepath.Join(dir, "fixture.db")
	want := buildFixture(t, fixture)
	b, err := os.ReadFile(fixture)
	require.NoError(t, err)
	specs := damageSpecs(t, b)
	require.GreaterOrEqual(t, len(specs), 1000)
	for name, v := range map[string]any{"specs.json": specs, "want.json": want} {
		js, err := json.Marshal(v)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), js, 0o600))
	}

	results := make([]string, len(specs))
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for from := 0; from < len(specs); from += copiesPerChild {
		to := min(from+copiesPerChild, len(specs))
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			for from < to {
				got, at, crash := runCorruptChild(t, dir, from, to)
				mu.Lock()
				for i, r := range got {
					results[i] = r
				}
				if at >= 0 {
					results[at] = crash
				}
				mu.Unlock()
				if at < 0 {
					return
				}
				from = at + 1
			}
		})
	}
	wg.Wait()

	counts := map[string]int{}
	byKind := map[string]map[string]int{}
	crashes, wrong, bad := 0, 0, 0
	for i, r := range results {
		kind := specs[i].Kind
		if byKind[kind] == nil {
			byKind[kind] = map[string]int{}
		}
		outcome, detail, _ := strings.Cut(r, " ")
		if outcome == "rolled-back" && kind != kindMeta {
			// Only a damaged newest meta page takes bbolt back to the
			// previous commit, by design (a torn write of it).
			outcome = "wrong"
			detail = "read the previous commit after damage in a " + kind + " page"
		}
		counts[outcome]++
		byKind[kind][outcome]++
		switch outcome {
		case "crash", "hang":
			crashes++
			t.Errorf("copy %d (%+v): %s %s", i, specs[i], outcome, detail)
		case "wrong":
			wrong++
			t.Errorf("copy %d (%+v): a wrong value without an error: %s", i, specs[i], detail)
		case "open-corrupt", "open-notstore", "read-corrupt", "clean", "rolled-back":
		default:
			bad++
			t.Errorf("copy %d (%+v): %s %s", i, specs[i], outcome, detail)
		}
	}
	kinds := slices.Sorted(func(yield func(string) bool) {
		for k := range byKind {
			if !yield(k) {
				return
			}
		}
	})
	for _, k := range kinds {
		t.Logf("  %-9s %v", k, byKind[k])
	}
	t.Logf("damaged copies opened: %d; crashes: %d; wrong values returned without an error: %d "+
		"(Open refused %d with ErrCorrupt and %d with ErrNotStore; %d opened and read with every value right, %d of them a commit back after a damaged newest meta page; %d with a read failing with ErrCorrupt; %d other errors)",
		len(results), crashes, wrong, counts["open-corrupt"], counts["open-notstore"],
		counts["clean"]+counts["rolled-back"], counts["rolled-back"], counts["read-corrupt"], bad)
	assert.Zero(t, crashes)
	assert.Zero(t, wrong)
}

// runCorruptChild examines copies [from, to) in a child process. It
// returns the result of every copy the child finished and, when the child
// died on a copy or took longer than copyTimeout over it, that copy's
// index (else -1) and result ("crash ..." or "hang ...").
func runCorruptChild(t *testing.T, dir string, from, to int) (map[int]string, int, string) {
	t.Helper()
	const copyTimeout = 30 * time.Second
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=corrupt", envCorruptDir+"="+dir, fmt.Sprintf("%s=%d-%d", envCorruptRange, from, to))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	results := map[int]string{}
	started, hung := -1, false
	timer := time.NewTimer(copyTimeout)
	defer timer.Stop()
read:
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				break read
			}
			timer.Reset(copyTimeout)
			verb, rest, _ := strings.Cut(line, " ")
			n, result, _ := strings.Cut(rest, " ")
			i, err := strconv.Atoi(n)
			if err != nil {
				continue
			}
			switch verb {
			case "start":
				started = i
			case "done":
				results[i], started = result, -1
			}
		case <-timer.C:
			hung = true
			_ = cmd.Process.Kill()
			for range lines {
			}
			break read
		}
	}
	err = cmd.Wait()
	tail := stderr.String()
	if len(tail) > 400 {
		tail = tail[:400]
	}
	switch {
	case hung && started >= 0:
		return results, started, "hang " + strconv.Quote(tail)
	case started >= 0:
		return results, started, fmt.Sprintf("crash %q", fmt.Sprint(err, ": ", tail))
	}
	require.NoError(t, err, "child failed between copies: %s", tail)
	return results, -1, ""
}

// childCorrupt is the child side: it makes each copy of its range, opens
// and reads it, and prints "start i" before and "done i result" after.
func childCorrupt() error {
	dir := os.Getenv(envCorruptDir)
	var from, to int
	if _, err := fmt.Sscanf(os.Getenv(envCorruptRange), "%d-%d", &from, &to); err != nil {
		return err
	}
	fixture, err := os.ReadFile(filepath.Join(dir, "fixture.db"))
	if err != nil {
		return err
	}
	var specs []damageSpec
	var want fixtureState
	for name, v := range map[string]any{"specs.json": &specs, "want.json": &want} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, v); err != nil {
			return err
		}
	}
	path := filepath.Join(dir, fmt.Sprintf("copy-%d.db", from))
	for i := from; i < to; i++ {
		fmt.Printf("start %d\n", i)
		if err := os.WriteFile(path, specs[i].apply(fixture), 0o600); err != nil {
			return err
		}
		fmt.Printf("done %d %s\n", i, examineCopy(path, want))
	}
	return nil
}

// examineCopy opens the damaged copy at path and reads everything in it,
// then writes to it. It returns "open-corrupt", "open-notstore",
// "read-corrupt" (a read failed with ErrCorrupt), "clean" (every value
// read right), "rolled-back" (every value right as of the commit before
// the last one), "wrong ..." (a value differs and no error said so), or
// another word for an error of the wrong kind.
func examineCopy(path string, want fixtureState) string {
	st, err := boltstore.Open(path, boltstore.Options{LockTimeout: -1})
	if err != nil {
		var oe *boltstore.OpenError
		switch {
		case !errors.As(err, &oe) || oe.Path != path || strings.Count(err.Error(), path) != 1:
			return "bad-open-error " + strconv.Quote(err.Error())
		case errors.Is(err, boltstore.ErrCorrupt):
			return "open-corrupt"
		case errors.Is(err, boltstore.ErrNotStore):
			return "open-notstore"
		}
		return "open-other " + strconv.Quote(err.Error())
	}
	defer st.Close()
	ctx := context.Background()
	sawCorrupt, lastMissing := false, false
	var wrong, badErr string
	failed := func(what string, err error) {
		if errors.Is(err, boltstore.ErrCorrupt) {
			sawCorrupt = true
		} else if badErr == "" {
			badErr = what + ": " + err.Error()
		}
	}
	wrongf := func(format string, args ...any) {
		if wrong == "" {
			wrong = fmt.Sprintf(format, args...)
		}
	}
	keys := []string{"last"}
	for i := range fixtureRecords {
		keys = append(keys, fixtureKey(i))
	}
	for _, key := range keys {
		exp, live := want.Records[key]
		rec, err := st.Get(ctx, key)
		switch {
		case err == nil && !live:
			wrongf("deleted %s read as version %d", key, rec.Version)
		case err == nil && (rec.Version != exp.Version || !bytes.Equal(rec.Value, exp.Value)):
			wrongf("%s read as version %d %.40q", key, rec.Version, rec.Value)
		case errors.Is(err, converge.ErrStoreNotFound):
			if key == "last" {
				lastMissing = true
			} else if live {
				wrongf("%s not found", key)
			}
		case err != nil:
			failed("get "+key, err)
		}
		hist, err := st.History(ctx, key)
		wantHist := want.History[key]
		if key == "last" && lastMissing {
			wantHist = nil
		}
		switch {
		case err != nil:
			failed("history "+key, err)
		case !slices.Equal(tos(hist), wantHist) && len(hist)+len(wantHist) > 0:
			wrongf("history of %s read as %v", key, tos(hist))
		}
	}
	list, err := st.List(ctx, "")
	if err != nil {
		failed("list", err)
	} else {
		n := len(want.Records)
		if lastMissing {
			n--
		}
		if len(list) != n {
			wrongf("list of %d records, want %d", len(list), n)
		}
		for _, rec := range list {
			if exp := want.Records[rec.Key]; rec.Version != exp.Version || !bytes.Equal(rec.Value, exp.Value) {
				wrongf("list: %s read as version %d %.40q", rec.Key, rec.Version, rec.Value)
			}
		}
	}
	for name, exp := range want.Targets {
		got, _, err := st.Target(ctx, name)
		switch {
		case err != nil:
			failed("target "+name, err)
		case !bytes.Equal(got, exp):
			wrongf("target %s read as %.40q", name, got)
		}
	}
	probe := raw(`{"probe":true}`)
	if _, err := st.Put(ctx, converge.StoreRecord{Key: "probe", Value: probe}); err != nil {
		failed("put", err)
	} else if got, err := st.Get(ctx, "probe"); err != nil {
		failed("get probe", err)
	} else if !bytes.Equal(got.Value, probe) {
		wrongf("probe read as %.40q", got.Value)
	}
	switch {
	case wrong != "":
		return "wrong " + strconv.Quote(wrong)
	case badErr != "":
		return "bad-error " + strconv.Quote(badErr)
	case lastMissing:
		return "rolled-back"
	case sawCorrupt:
		return "read-corrupt"
	}
	return "clean"
}
