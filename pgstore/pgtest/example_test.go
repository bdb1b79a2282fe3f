package pgtest_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/convergekit/converge/pgstore/pgtest"
)

// An integration program (not a test) starts a throw-away PostgreSQL,
// makes a database on it and removes everything when it is done.
func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		log.Fatal(err) // errors.Is(err, pgtest.ErrNoPostgres) without the programs
	}
	defer func() {
		if err := srv.Close(); err != nil {
			log.Print(err)
		}
	}()
	dsn, err := srv.CreateDatabase(ctx)
	if err != nil {
		log.Print(err)
		return
	}
	fmt.Println("open the store on", dsn) // pgstore.Open(ctx, dsn, pgstore.Options{})
}
