package hostcfg

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// ownerIDs returns the numeric owner and group that o gives the item at
// name, resolving User and Group in the root's /etc/passwd and /etc/group.
func (r *Root) ownerIDs(name string, o *Ownership) (uid, gid int, err error) {
	uid, gid = o.UID, o.GID
	if o.User != "" {
		if uid, err = r.lookupID(name, "user", "/etc/passwd", o.User); err != nil {
			return 0, 0, err
		}
	}
	if o.Group != "" {
		if gid, err = r.lookupID(name, "group", "/etc/group", o.Group); err != nil {
			return 0, 0, err
		}
	}
	return uid, gid, nil
}

// rootName is the user and group name that is 0 without a database.
const rootName = "root"

// lookupID finds id in the third field of the line of db ("/etc/passwd",
// "/etc/group" inside the root) whose first field is id; a number not
// found stands for itself. The name "root" is 0 without looking.
func (r *Root) lookupID(name, kind, db, id string) (int, error) {
	if id == rootName {
		return 0, nil
	}
	_, rel, fi, err := r.readResolved(db)
	if rel == "" {
		rel = db[1:]
	}
	if err == nil && !fi.exists {
		err = fs.ErrNotExist
	}
	if err == nil {
		for _, line := range strings.Split(string(fi.content), "\n") {
			f := strings.Split(strings.TrimRight(line, "\r"), ":")
			if len(f) < 3 || f[0] != id {
				continue
			}
			n, perr := strconv.Atoi(f[2])
			if perr != nil || n < 0 {
				return 0, &OwnerError{Path: name, Kind: kind, Name: id, DB: r.host(rel), Err: fmt.Errorf("invalid id %q", f[2])}
			}
			return n, nil
		}
	}
	if n, perr := strconv.Atoi(id); perr == nil && n >= 0 {
		return n, nil
	}
	return 0, &OwnerError{Path: name, Kind: kind, Name: id, DB: r.host(rel), Err: err}
}
