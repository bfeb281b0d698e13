package outboxsqlite

import (
	"database/sql"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
)

// collectListed reads rows of messageColumns and overtaken (Get,
// ListDead), and closes rows. A row whose headers do not decode comes
// without them.
func collectListed(rows *sql.Rows) ([]outbox.Message, error) {
	defer rows.Close()
	msgs, _, err := sqlrow.Collect(rows, 0, func(rows *sql.Rows) (outbox.Message, error, error) {
		var overtaken int
		m, headerErr, err := scanMessage(rows, &overtaken)
		m.Overtaken = overtaken
		return m, headerErr, err
	})
	return msgs, err
}
