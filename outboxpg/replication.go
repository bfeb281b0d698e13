package outboxpg

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/sqlident"
)

// ErrWALWatchUnavailable is wrapped by the error ListenForWrites returns when
// Options.WatchWAL is set but the server or the role cannot stream the WAL
// (wal_level is not logical, the role lacks the REPLICATION attribute, the
// publication cannot be created or does not publish the table's inserts,
// every replication slot or WAL sender is taken). The error's text names the
// fix. The relay logs it once and goes on polling.
var ErrWALWatchUnavailable = errors.New("outboxpg: wake-up from the WAL unavailable")

// walStatusInterval is how often the WAL watcher confirms what it received
// (a standby status update), so that its slot holds back no WAL and the
// server, which ends a silent replication connection after wal_sender_timeout
// (60 s by default), keeps it.
const walStatusInterval = 10 * time.Second

// watchWAL is ListenForWrites with Options.WatchWAL: it streams the table's
// inserts through a temporary logical replication slot and calls wake after
// each transaction that inserted into the table. Transient failures
// (connection lost, server restarting) are retried with the backoff of
// LISTEN; a set-up the server refuses returns ErrWALWatchUnavailable.
func (s *Store) watchWAL(ctx context.Context, wake func()) error {
	retry := backoff.New(listenBackoffMin, listenBackoffMax)
	logged := false // a failure since the stream last worked was logged
	for {
		err := s.streamWAL(ctx, wake, func() { logged = false; retry.Reset() })
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Only a refusal that an operator must fix (wal_level, privilege,
		// publication) ends it. Slots or WAL senders all taken may pass by
		// themselves (a rolling deploy's old relays, a crashed session not
		// yet dropped), as may a lost connection: those are retried, the
		// first of a spell logged, while the relay polls.
		var unavailable *walUnavailableError
		if errors.As(err, &unavailable) && !unavailable.transient {
			return err
		}
		if !logged {
			s.logger().Warn("outboxpg: wake-up from the WAL interrupted; retrying, and polling meanwhile", slog.String("table", s.Name()), slog.Any("error", err))
			logged = true
		}
		if !retry.Sleep(ctx, nil) {
			return ctx.Err()
		}
	}
}

// walUnavailableError is an ErrWALWatchUnavailable with its reason and fix.
type walUnavailableError struct {
	table     string
	reason    string
	fix       string
	transient bool // may pass by itself (slots taken)
}

func (e *walUnavailableError) Error() string {
	return fmt.Sprintf("%v for %s: %s; %s (until then the relay polls)", ErrWALWatchUnavailable, e.table, e.reason, e.fix)
}

func (e *walUnavailableError) Unwrap() error { return ErrWALWatchUnavailable }

// publicationName is the publication ListenForWrites uses with WatchWAL: the
// table's NOTIFY channel name, "outbox_<schema>_<table>".
func (n names) publicationName() string { return n.channel }

// slotPrefix starts the name of every temporary slot watching the table, so
// an operator (or a test) can tell them apart: "outbox_" and 12 hex digits
// of a hash of schema.table.
func (n names) slotPrefix() string {
	sum := sha256.Sum256([]byte(n.schema + "." + n.table))
	return "outbox_" + hex.EncodeToString(sum[:6]) + "_"
}

// streamWAL runs one replication session: connect, check, create the slot,
// stream until an error or ctx ends. connected is called once the stream
// runs. The slot is temporary: the server drops it when the session ends,
// however it ends.
func (s *Store) streamWAL(ctx context.Context, wake func(), connected func()) error {
	conn, err := s.replicationConn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		_ = conn.Close(closeCtx)
		cancel()
	}()
	if err := s.checkWALLevel(ctx, conn); err != nil {
		return err
	}
	if err := s.ensurePublication(ctx); err != nil {
		return err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	slot := s.names.slotPrefix() + hex.EncodeToString(b[:])
	// NOEXPORT_SNAPSHOT: no snapshot is needed, only the changes from now
	// on. Creating a logical slot waits for the transactions running at
	// that moment to end.
	created, err := pglogrepl.CreateReplicationSlot(ctx, conn, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "NOEXPORT_SNAPSHOT"})
	if err != nil {
		return s.walError("create temporary replication slot "+slot, err)
	}
	start, err := pglogrepl.ParseLSN(created.ConsistentPoint)
	if err != nil {
		return fmt.Errorf("outboxpg: replication slot %s: %w", slot, err)
	}
	err = pglogrepl.StartReplication(ctx, conn, slot, start, pglogrepl.StartReplicationOptions{
		Mode: pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'",
			"publication_names '" + s.names.publicationName() + "'"}, // [a-z0-9_] only
	})
	if err != nil {
		return s.walError("start replication from slot "+slot, err)
	}
	connected()
	// Commits made before the stream started were not seen.
	wake()
	return s.receiveWAL(ctx, conn, start, wake)
}

