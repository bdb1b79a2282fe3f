//go:build !linux

package hostcfg

import "context"

// runProcess runs nothing outside Linux: without waitid(WNOWAIT) and
// process groups, a timeout or a cancellation could not kill what a
// command started without risking another process (see Command).
func runProcess(context.Context, procSpec) procResult {
	return procResult{exit: -1, startErr: ErrCommandUnsupported}
}
