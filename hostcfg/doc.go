// Package hostcfg provides converge Items for host configuration: files,
// directories, symbolic links, lines in a file, single keys of key=value
// files such as a Raspberry Pi config.txt, kernel parameters (sysctl) and
// the host name.
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
// (FileState.Leftovers and the like) and removed.
//
// Dry runs (converge.ApplyDry) return the state Apply would reach together
// with a unified diff of each file change, and write nothing; Diffs collects
// them from a report.
//
// ConfigFile parses key=value files keeping every byte: comments, blank
// lines, order, [filter] sections and repeated keys (dtoverlay, dtparam,
// gpio). Its ConfigKey items change only their own line, share one parsed
// document, never overwrite each other, and, for boot configuration, ask
// for a reboot with converge.RequireAction. ConfigFile.Import turns what a
// device already has into items, so a first run keeps it.
package hostcfg