// replicationConn opens a logical replication connection with the pool's
// settings (host, user, TLS, ...) but none of its hooks.
func (s *Store) replicationConn(ctx context.Context) (*pgconn.PgConn, error) {
	cfg := s.pool.Config().ConnConfig.Config.Copy()
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "outbox wake-up " + s.Name()
	// A deadline, never a cancel request: the receive loop times out on
	// purpose to send status updates, and the session must survive that.
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, s.walError("open a replication connection", err)
	}
	return conn, nil
}

// checkWALLevel fails with ErrWALWatchUnavailable unless wal_level is
// logical: the slot would be refused with a less helpful message.
func (s *Store) checkWALLevel(ctx context.Context, conn *pgconn.PgConn) error {
	res, err := conn.Exec(ctx, "SHOW wal_level").ReadAll()
	if err != nil {
		return s.walError("read wal_level", err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return fmt.Errorf("outboxpg: SHOW wal_level: unexpected answer")
	}
	if level := string(res[0].Rows[0][0]); level != "logical" {
		return &walUnavailableError{table: s.Name(), reason: fmt.Sprintf("wal_level is %q", level),
			fix: "set wal_level = logical in postgresql.conf and restart PostgreSQL, or turn outboxpg.Options.WatchWAL off"}
	}
	return nil
}

// ensurePublication creates the publication of the table's inserts if it
// does not exist, and checks that an existing one publishes them.
func (s *Store) ensurePublication(ctx context.Context) error {
	pub := s.names.publicationName()
	create := "CREATE PUBLICATION " + sqlident.Quote(pub) + " FOR TABLE " + s.names.qTable + " WITH (publish = 'insert')"
	var inserts, hasTable bool
	err := s.pool.QueryRow(ctx, `SELECT p.pubinsert, EXISTS (SELECT 1 FROM pg_publication_tables t
			WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3)
		FROM pg_publication p WHERE p.pubname = $1`, pub, s.names.schema, s.names.table).Scan(&inserts, &hasTable)
	switch {
	case err == nil && inserts && hasTable:
		return nil
	case err == nil:
		return &walUnavailableError{table: s.Name(), reason: fmt.Sprintf("publication %s exists but does not publish the inserts into %s", pub, s.names.qTable),
			fix: fmt.Sprintf("as the table's owner, DROP PUBLICATION %s; %s", sqlident.Quote(pub), create)}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("outboxpg: look up publication %s: %w", pub, err)
	}
	if _, err := s.pool.Exec(ctx, create); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			switch pgErr.Code {
			case "42710": // duplicate_object: another relay created it meanwhile
				return nil
			case "42501": // insufficient_privilege
				return &walUnavailableError{table: s.Name(), reason: fmt.Sprintf("the role may not create publication %s (%s)", pub, pgErr.Message),
					fix: "create it once as the table's owner: " + create}
			}
		}
		return fmt.Errorf("outboxpg: create publication %s: %w", pub, err)
	}
	return nil
}

