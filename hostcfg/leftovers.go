package hostcfg

import (
	"errors"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// leftovers returns the temporary files of ours next to rel, left by a
// process that crashed while writing it. Each directory is listed once per
// Root (a crash means a new process, hence a new Root); writes through the
// Root keep the list up to date, and the temporary files of writes in
// flight in this process are not leftovers.
func (r *Root) leftovers(rel string) []string {
	dir, base := path.Split(rel)
	r.mu.Lock()
	defer r.mu.Unlock()
	names, listed := r.temps[dir]
	if !listed {
		names = r.listTemps(dir)
		r.temps[dir] = names
	}
	prefix := "." + base + tempMarker
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) && !r.inflight[dir+n] {
			out = append(out, dir+n)
		}
	}
	return out
}

func (r *Root) listTemps(dir string) []string {
	f, err := r.r.Open(dirName(dir))
	if err != nil {
		return []string{}
	}
	defer f.Close()
	all, _ := f.Readdirnames(-1)
	names := []string{}
	for _, n := range all {
		if strings.Contains(n, tempMarker) {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	return names
}

// noteTemp records a temporary file of a write in flight.
func (r *Root) noteTemp(dir, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight[dir+name] = true
}

// forgetTemp records that a temporary file is gone (renamed or removed).
func (r *Root) forgetTemp(dir, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.inflight, dir+name)
	names := r.temps[dir]
	for i, n := range names {
		if n == name {
			r.temps[dir] = append(names[:i:i], names[i+1:]...)
			return
		}
	}
}

// sweep removes the leftover temporary files next to rel.
func (r *Root) sweep(name, rel string) error {
	for _, t := range r.leftovers(rel) {
		if err := r.r.Remove(t); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return r.fail("remove temp", name, err)
		}
		dir, base := path.Split(t)
		r.forgetTemp(dir, base)
	}
	return nil
}
