package outboxmysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/sqlrow"
	"github.com/go-outbox/outbox/outboxdriver"
)

// datetimeLayout is how a DATETIME(6) reads and writes as text.
const datetimeLayout = "2006-01-02 15:04:05.999999"

// utcTime scans a DATETIME column, which the store fills in UTC, whatever
// the driver was told: with parseTime=true go-sql-driver/mysql returns a
// time.Time carrying the stored wall clock in its loc, without it the text.
// Either way the wall clock is read as UTC, so the application's DSN cannot
// shift the store's times.
type utcTime struct {
	Time  time.Time
	Valid bool
}

// Scan implements sql.Scanner.
func (t *utcTime) Scan(v any) error {
	switch v := v.(type) {
	case nil:
		*t = utcTime{}
	case time.Time:
		*t = utcTime{Time: time.Date(v.Year(), v.Month(), v.Day(), v.Hour(), v.Minute(), v.Second(), v.Nanosecond(), time.UTC), Valid: true}
	case []byte:
		return t.parse(string(v))
	case string:
		return t.parse(v)
	default:
		return fmt.Errorf("outboxmysql: cannot read %T as a DATETIME", v)
	}
	return nil
}

func (t *utcTime) parse(s string) error {
	if strings.HasPrefix(s, "0000-00-00") {
		*t = utcTime{}
		return nil
	}
	v, err := time.ParseInLocation(datetimeLayout, s, time.UTC)
	if err != nil {
		return fmt.Errorf("outboxmysql: cannot read %q as a DATETIME: %w", s, err)
	}
	*t = utcTime{Time: v, Valid: true}
	return nil
}

// datetime formats t as DATETIME(6) text in UTC, rounded up to the
// microsecond when up (a message scheduled for t is never due before t),
// else truncated. Times travel as text, not time.Time, so that the driver's
// loc cannot shift them.
func datetime(t time.Time, up bool) string {
	u := t.UTC()
	if tr := u.Truncate(time.Microsecond); up && tr.Before(u) {
		u = tr.Add(time.Microsecond)
	}
	return u.Format("2006-01-02 15:04:05.000000")
}

// micros rounds d up to whole microseconds, the stored resolution, so leases
// and retry delays are never shorter than asked.
func micros(d time.Duration) int64 {
	return int64((max(d, 0) + time.Microsecond - 1) / time.Microsecond)
}

// messageColumns are scanned by scanMessage, in this order.
const messageColumns = "id, topic, `key`, payload, headers, created_at, available_at, attempts, last_error, status, published_at"

// collectMessages reads rows of messageColumns (see sqlrow.Collect) and
// closes rows.
func collectMessages(rows *sql.Rows, capacity int) (msgs []outbox.Message, undecodable []outboxdriver.Failure, err error) {
	defer rows.Close()
	return sqlrow.Collect(rows, capacity, func(rows *sql.Rows) (outbox.Message, error, error) { return scanMessage(rows) })
}

// scanMessage reads one row of messageColumns, and the columns after them
// into extra. headerErr says why its headers do not decode; the message is
// then returned without them.
func scanMessage(rows *sql.Rows, extra ...any) (m outbox.Message, headerErr, err error) {
	var (
		id                                  []byte
		topic, key                          []byte
		headers, lastError                  sql.NullString
		createdAt, availableAt, publishedAt utcTime
		status                              string
	)
	err = rows.Scan(append([]any{&id, &topic, &key, &m.Payload, &headers, &createdAt, &availableAt,
		&m.Attempts, &lastError, &status, &publishedAt}, extra...)...)
	if err != nil {
		return outbox.Message{}, nil, err
	}
	if m.ID, err = uuid.FromBytes(id); err != nil {
		return outbox.Message{}, nil, fmt.Errorf("outboxmysql: stored id %x is not a UUID: %w", id, err)
	}
	m.Topic, m.Key = string(topic), string(key)
	m.CreatedAt, m.AvailableAt = createdAt.Time, availableAt.Time
	c := sqlrow.Columns{Headers: []byte(headers.String), HasHeaders: headers.Valid, LastError: lastError.String, Status: status}
	if publishedAt.Valid {
		c.PublishedAt = publishedAt.Time
	}
	headerErr = sqlrow.Fill(&m, "outboxmysql", c)
	return m, headerErr, nil
}

// idArgs returns ids as the 16-byte values the id columns hold (uuid.UUID
// itself binds as its 36-character text).
func idArgs(ids []uuid.UUID) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id[:]
	}
	return args
}

// placeholders returns "?, ?, ..." with n marks (n > 0).
func placeholders(n int) string {
	return strings.Repeat("?, ", n-1) + "?"
}

// queryIDs runs query, which returns message ids, in tx and reads them.
func queryIDs(ctx context.Context, tx *sql.Tx, query string, args ...any) ([]uuid.UUID, error) {
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []uuid.UUID
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			return nil, err
		}
		id, err := uuid.FromBytes(raw)
		if err != nil {
			return nil, fmt.Errorf("stored id %x is not a UUID: %w", raw, err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
