package txn

import (
	"errors"
	"testing"
)

// fakeTx records how a transaction ended.
type fakeTx struct {
	committed, rolledBack int
	commitErr             error
}

func (f *fakeTx) commit() error { f.committed++; return f.commitErr }
func (f *fakeTx) rollback()     { f.rolledBack++ }

func run(tx *fakeTx, fn func(*fakeTx) error) error {
	return Run(tx, fn, (*fakeTx).commit, (*fakeTx).rollback)
}

func TestRunCommitsWhenFnSucceeds(t *testing.T) {
	t.Parallel()
	tx := &fakeTx{}
	ran := false
	if err := run(tx, func(got *fakeTx) error { ran = got == tx; return nil }); err != nil {
		t.Fatalf("Run = %v, want nil", err)
	}
	if !ran || tx.committed != 1 || tx.rolledBack != 0 {
		t.Errorf("fn got the tx: %v; committed %d, rolled back %d times; want true, 1, 0", ran, tx.committed, tx.rolledBack)
	}
}

func TestRunReturnsCommitError(t *testing.T) {
	t.Parallel()
	failed := errors.New("commit failed")
	tx := &fakeTx{commitErr: failed}
	if err := run(tx, func(*fakeTx) error { return nil }); err != failed {
		t.Errorf("Run = %v, want commit's error as is", err)
	}
}

func TestRunRollsBackOnError(t *testing.T) {
	t.Parallel()
	failed := errors.New("fn failed")
	tx := &fakeTx{}
	if err := run(tx, func(*fakeTx) error { return failed }); err != failed {
		t.Errorf("Run = %v, want fn's error as is", err)
	}
	if tx.committed != 0 || tx.rolledBack != 1 {
		t.Errorf("committed %d, rolled back %d times; want 0, 1", tx.committed, tx.rolledBack)
	}
}

func TestRunRollsBackOnPanicAndPanicsAgain(t *testing.T) {
	t.Parallel()
	tx := &fakeTx{}
	defer func() {
		if r := recover(); r != "boom" {
			t.Errorf("recovered %v, want fn's panic value boom", r)
		}
		if tx.committed != 0 || tx.rolledBack != 1 {
			t.Errorf("committed %d, rolled back %d times; want 0, 1", tx.committed, tx.rolledBack)
		}
	}()
	_ = run(tx, func(*fakeTx) error { panic("boom") })
	t.Error("Run returned after fn panicked")
}
