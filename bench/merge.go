package bench

import (
	"slices"
	"time"
)

// LaterRun records steps measured in a run after the report's own, merged
// into it (`outbox-bench --only brokers --merge results.json`): scripts/bench
// measures RabbitMQ that way, so the broker's Erlang VM is not running during
// the other measurements.
type LaterRun struct {
	Command   string
	Steps     []string
	Started   time.Time
	LoadStart string
	LoadEnd   string
}

// Merge replaces the results of steps in r by those of newer, a later run of
// only those steps, and records that it did.
func (r *Report) Merge(newer *Report, steps []string) {
	for _, s := range steps {
		switch s {
		case "idle":
			r.Idle = newer.Idle
		case "writer":
			r.Writer = newer.Writer
		case "latency":
			r.Latency = newer.Latency
		case "wakeup":
			r.Wakeup = newer.Wakeup
		case "drain":
			r.Drain = slices.DeleteFunc(r.Drain, func(t Throughput) bool { return t.Publisher == "noop" })
			for _, t := range newer.Drain {
				if t.Publisher == "noop" {
					r.Drain = append(r.Drain, t)
				}
			}
			r.Ceiling, r.Watermill = newer.Ceiling, newer.Watermill
		case "brokers":
			for _, t := range newer.Drain {
				if t.Publisher == "noop" {
					continue
				}
				r.Drain = slices.DeleteFunc(r.Drain, func(o Throughput) bool {
					return o.Publisher == t.Publisher && o.Batch == t.Batch && o.Relays == t.Relays && o.Variant == t.Variant
				})
			}
			for _, t := range newer.Drain {
				if t.Publisher != "noop" {
					r.Drain = append(r.Drain, t)
				}
			}
		case "explain":
			r.Explain, r.Commit = newer.Explain, newer.Commit
		case "growth":
			r.Growth = newer.Growth
		}
	}
	r.Later = append(r.Later, LaterRun{Command: newer.Command, Steps: steps, Started: newer.Started,
		LoadStart: newer.Machine.LoadStart, LoadEnd: newer.Machine.LoadEnd})
}
