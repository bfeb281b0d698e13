package outboxpg

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/go-outbox/outbox/internal/backoff"
	"github.com/go-outbox/outbox/internal/sqlident"
)

// listenChunk bounds the LISTEN statements sent in one round trip, so that
// the statement text stays small whatever the number of tables.
const listenChunk = 500

// ListenForWrites takes one connection out of the pool for good, LISTENs on
// it on the channel of every table of the latest Tables call, and calls wake
// with a table's name (its Store's Name) for every notification on that
// table's channel, until ctx is done; it then returns ctx.Err(). The writers
// send them when Options.Notify is set. While idle it sends nothing: it
// blocks reading the connection. It takes no connection until a Tables
// call lists a table; once it holds one, it keeps it (with no channel
// listened to) while later calls list none.
//
// wake is called for every table each time listening starts, the first time
// included, since notifications sent while not listening are lost, and for
// each table that a later Tables call adds, once it is listened to. When a
// Tables call changes the tables, the wait is cut short and the same
// connection LISTENs on the channels of the new ones and UNLISTENs those of
// the gone ones. After a failure it takes a new connection with a backoff
// from 100 ms doubling to 5 s, as Store.ListenForWrites does.
func (t *Tables) ListenForWrites(ctx context.Context, wake func(name string)) error {
	retry := backoff.New(listenBackoffMin, listenBackoffMax)
	for {
		// The error is not reported: polling is the relay's safety net,
		// and a listener that keeps failing is retried with a backoff.
		_ = t.listenOnce(ctx, wake, retry)
		if ctx.Err() != nil || !retry.Sleep(ctx, nil) {
			return ctx.Err()
		}
	}
}

// listenOnce listens on one connection until it fails or ctx ends.
func (t *Tables) listenOnce(ctx context.Context, wake func(string), retry *backoff.Backoff) error {
	stores, changed := t.current()
	for len(stores) == 0 {
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		stores, changed = t.current()
	}
	pc, err := t.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("outboxpg: acquire listening connection: %w", err)
	}
	l := &tablesListener{conn: pc.Hijack()}
	defer l.close(ctx)
	added, err := l.follow(ctx, stores)
	if err != nil {
		return err
	}
	retry.Reset()
	for _, name := range added {
		wake(name)
	}
	for {
		err := l.waitUntil(ctx, changed, wake)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-changed:
		default:
			return err
		}
		// The wait was cut short for the change. pgx keeps a connection
		// whose wait timed out (the cut sets a deadline on it) in working
		// order; if it is closed all the same, follow fails and the
		// caller takes a new one.
		stores, changed = t.current()
		if added, err = l.follow(ctx, stores); err != nil {
			return err
		}
		for _, name := range added {
			wake(name)
		}
	}
}

// tablesListener is the connection of Tables.ListenForWrites and the
// channels it listens on.
type tablesListener struct {
	conn  *pgx.Conn
	names map[string]string // table name by channel, of the channels listened on
}

// follow makes the connection listen on the channels of stores, and on no
// other, and returns the names of the tables it was not listening for.
// After an error the connection is to be closed: which of its statements
// took effect is not known.
func (l *tablesListener) follow(ctx context.Context, stores []*Store) ([]string, error) {
	want := make(map[string]string, len(stores))
	var added, stmts []string
	for _, s := range stores {
		want[s.names.channel] = s.Name()
		if _, ok := l.names[s.names.channel]; !ok {
			added = append(added, s.Name())
			stmts = append(stmts, "LISTEN "+sqlident.Quote(s.names.channel))
		}
	}
	for ch := range l.names {
		if _, ok := want[ch]; !ok {
			stmts = append(stmts, "UNLISTEN "+sqlident.Quote(ch))
		}
	}
	for chunk := range slices.Chunk(stmts, listenChunk) {
		// Without arguments, pgx sends the statements by the simple
		// protocol, which takes several at once.
		if _, err := l.conn.Exec(ctx, strings.Join(chunk, "; ")); err != nil {
			return nil, fmt.Errorf("outboxpg: listen on the channels of %d tables: %w", len(stores), err)
		}
	}
	l.names = want
	return added, nil
}

// waitUntil calls wake for each notification on a channel listened on, until
// the connection fails, ctx ends or changed is closed.
func (l *tablesListener) waitUntil(ctx context.Context, changed <-chan struct{}, wake func(string)) error {
	waitCtx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-changed:
			cancel()
		case <-waitCtx.Done():
		}
	}()
	defer func() {
		cancel()
		<-watched
	}()
	for {
		n, err := l.conn.WaitForNotification(waitCtx)
		if err != nil {
			return err
		}
		// A channel just unlistened may still deliver what was sent
		// before: it is no table's any more.
		if name, ok := l.names[n.Channel]; ok {
			wake(name)
		}
	}
}

// close closes the connection, which ends its LISTENs.
func (l *tablesListener) close(ctx context.Context) {
	closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_ = l.conn.Close(closeCtx)
}
