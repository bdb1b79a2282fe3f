// Package bench holds benchmarks that compare converge with peer libraries
// and with the code teams write by hand. It is a module of its own so that
// the library's go.mod does not carry the peers.
//
// Each figure is measured beside its baseline in the same run: a peer
// (heimdalr/dag, client-go's workqueue, River, SQLite, compose v2) or a
// physical floor (the same work in a plain loop, fsync, the raw Docker
// client). `bench/run` runs the suite five times, keeps the raw output under
// results/ with the date, the machine and the command, and prints
// benchstat's summary and the table of figures, baselines, ratios and goals
// (cmd/benchtable). BENCH='Walk|Plan' bench/run runs a subset.
//
// The PostgreSQL benchmarks (controller replicas on pgstore against River
// and against the floor of their database work, BenchmarkPGFloor)
// take their databases from pgstore/pgtest: a throw-away cluster when
// CONVERGE_PG_DSN is not set; without PostgreSQL they are skipped, or fail
// when CONVERGE_REQUIRE_PG=1. Their figures are in results/*-pg.txt.
//
// The fleet benchmarks (BenchmarkFleet*, fleet*_test.go) run the fleet
// server over loopback HTTP beside bare net/http floors: reports taken,
// a rollout of up to ten thousand simulated devices, the memory of an
// idle long poll and the CPU of an idle agent's poll. Their devices run
// in a child process (this test binary again), so that each process
// holds one end of every connection. Their figures are in
// results/*-fleet.txt.
package bench
