package converge

import "time"

// Defaults of the zero fields of WalkerConfig, TargetReconcilerConfig and
// Retention.
const (
	// DefaultParallelism is the number of items a walk runs at once when
	// WalkerConfig.Parallelism is zero.
	DefaultParallelism = 8
	// DefaultEventBuffer is how many progress events wait for a busy
	// Observer (or TargetReconciler subscriber) before the oldest are
	// dropped, when WalkerConfig.EventBuffer is zero.
	DefaultEventBuffer = 1024
	// DefaultEventDrain is how long a finished walk waits for its Observer
	// (and a stopping TargetReconciler for its subscribers) when
	// WalkerConfig.EventDrain is zero.
	DefaultEventDrain = time.Second

	// TargetDefaultMaxRounds bounds the walks of one stage in one pass when
	// TargetReconcilerConfig.MaxRounds is zero.
	TargetDefaultMaxRounds = 10
	// TargetDefaultName is the name the last target is stored under when
	// TargetReconcilerConfig.Name is empty.
	TargetDefaultName = "target"

	// DefaultHistoryEntries is how many history entries a Store keeps per
	// key when Retention.Entries is zero: the newest 250, as many as a
	// fleet controller's operators look back on.
	DefaultHistoryEntries = 250
)
