// Package bench holds benchmarks that compare converge with peer libraries
// and with the code teams write by hand. It is a module of its own so that
// the library's go.mod does not carry the peers.
//
// Run it with: cd bench && go test -run '^$' -bench . -benchtime 3x
package bench
