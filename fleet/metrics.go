package fleet

import "github.com/convergekit/converge"

// The fleet server's metrics. Their labels take values from small fixed
// sets, never a device ID.
var (
	// MetricRefused counts the device requests refused before they were
	// served, by reason: "missing", "unknown", "revoked", "mismatch"
	// (AuthReason), "other_device" (a device's valid credential used for
	// another device) and "rate_limited".
	MetricRefused = &converge.Metric{
		Name:   "converge_fleet_refused_total",
		Help:   "Device requests refused before they were served, by reason.",
		Kind:   converge.MetricCounter,
		Labels: []string{"reason"},
	}
	// MetricReports counts the reports devices posted, by outcome:
	// "accepted", "invalid", "too_large", "out_of_order", "refused".
	MetricReports = &converge.Metric{
		Name:   "converge_fleet_reports_total",
		Help:   "Edge reports posted by authenticated devices, by outcome.",
		Kind:   converge.MetricCounter,
		Labels: []string{"outcome"},
	}
	// MetricLongPolls is the number of long polls waiting on this server.
	MetricLongPolls = &converge.Metric{
		Name: "converge_fleet_long_polls",
		Help: "Long polls of device targets waiting on this server.",
		Kind: converge.MetricGauge,
	}
)

// AllMetrics returns the fleet package's metrics, for an adapter to
// register before the first value arrives.
func AllMetrics() []*converge.Metric {
	return []*converge.Metric{MetricRefused, MetricReports, MetricLongPolls}
}
