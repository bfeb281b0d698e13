package outbox

import "context"

type consumerNameKey struct{}

// WithConsumerName returns ctx carrying the name a consumer adapter keeps its
// parked messages under (ConsumerConfig.Name, Durable or Group): the adapters
// give it to their handler, so that one that parks messages of its own in
// the same table (outboxevents.Dispatcher, under its handlers' names) can
// refuse a name that would mix them up.
func WithConsumerName(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, consumerNameKey{}, name)
}

// ConsumerName returns the name WithConsumerName put in ctx. Inside an
// outboxevents.Dispatcher's handler it is the adapter's name on a first
// delivery, and the handler's own name when Dispatcher.RetryParked runs it.
func ConsumerName(ctx context.Context) (string, bool) {
	name, ok := ctx.Value(consumerNameKey{}).(string)
	return name, ok
}
