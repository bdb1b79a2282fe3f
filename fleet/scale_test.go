package fleet_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/convergekit/converge"
	"github.com/convergekit/converge/fleet"
)

// TestAHundredAgents runs 100 agents, with the server's default rate
// limit, against two replicas on one store through two targets.
func TestAHundredAgents(t *testing.T) {
	if testing.Short() {
		t.Skip("100 agents: not in -short")
	}
	const n = 100
	store := converge.NewMemStore()
	logger := slog.New(slog.DiscardHandler)
	var replicas []*fleet.Server
	var urls []string
	for range 2 {
		s, err := fleet.NewServer(fleet.Config{Store: store, Logger: logger})
		require.NoError(t, err)
		hs := httptest.NewServer(s)
		t.Cleanup(func() { hs.Close(); _ = s.Close() })
		replicas = append(replicas, s)
		urls = append(urls, hs.URL)
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("dev-%03d", i)
		tok, err := replicas[0].Enrol(context.Background(), ids[i], nil)
		require.NoError(t, err)
		startAgent(t, &simDevice{id: ids[i]}, urls[i%2], tok, converge.NewMemStore())
	}
	// Each target is set through one replica and read back through the
	// other.
	for i, v := range []string{"v1", "v2"} {
		start := time.Now()
		revs := setAll(t, replicas[i], ids, v)
		waitState(t, replicas[1-i], revs, func(string) fleet.State { return fleet.StateReady })
		t.Logf("%d devices ready at %s in %s", n, v, time.Since(start))
	}
}
