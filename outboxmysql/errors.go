package outboxmysql

import (
	"errors"

	"github.com/go-sql-driver/mysql"
)

// The server's error numbers the store acts on. MySQL and MariaDB share them.
const (
	errLockWaitTimeout = 1205 // ER_LOCK_WAIT_TIMEOUT
	errDeadlock        = 1213 // ER_LOCK_DEADLOCK
	errNoSuchTable     = 1146 // ER_NO_SUCH_TABLE
	errBadField        = 1054 // ER_BAD_FIELD_ERROR: unknown column
)

func errNumber(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// retryable reports whether err ended a transaction that may simply run
// again: a deadlock (the server rolled the transaction back) or a lock
// wait timeout (the store rolls it back). Neither says anything about the
// messages, so neither may reach the relay as a failed publish.
func retryable(err error) bool {
	n := errNumber(err)
	return n == errDeadlock || n == errLockWaitTimeout
}

func isNoSuchTable(err error) bool { return err != nil && errNumber(err) == errNoSuchTable }
