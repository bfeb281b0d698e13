package outboxmysql

import (
	"errors"
	"testing"

	"github.com/go-sql-driver/mysql"
)

func TestADeadlockOrLockWaitTimeoutRunsTheTransactionAgain(t *testing.T) {
	t.Parallel()
	for _, number := range []uint16{errDeadlock, errLockWaitTimeout} {
		calls := 0
		err := retryTx(t.Context(), func() error {
			if calls++; calls < 3 {
				return &mysql.MySQLError{Number: number, Message: "try again"}
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Fatalf("error %d twice: retryTx = %v after %d calls; want nil after 3", number, err, calls)
		}
	}
}

func TestOtherErrorsEndTheTransactionAtOnce(t *testing.T) {
	t.Parallel()
	calls := 0
	failed := &mysql.MySQLError{Number: errNoSuchTable, Message: "no such table"}
	err := retryTx(t.Context(), func() error { calls++; return failed })
	if !errors.Is(err, failed) || calls != 1 {
		t.Fatalf("retryTx = %v after %d calls; want the error after 1", err, calls)
	}
}
