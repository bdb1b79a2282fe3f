package converge

import "strings"

// InternalKindPrefix starts the kind of every record the library keeps in
// a Store for its own use (a TargetReconciler's refresh log is
// "converge.refresh/NAME"). Give no controller a kind that starts with
// it.
const InternalKindPrefix = "converge."

// internalKinds are the kinds of records the library's packages kept
// before InternalKindPrefix: plans (package plan) and the hash keys of
// package docker.
var internalKinds = []string{"plan", "plan-base", "docker-hash-key"}

// IsInternalKind reports whether kind, the part of a Store key before its
// first "/", names records that the library keeps for itself rather than
// controller objects: a kind that starts with InternalKindPrefix
// ("converge.refresh", "converge.actions", ...), or one of "plan",
// "plan-base" (package plan's plans and their bases) and
// "docker-hash-key" (package docker). Tools that list a Store's kinds,
// such as convergectl, leave these out.
func IsInternalKind(kind string) bool {
	if strings.HasPrefix(kind, InternalKindPrefix) {
		return true
	}
	for _, k := range internalKinds {
		if kind == k {
			return true
		}
	}
	return false
}
