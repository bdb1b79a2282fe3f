// Package hostcfg provides converge Items for host configuration: files,
// directories, symbolic links, lines, keys of config.txt-style files,
// sysctl values, the host name and guarded commands, all under one Root.
// Start with OpenRoot and the package Example; docs/config-agent.md is
// the guide.
//
// Every item reaches the file system through a Root, a directory opened
// with os.Root: "/" on a device, a temporary directory in tests. Paths are
// relative to it ("/etc/hostname" names <root>/etc/hostname), and a path
// that would lead outside it through "..", or through a symbolic link
// pointing outside (a relative target climbing out, or an absolute target
// not under the root's directory), is refused with an *EscapeError before
// anything is written.
//
// Writes are atomic: the new content goes to a temporary file in the same
// directory, which is synced, renamed over the old file, and the directory
// is synced. A crash leaves the old or the new file, never a torn one; a
// temporary file left by a crash is noticed by the item's next run
// (FileState.Leftovers and the like) and removed. A directory that Dir
// creates, with its missing parents, is made durable the same way: the
// directory holding each one created is synced.
//
// Dry runs (converge.ApplyDry) return the state Apply would reach together
// with a unified diff of each file change, and write nothing; Diffs collects
// them from a report.
//
// Watch triggers a pass when a managed file is edited by another hand than hostcfg's.
//
// Symbolic links and ".." resolve the way os.Root and the kernel resolve
// them: ".." after a link leads up from the link's target, not lexically.
// A path holding something else than the item manages (a directory where a
// file should be, a named pipe, a symbolic link where Dir Absent would
// remove a directory) is refused with ErrWrongType; reading never blocks on
// a named pipe.
//
// ConfigFile parses key=value files keeping every byte: comments, blank
// lines, order, [filter] sections, CRLF line ends, a UTF-8 byte-order mark
// (kept on write, never mistaken for part of the first key), and repeated
// keys. Its items change only their own line, share one parsed document,
// never overwrite each other, and, for boot configuration, ask for a
// reboot with converge.RequireAction and report RebootRequired in the
// states they return, the verified state in the report included.
//
// Repeated keys: dtoverlay, dtparam and gpio may appear several times (see
// IsRepeatable), and any key that a section holds more than once is
// treated the same way. ConfigFile.Key refuses the former (*ItemError) and
// fails with a *RepeatedKeyError naming the lines rather than change the
// latter; ConfigFile.Entry manages one entry of such a key and leaves the
// others alone.
//
// Order: items of one ConfigFile may apply in any order (the walk runs
// independent items concurrently), and the file ends the same: a new line
// goes after the lines of the items the ConfigFile handed out before its
// item and before those handed out after, and a new [filter] block among
// the blocks at the end of the file likewise. So lines added independently
// land in the order the items were made, on every run, and a file rebuilt
// from ConfigFile.Import keeps its order: a dtparam stays after the
// dtoverlay it configures. Importing a file and applying the items
// unchanged changes no byte. Two limits: lines of items that the file
// already holds out of the items' order stay where they are, and an Absent
// item removing the last of the unconditional lines that start a file
// (before the first filter), while other items add lines, can leave an
// "[all]" header or not depending on the order.
//
// The other line-oriented files (Line, Sysctl's Persist file, the host
// name) keep a byte-order mark as well and read the line behind it.
//
// Owners: File, Dir and Symlink (the link itself, with lchown) take an
// Ownership by number or by name; names resolve in the root's own
// /etc/passwd and /etc/group, so a device image mounted elsewhere keeps
// its own users; the name "root" is 0 and needs neither file, as the zero
// value needs none. On Windows an owner fails with ErrOwnerUnsupported.
//
// Errors read once: one "hostcfg: " prefix, the path as the item names it
// ("(empty path)" when it has none), never a temporary file. An item with
// invalid fields fails with an *ItemError whose message names the field or
// value at fault but not the item: the walk's *converge.ItemError names
// it, so it is named once.
package hostcfg
