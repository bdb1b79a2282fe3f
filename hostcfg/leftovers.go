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
	var out []string
	r.eachLeftover(rel, func(name string) { out = append(out, name) })
	return out
}

// leftoverCount returns len(r.leftovers(rel)) without building the list.
func (r *Root) leftoverCount(rel string) int {
	n := 0
	r.eachLeftover(rel, func(string) { n++ })
	return n
}

// eachLeftover calls f with the path of every leftover of rel (see
// leftovers), holding r.mu.
func (r *Root) eachLeftover(rel string, f func(name string)) {
	dir, base := path.Split(rel)
	r.mu.Lock()
	defer r.mu.Unlock()
	names, listed := r.temps[dir]
	if !listed {
		names = r.listTemps(dir)
		r.temps[dir] = names
	}
	for _, n := range names {
		if isTempOf(n, base) && !r.inflight[dir+n] {
			f(dir + n)
		}
	}
}

// isTempOf reports whether name is the name of a temporary file of ours
// for the file base: "." + base + tempMarker + a suffix.
func isTempOf(name, base string) bool {
	rest, ok := strings.CutPrefix(name, ".")
	if !ok {
		return false
	}
	rest, ok = strings.CutPrefix(rest, base)
	return ok && strings.HasPrefix(rest, tempMarker)
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
