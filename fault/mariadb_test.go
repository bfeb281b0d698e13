//go:build fault

package fault

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/internal/mysqltest"
	"github.com/go-outbox/outbox/outboxmysql"
)

// mariaDB is the MariaDB side of a scenario: its own database on the server
// of TEST_MYSQL_URL, the outbox table the relays (outbox relay on a mysql://
// URL) drain and the writers fill. The rest of the scenario, from the relay
// processes to the invariant check, is the PostgreSQL scenarios'.
type mariaDB struct {
	db    *sql.DB
	store *outboxmysql.Store
}

// newMariaDBScenario is newScenario on a fresh MariaDB database.
func newMariaDBScenario(t *testing.T, name string) *scenario {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbName, db := mysqltest.Database(t)
	u, err := url.Parse(mysqltest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + dbName
	m, err := outboxmysql.NewMigrator(db, outboxmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	store, err := outboxmysql.New(db, outboxmysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := &scenario{t: t, name: name, url: u.String(), keyOf: map[uuid.UUID]string{},
		maria: &mariaDB{db: db, store: store}}
	s.toFile()
	return s
}

// committer is scenario.committer on MariaDB.
func (m *mariaDB) committer() (commitFunc, func(), error) {
	w, err := outbox.NewWriter[*sql.Tx](m.store, outbox.WriterConfig{})
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, msgs []*outbox.Message, rollback bool) error {
		return m.store.RunInTx(ctx, func(tx *sql.Tx) error {
			if err := w.Write(ctx, tx, msgs...); err != nil {
				return err
			}
			if rollback {
				return errRollback
			}
			return nil
		})
	}, w.Notify, nil
}

// whyStuck is scenario.whyStuck's view of the database on MariaDB: the
// counts, and the server's sessions with what they run.
func (m *mariaDB) whyStuck(ctx context.Context, b *strings.Builder) {
	st, err := m.store.Stats(ctx)
	fmt.Fprintf(b, "stats: %+v (err %v)\ndatabase sessions:\n", st, err)
	rows, err := m.db.QueryContext(ctx, `SELECT id, command, time, state, left(coalesce(info, ''), 80)
		FROM information_schema.processlist WHERE db = database() AND id <> connection_id()`)
	if err != nil {
		fmt.Fprintf(b, "  (%v)\n", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var id, secs int64
		var command, state, info string
		if err := rows.Scan(&id, &command, &secs, &state, &info); err != nil {
			fmt.Fprintf(b, "  (%v)\n", err)
			return
		}
		fmt.Fprintf(b, "  %d %s %ds %q %q\n", id, command, secs, state, info)
	}
}

// mariaEffects is effects on MariaDB: outboxmysql's inbox table and a table
// of effects with no unique key, in the scenario's database.
type mariaEffects struct {
	db    *sql.DB
	table *outboxmysql.InboxTable
}

// newEffects creates the inbox and effects tables.
func (m *mariaDB) newEffects(t *testing.T) *mariaEffects {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	table, err := outboxmysql.NewInboxTable(m.store, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := table.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.db.ExecContext(ctx, "CREATE TABLE effects (message_id BINARY(16) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	return &mariaEffects{db: m.db, table: table}
}

func (e *mariaEffects) handler(done func(m outbox.Message, applied bool, err error)) (func(context.Context, outbox.Message) error, error) {
	inbox, err := outbox.NewInbox(e.table, consumerName)
	if err != nil {
		return nil, err
	}
	inbox.Observe(verdicts{})
	apply := inbox.Apply(func(ctx context.Context, tx *sql.Tx, m outbox.Message) error {
		_, err := tx.ExecContext(ctx, "INSERT INTO effects VALUES (?)", m.ID[:])
		return err
	})
	return func(ctx context.Context, m outbox.Message) error {
		var v verdict
		err := apply(context.WithValue(ctx, verdictKey{}, &v), m)
		done(m, v.applied, err)
		return err
	}, nil
}

func (e *mariaEffects) applications(ctx context.Context) (map[uuid.UUID]int, error) {
	rows, err := e.db.QueryContext(ctx, "SELECT message_id, count(*) FROM effects GROUP BY message_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	counts := map[uuid.UUID]int{}
	for rows.Next() {
		var raw []byte
		var n int
		if err := rows.Scan(&raw, &n); err != nil {
			return nil, err
		}
		id, err := uuid.FromBytes(raw)
		if err != nil {
			return nil, err
		}
		counts[id] = n
	}
	return counts, rows.Err()
}

// mariaControl returns a function running TEST_MYSQL_CTL (stop, start) on
// the test server, or skips (fails in CI) when the server is not ours to
// stop.
func mariaControl(t *testing.T) func(action string) {
	ctl, base := os.Getenv("TEST_MYSQL_CTL"), os.Getenv("TEST_MYSQL_BASE")
	if ctl == "" || base == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_MYSQL_CTL and TEST_MYSQL_BASE are not set; scripts/fault sets them")
		}
		t.Skip("TEST_MYSQL_CTL and TEST_MYSQL_BASE are not set: run through scripts/fault")
	}
	return func(action string) {
		if out, err := execCommand(ctl, action, base); err != nil {
			t.Fatalf("%s %s: %v\n%s", ctl, action, err, out)
		}
	}
}

// TestFaultMariaDBRelayKilledTenTimesInKeyOrder is TestFaultRelayKilledTenTimes
// on MariaDB: relays in key order SIGKILLed ten times at random moments,
// restarted each time, while writers commit.
func TestFaultMariaDBRelayKilledTenTimesInKeyOrder(t *testing.T) {
	s := newMariaDBScenario(t, "MariaDB relay SIGKILL x10, 20k messages, 2 relays, key order")
	s.killRelaysWhileWriting(20000, 10)
}

// TestFaultMariaDBRelayKilledWithTransactionLeases is
// TestFaultMariaDBRelayKilledTenTimesInKeyOrder with claims held in
// transactions (--transaction-leases), which MySQL has without key order
// only: a killed relay's connections close, the server rolls its claims
// back, and the relays publish those messages again, none lost.
func TestFaultMariaDBRelayKilledWithTransactionLeases(t *testing.T) {
	s := newMariaDBScenario(t, "MariaDB relay SIGKILL x5, 20k messages, 2 relays, transaction leases")
	s.killRelays(20000, 5, "--transaction-leases")
}

// TestFaultMariaDBRestartedMidRun is TestFaultDatabaseRestartedMidRun on
// MariaDB: the server shut down under running writers and relays in key
// order, and started again on its port two seconds later.
func TestFaultMariaDBRestartedMidRun(t *testing.T) {
	ctl := mariaControl(t)
	s := newMariaDBScenario(t, "MariaDB restart, 10k messages, 2 relays, key order")
	s.restartDatabaseMidRun(10000, 1000, func() { ctl("stop") }, func() { ctl("start") })
}
