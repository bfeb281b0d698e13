package bench

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
)

// The peer: watermill's forwarder (components/forwarder), the outbox of the
// watermill world. Applications publish through forwarder.NewPublisher
// wrapping the SQL publisher, inside their transaction; the rows land in the
// forwarder topic's table (watermill_forwarder_topic) as JSON envelopes
// naming the destination topic; the forwarder subscribes to that table with
// the SQL subscriber (offsets per consumer group, rows are never deleted) and
// publishes each message to the destination publisher, here an in-memory
// gochannel with no subscriber: a no-op, like the relay's.

// wmTopic is forwarder.Config's default ForwarderTopic.
const wmTopic = "forwarder_topic"

// drainWatermill fills the forwarder topic with opts.Backlog enveloped
// messages and times the forwarder until all of them reached the
// destination publisher. batch 0 keeps the SQL subscriber's default (100).
func (e *env) drainWatermill(ctx context.Context, batch int) (float64, WALUsage, error) {
	schema, drop, err := e.schema(ctx, "watermill")
	if err != nil {
		return 0, WALUsage{}, err
	}
	defer drop()

	// watermill-sql names its tables without a schema, so the schema goes on
	// the search path of every connection.
	cfg, err := pgx.ParseConfig(e.opts.DatabaseURL)
	if err != nil {
		return 0, WALUsage{}, err
	}
	cfg.RuntimeParams["search_path"] = schema
	db := stdlib.OpenDB(*cfg)
	defer db.Close()

	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		SchemaAdapter:  wsql.DefaultPostgreSQLSchema{SubscribeBatchSize: batch},
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
	}, watermill.NopLogger{})
	if err != nil {
		return 0, WALUsage{}, fmt.Errorf("watermill subscriber: %w", err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(wmTopic); err != nil {
		return 0, WALUsage{}, fmt.Errorf("watermill schema: %w", err)
	}
	if err := e.fillWatermill(ctx, db, schema); err != nil {
		return 0, WALUsage{}, err
	}

	out := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	defer out.Close()
	pub := &wmCounting{Publisher: out, target: int64(e.opts.Backlog), done: make(chan struct{})}
	fwd, err := forwarder.NewForwarder(sub, pub, watermill.NopLogger{}, forwarder.Config{})
	if err != nil {
		return 0, WALUsage{}, fmt.Errorf("watermill forwarder: %w", err)
	}

	before, err := e.walCounters(ctx)
	if err != nil {
		return 0, WALUsage{}, err
	}
	start := time.Now()
	runErr := make(chan error, 1)
	go func() { runErr <- fwd.Run(ctx) }()
	var waitErr error
	select {
	case <-pub.done:
	case err := <-runErr:
		waitErr = fmt.Errorf("watermill forwarder stopped: %v", err)
	case <-ctx.Done():
		waitErr = ctx.Err()
	case <-time.After(drainTimeout):
		waitErr = fmt.Errorf("watermill forwarder did not finish in %v: %d of %d forwarded", drainTimeout, pub.n.Load(), e.opts.Backlog)
	}
	elapsed := time.Since(start)
	_ = fwd.Close()
	if waitErr != nil {
		return 0, WALUsage{}, waitErr
	}
	_ = sub.Close()
	_ = db.Close()
	wal, err := e.walSince(ctx, before)
	if err != nil {
		return 0, WALUsage{}, err
	}
	return float64(e.opts.Backlog) / elapsed.Seconds(), wal, nil
}

// fillWatermill writes the backlog as forwarder.NewPublisher would: each row
// a JSON envelope {destination_topic, uuid, payload (base64), metadata} in
// the forwarder topic's table, with the writing transaction's id. Rows go in
// transactions of 1,000, as many application transactions would leave them
// (the subscriber orders by transaction id, then offset).
func (e *env) fillWatermill(ctx context.Context, db *sql.DB, schema string) error {
	e.checkpoint(ctx)
	payload := base64.StdEncoding.EncodeToString(payloadOf(e.opts.PayloadBytes))
	meta, _ := json.Marshal(map[string]string{"content-type": "application/octet-stream"})
	const chunk = 1000
	for done := 0; done < e.opts.Backlog; done += chunk {
		n := min(chunk, e.opts.Backlog-done)
		_, err := db.ExecContext(ctx, `
			INSERT INTO "watermill_`+wmTopic+`" (uuid, payload, metadata, transaction_id)
			SELECT gen_random_uuid()::text,
				json_build_object('destination_topic', 'bench.created', 'uuid', gen_random_uuid()::text,
					'payload', $1::text, 'metadata', $2::json),
				'{}'::json, pg_current_xact_id()
			FROM generate_series(1, $3)`, payload, string(meta), n)
		if err != nil {
			return fmt.Errorf("fill watermill table: %w", err)
		}
	}
	return e.vacuum(ctx, schema+".watermill_"+wmTopic)
}

// wmCounting counts messages reaching the destination publisher.
type wmCounting struct {
	message.Publisher
	n      atomic.Int64
	target int64
	done   chan struct{}
	once   sync.Once
}

func (p *wmCounting) Publish(topic string, msgs ...*message.Message) error {
	if err := p.Publisher.Publish(topic, msgs...); err != nil {
		return err
	}
	if p.n.Add(int64(len(msgs))) >= p.target {
		p.once.Do(func() { close(p.done) })
	}
	return nil
}

// startWatermillIdle runs watermill's forwarder at its defaults on an empty
// forwarder topic in schema, its connections traced by tracer, for the idle
// comparison. stop ends it.
func (e *env) startWatermillIdle(ctx context.Context, schema string, tracer pgx.QueryTracer) (stop func(), err error) {
	cfg, err := pgx.ParseConfig(e.opts.DatabaseURL)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["search_path"] = schema
	cfg.Tracer = tracer
	db := stdlib.OpenDB(*cfg)
	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		SchemaAdapter:  wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{},
	}, watermill.NopLogger{})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	if err := sub.SubscribeInitialize(wmTopic); err != nil {
		_ = db.Close()
		return nil, err
	}
	out := gochannel.NewGoChannel(gochannel.Config{}, watermill.NopLogger{})
	fwd, err := forwarder.NewForwarder(sub, out, watermill.NopLogger{}, forwarder.Config{})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fwd.Run(runCtx) }()
	return func() {
		cancel()
		_ = fwd.Close()
		<-done
		_ = sub.Close()
		_ = out.Close()
		_ = db.Close()
	}, nil
}
