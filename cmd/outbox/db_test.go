package main

import (
	"runtime"
	"testing"
)

// With --transaction-leases each worker's batch in flight holds a pooled
// connection: the pool must have one per worker and some to spare, unless
// the URL sizes it.
func TestPoolConfigHasAConnectionPerWorkerWithTransactionLeases(t *testing.T) {
	const url = "postgres://u@127.0.0.1:5432/db"
	defaultSize := int32(max(4, runtime.NumCPU())) // pgxpool's default
	for _, c := range []struct {
		name string
		raw  string
		mode storeMode
		want int32
	}{
		{"leased claims keep the default", url, storeMode{workers: 16}, defaultSize},
		{"transaction leases, 16 workers", url, storeMode{txLeases: true, workers: 16}, 2*16 + heldClaimSpareConns},
		{"transaction leases, 1 worker, never below the default", url, storeMode{txLeases: true, workers: 1}, max(defaultSize, 2+heldClaimSpareConns)},
		{"the URL's pool_max_conns wins", url + "?pool_max_conns=5", storeMode{txLeases: true, workers: 16}, 5},
	} {
		cfg, err := poolConfig(c.raw, c.mode)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if cfg.MaxConns != c.want {
			t.Errorf("%s: MaxConns = %d, want %d", c.name, cfg.MaxConns, c.want)
		}
	}
}