// walError turns the refusals an operator must fix into a
// walUnavailableError naming the fix; other errors are returned as they are,
// to be retried.
func (s *Store) walError(what string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("outboxpg: %s: %w", what, err)
	}
	u := &walUnavailableError{table: s.Name(), reason: fmt.Sprintf("%s: %s (SQLSTATE %s)", what, pgErr.Message, pgErr.Code)}
	switch pgErr.Code {
	case "42501", "28000": // insufficient_privilege, invalid_authorization_specification
		u.fix = fmt.Sprintf("give the role the REPLICATION attribute (ALTER ROLE %s REPLICATION) and allow its connections in pg_hba.conf, or turn outboxpg.Options.WatchWAL off",
			sqlident.Quote(s.pool.Config().ConnConfig.User))
	case "55000": // object_not_in_prerequisite_state: wal_level below logical
		u.fix = "set wal_level = logical in postgresql.conf and restart PostgreSQL, or turn outboxpg.Options.WatchWAL off"
	case "53300", "53400": // too_many_connections (WAL senders), configuration_limit_exceeded (slots)
		u.fix = "raise max_replication_slots and max_wal_senders (each watching relay takes one of each), or turn outboxpg.Options.WatchWAL off on some relays"
		u.transient = true
	default:
		return fmt.Errorf("outboxpg: %s: %w", what, err)
	}
	return u
}

// receiveWAL reads the replication stream until it fails or ctx ends. It
// decodes only what it needs of pgoutput's messages: the relation of each
// insert and the commits.
func (s *Store) receiveWAL(ctx context.Context, conn *pgconn.PgConn, received pglogrepl.LSN, wake func()) error {
	ours := map[uint32]bool{} // relation id -> is the outbox table
	inserted := false         // the current transaction inserted into it
	nextStatus := time.Now().Add(walStatusInterval)
	for {
		if !time.Now().Before(nextStatus) {
			// Everything received is as good as flushed: the slot needs to
			// keep no WAL for this session.
			if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{WALWritePosition: received}); err != nil {
				return fmt.Errorf("outboxpg: send standby status update: %w", err)
			}
			nextStatus = time.Now().Add(walStatusInterval)
		}
		recvCtx, cancel := context.WithDeadline(ctx, nextStatus)
		msg, err := conn.ReceiveMessage(recvCtx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) {
				continue // time for a status update
			}
			return fmt.Errorf("outboxpg: receive from the replication stream: %w", err)
		}
		var data []byte
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			data = msg.Data
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("outboxpg: replication stream: %w", pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return errors.New("outboxpg: the server ended the replication stream")
		default:
			continue
		}
		if len(data) == 0 {
			continue
		}
		switch data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
			if err != nil {
				return fmt.Errorf("outboxpg: replication keepalive: %w", err)
			}
			received = max(received, k.ServerWALEnd)
			if k.ReplyRequested {
				nextStatus = time.Time{}
			}
		case pglogrepl.XLogDataByteID:
			x, err := pglogrepl.ParseXLogData(data[1:])
			if err != nil {
				return fmt.Errorf("outboxpg: replication data: %w", err)
			}
			received = max(received, x.WALStart+pglogrepl.LSN(len(x.WALData)))
			if err := s.decodeWAL(x.WALData, ours, &inserted, wake); err != nil {
				return err
			}
		}
	}
}

// decodeWAL handles one pgoutput message (protocol version 1).
func (s *Store) decodeWAL(m []byte, ours map[uint32]bool, inserted *bool, wake func()) error {
	if len(m) == 0 {
		return nil
	}
	switch pglogrepl.MessageType(m[0]) {
	case pglogrepl.MessageTypeBegin:
		*inserted = false
	case pglogrepl.MessageTypeRelation:
		parsed, err := pglogrepl.Parse(m)
		if err != nil {
			return fmt.Errorf("outboxpg: replication relation message: %w", err)
		}
		if r, ok := parsed.(*pglogrepl.RelationMessage); ok {
			ours[r.RelationID] = r.Namespace == s.names.schema && r.RelationName == s.names.table
		}
	case pglogrepl.MessageTypeInsert:
		// 'I', then the relation id (int32).
		if len(m) >= 5 && ours[binary.BigEndian.Uint32(m[1:5])] {
			*inserted = true
		}
	case pglogrepl.MessageTypeCommit:
		// Decoding sends a transaction only once it committed: the rows
		// are visible to the relay's claim now.
		if *inserted {
			*inserted = false
			wake()
		}
	}
	return nil
}
