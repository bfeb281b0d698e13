// Package sqlrow turns messages into the values of an outbox table's row and
// back, for the SQL stores (outboxpg, outboxsqlite). Each store scans and
// binds with its own driver's types (pgtype, database/sql's Null types,
// microsecond integers); what it does with the plain values it gets is the
// same in both, and written once here, so that both stores accept the same
// messages and read the same rows alike.
package sqlrow

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox/internal/headerjson"
	"github.com/go-outbox/outbox/outboxdriver"
)

// Insertable checks message i of n (counted from 0) before a store inserts
// it into table, and returns its payload and headers as they are stored:
// the payload never nil (the column is NOT NULL, and a nil slice binds as
// NULL), the headers as a JSON object, nil for none (NULL). pkg names the
// store in errors ("outboxpg").
func Insertable(pkg, table string, m *outboxdriver.Message, i, n int) (payload, headers []byte, err error) {
	if m == nil {
		return nil, nil, fmt.Errorf("%s: insert into %s: message %d of %d is nil", pkg, table, i, n)
	}
	if m.ID == uuid.Nil {
		return nil, nil, fmt.Errorf("%s: insert into %s: message %d of %d (topic %q) has no ID; write through outbox.Writer, which assigns one",
			pkg, table, i, n, m.Topic)
	}
	payload = m.Payload
	if payload == nil {
		payload = []byte{}
	}
	if len(m.Headers) > 0 {
		if headers, err = json.Marshal(m.Headers); err != nil {
			return nil, nil, fmt.Errorf("%s: insert into %s: encode headers of message %s: %w", pkg, table, m.ID, err)
		}
	}
	return payload, headers, nil
}

// Columns are the columns of a message row whose driver types differ from
// store to store, as plain values: the store scans them with its own types
// and copies them here.
type Columns struct {
	// Headers is the stored headers value, if HasHeaders.
	Headers []byte
	// HasHeaders is false where the headers column is NULL: no headers.
	HasHeaders bool
	// LastError is the last_error column, "" for NULL.
	LastError string
	// Status is the status column.
	Status string
	// PublishedAt is the published_at column, the zero time for NULL.
	PublishedAt time.Time
}

// Fill completes m, whose other fields the store scanned, with c: it
// decodes the headers, gives an empty payload a non-nil slice (as it was
// written), and puts every time in UTC. It returns headerErr, saying why
// the headers do not decode (the row was written by hand or by another
// program); m then has no headers, and no publisher could send it. pkg names
// the store in headerErr ("outboxpg").
func Fill(m *outboxdriver.Message, pkg string, c Columns) (headerErr error) {
	if c.HasHeaders {
		if m.Headers, headerErr = headerjson.Decode(c.Headers); headerErr != nil {
			headerErr = fmt.Errorf("%s: message %s cannot be published: its stored headers do not decode: %w", pkg, m.ID, headerErr)
		}
	}
	if m.Payload == nil {
		m.Payload = []byte{}
	}
	m.CreatedAt = m.CreatedAt.UTC()
	m.AvailableAt = m.AvailableAt.UTC()
	m.LastError = c.LastError
	m.Status = outboxdriver.Status(c.Status)
	if !c.PublishedAt.IsZero() {
		m.PublishedAt = c.PublishedAt.UTC()
	}
	return headerErr
}

// Rows is what Collect needs of a driver's result set; pgx.Rows and
// *sql.Rows have it.
type Rows interface {
	Next() bool
	Err() error
}

// Collect reads every row of rows with scan, which returns the message of
// the current row and, apart from a scan error, the error Fill gave for its
// headers. A message whose headers do not decode comes back without them
// and is also listed in undecodable, with the reason, so that a claim can
// dead-letter it instead of failing every exchange that meets it. Collect
// does not close rows. capacity is how many rows to make room for at once
// (the claim's limit; 0 when unknown): a batch of 1,000 grown one append
// at a time copies its messages about ten times.
func Collect[R Rows](rows R, capacity int, scan func(R) (m outboxdriver.Message, headerErr, err error)) (msgs []outboxdriver.Message, undecodable []outboxdriver.Failure, err error) {
	msgs = make([]outboxdriver.Message, 0, capacity)
	for rows.Next() {
		m, headerErr, err := scan(rows)
		if err != nil {
			return nil, nil, err
		}
		if headerErr != nil {
			undecodable = append(undecodable, outboxdriver.Failure{ID: m.ID, Error: headerErr.Error()})
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	return msgs, undecodable, nil
}

// StorableText is an error text as both stores keep it: valid UTF-8 (a
// PostgreSQL text column refuses anything else, SQLSTATE 22021) without NUL
// bytes (refused too), so a handler's error with any bytes in it neither
// fails the park that records it nor comes back unreadable.
func StorableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
}
