// Package fault holds the fault-injection suite (build tag fault), run by
// scripts/fault: see fault_test.go.
package fault
