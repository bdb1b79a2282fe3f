// Package bench holds benchmarks that compare converge with peer libraries
// and with the code teams write by hand. It is a module of its own so that
// the library's go.mod does not carry the peers.
//
// Run it with: cd bench && go test -run '^$' -bench . -benchtime 3x
//
// The PostgreSQL benchmarks (controller replicas on pgstore against River)
// take their databases from pgstore/pgtest: a throw-away cluster when
// CONVERGE_PG_DSN is not set; without PostgreSQL they are skipped, or fail
// when CONVERGE_REQUIRE_PG=1. Their figures are in results/*-pg.txt.
package bench
