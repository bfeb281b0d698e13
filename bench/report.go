package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The report: markdown tables (printed by the CLI and written into the doc)
// and the verdict on each target, computed from the numbers of one run.

// Target is one goal with its verdict.
type Target struct {
	Goal     string
	Measured string
	Verdict  string // met, missed, not measured
}

// Targets judges the run against the project's goals.
func (r *Report) Targets() []Target {
	var ts []Target
	best := r.bestRelay("noop")
	ceil := bestOf(r.Ceiling)
	wmDefault := r.watermill(0)

	if best.Median() > 0 && ceil.Median() > 0 {
		q := best.Median() / ceil.Median()
		ts = append(ts, Target{
			Goal: "relay to a no-op publisher ≥ 50 % of the raw DELETE ceiling",
			Measured: fmt.Sprintf("best relay %s msgs/s (batch %d, %d relays) = %.0f %% of the best ceiling %s msgs/s (batch %d)",
				thousands(best.Median()), best.Batch, best.Relays, q*100, thousands(ceil.Median()), ceil.Batch),
			Verdict: verdict(q >= 0.5),
		})
	} else {
		ts = append(ts, Target{Goal: "relay to a no-op publisher ≥ 50 % of the raw DELETE ceiling", Verdict: "not measured"})
	}
	if best.Median() > 0 && wmDefault.Median() > 0 {
		q := best.Median() / wmDefault.Median()
		ts = append(ts, Target{
			Goal:     "relay ≥ 15x watermill's forwarder at its defaults",
			Measured: fmt.Sprintf("%s vs %s msgs/s = %.1fx", thousands(best.Median()), thousands(wmDefault.Median()), q),
			Verdict:  verdict(q >= 15),
		})
	} else {
		ts = append(ts, Target{Goal: "relay ≥ 15x watermill's forwarder at its defaults", Verdict: "not measured"})
	}
	for _, mode := range []string{"in-process", "notify", "polling"} {
		for _, l := range r.Latency {
			if l.Mode == mode && l.Rate == 1000 {
				ts = append(ts, Target{
					Goal:     fmt.Sprintf("p99 commit-to-publish < 5 ms at 1,000 msg/s (%s)", mode),
					Measured: fmt.Sprintf("p99 %s (p50 %s, max %s; %.0f msg/s achieved)", ms(l.P99), ms(l.P50), ms(l.Max), l.Achieved),
					Verdict:  verdict(l.P99 < 5*time.Millisecond && l.Missing == 0),
				})
			}
		}
	}
	if base, relay, ok := r.idlePair(); ok {
		extra := relay.Xids - base.Xids
		ts = append(ts, Target{
			Goal: "the idle relay writes no transactions",
			Measured: fmt.Sprintf("%d write transactions in %s with the relay, %d without (%d statements sent by the relay)",
				relay.Xids, relay.Window, base.Xids, relay.Statements),
			Verdict: verdict(extra <= 0),
		})
	} else {
		ts = append(ts, Target{Goal: "the idle relay writes no transactions", Verdict: "not measured"})
	}
	if w := r.Writer; w != nil && len(w.Variants) >= 3 {
		order, second, one := w.Variants[0].P50, w.Variants[1].P50, w.Variants[2].P50
		ov, sv := one-order, second-order
		v := verdict(ov <= sv)
		if ov > sv && float64(ov) <= 1.1*float64(sv) {
			v = "met (within 10 % noise)"
		}
		ts = append(ts, Target{
			Goal:     "writer overhead no worse than a plain second insert",
			Measured: fmt.Sprintf("+%s p50 for one outbox message vs +%s for a plain second insert (order alone %s)", ms(ov), ms(sv), ms(order)),
			Verdict:  v,
		})
	}
	return ts
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

func (r *Report) bestRelay(pub string) Throughput {
	var best Throughput
	for _, t := range r.Drain {
		if t.Publisher == pub && t.Variant == "" && t.Median() > best.Median() {
			best = t
		}
	}
	return best
}

func bestOf(ts []Throughput) Throughput {
	var best Throughput
	for _, t := range ts {
		if t.Median() > best.Median() {
			best = t
		}
	}
	return best
}

func (r *Report) watermill(batch int) Throughput {
	for _, t := range r.Watermill {
		if t.Batch == batch {
			return t
		}
	}
	return Throughput{}
}

func (r *Report) ceiling(batch int) Throughput {
	for _, t := range r.Ceiling {
		if t.Batch == batch {
			return t
		}
	}
	return Throughput{}
}

func (r *Report) idlePair() (base, relay Idle, ok bool) {
	if len(r.Idle) < 2 {
		return base, relay, false
	}
	return r.Idle[0], r.Idle[1], true
}

// Markdown returns the result tables. With charts, it links the SVG files
// (written next to the doc by WriteDoc) and includes the statement plans.
func (r *Report) Markdown(charts bool) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	if ts := r.Targets(); len(ts) > 0 && (len(r.Drain) > 0 || len(r.Latency) > 0 || len(r.Idle) > 0 || r.Writer != nil) {
		p("## Targets\n\n| target | measured | verdict |\n| --- | --- | --- |\n")
		for _, t := range ts {
			p("| %s | %s | %s |\n", t.Goal, t.Measured, t.Verdict)
		}
		p("\n")
	}

	if len(r.Drain) > 0 || len(r.Ceiling) > 0 || len(r.Watermill) > 0 {
		p("## Relay throughput\n\n")
		p("Each run drains a backlog of %s pending messages (%d-byte payloads, filled with COPY after a `CHECKPOINT`, then `VACUUM ANALYZE`) in a fresh schema; "+
			"the figure is the median of %d runs, interleaved so load from elsewhere hits every configuration alike. "+
			"Relays are separate `outbox.Relay` instances, each with its own pool, default config (2 workers) but the batch size; "+
			"the clock stops when every message was confirmed and the relays shut down (last deletions recorded). "+
			"Rows marked *experiment* change one session setting of the relays' pools, to measure a proposed change before making it. "+
			"WAL figures are cluster-wide deltas over the median run: bytes from `pg_current_wal_lsn()`, write transactions from assigned transaction ids, fsyncs from `pg_stat_wal.wal_sync`.\n\n",
			thousands(float64(r.Options.Backlog)), r.Options.PayloadBytes, r.Options.Repeats)
		if charts {
			p("![Relay throughput by batch size and relay count](benchmarks/throughput.svg)\n\n")
		}
		p("| publisher | batch | relays | msgs/s (median) | runs | vs ceiling (same batch) | vs watermill defaults | WAL bytes/msg | write tx / 1k msgs | WAL fsyncs / 1k msgs |\n")
		p("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
		wm := r.watermill(0).Median()
		for _, t := range r.Drain {
			pub := t.Publisher
			if t.Variant != "" {
				pub += ", experiment: relay sessions with " + t.Variant
			}
			p("| %s | %d | %d | **%s** | %s | %s | %s | %s | %s | %s |\n", pub, t.Batch, t.Relays, thousands(t.Median()), runsString(t.Runs),
				ratio(t.Median(), r.ceiling(t.Batch).Median()), ratio(t.Median(), wm), walPerMsg(t), perK(t.WAL.Xids, t.Backlog), perK(t.WAL.Syncs, t.Backlog))
		}
		if len(r.Ceiling)+len(r.Watermill) > 0 {
			p("\nReferences, in the same run:\n\n| reference | batch | msgs/s (median) | runs | WAL bytes/msg | write tx / 1k msgs | WAL fsyncs / 1k msgs |\n| --- | ---: | ---: | --- | ---: | ---: | ---: |\n")
			for _, t := range r.Ceiling {
				p("| raw `DELETE ... RETURNING` loop, 1 connection | %d | %s | %s | %s | %s | %s |\n", t.Batch, thousands(t.Median()), runsString(t.Runs), walPerMsg(t), perK(t.WAL.Xids, t.Backlog), perK(t.WAL.Syncs, t.Backlog))
			}
			for _, t := range r.Watermill {
				label := "1000"
				name := "watermill-sql forwarder, batch 1000"
				if t.Batch == 0 {
					label, name = "100 (default)", "watermill-sql forwarder, defaults"
				}
				p("| %s | %s | %s | %s | %s | %s | %s |\n", name, label, thousands(t.Median()), runsString(t.Runs), walPerMsg(t), perK(t.WAL.Xids, t.Backlog), perK(t.WAL.Syncs, t.Backlog))
			}
		}
		p("\n")
	}

	if len(r.Latency) > 0 {
		p("## Commit-to-publish latency\n\n")
		p("One message per transaction, committed on a fixed schedule (open loop, %d writer goroutines) for %s after a 1 s warm-up; "+
			"latency runs from the return of `Commit` in the writer to the message's arrival at the (no-op) publisher. "+
			"Relay at its defaults (batch 100, 2 workers, poll 10 ms after work doubling to 1 s); "+
			"\"relay claims / msg\" counts its `Exchange` round trips (each a claim, most also recording the previous batch) per message published.\n\n", latencyWriters, r.Options.LatencyDuration)
		if charts {
			p("![Commit-to-publish latency percentiles](benchmarks/latency.svg)\n\n")
		}
		p("| set-up | msg/s (target) | achieved | samples | p50 | p95 | p99 | max | relay claims / msg |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for _, l := range r.Latency {
			p("| %s | %s | %.0f | %s | %s | %s | %s | %s | %.2f |\n", l.Mode, thousands(float64(l.Rate)), l.Achieved, thousands(float64(l.Samples)), ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max), l.ExchangesPerMessage)
		}
		p("\n")
		seen := map[string]bool{}
		for _, l := range r.Latency {
			if !seen[l.Mode] {
				seen[l.Mode] = true
				p("- **%s**: %s.\n", l.Mode, l.Label)
			}
		}
		var missing []string
		for _, l := range r.Latency {
			if l.Missing > 0 || l.Early > 0 {
				missing = append(missing, fmt.Sprintf("%s at %d msg/s: %d published before Commit returned (counted as 0), %d not published in time", l.Mode, l.Rate, l.Early, l.Missing))
			}
		}
		if len(missing) > 0 {
			p("- Edge cases: %s.\n", strings.Join(missing, "; "))
		}
		p("\n")
	}

	if w := r.Writer; w != nil {
		p("## Writer overhead\n\n")
		p("A business transaction (`BEGIN`, insert an order row, ..., `COMMIT`, through `Store.RunInTx`) on one connection, %s of each kind, the kinds interleaved. "+
			"Each statement is one round trip; the commit waits for the WAL flush.\n\n", thousands(float64(w.Transactions)))
		p("| transaction | p50 | p95 | p50 over order only |\n| --- | ---: | ---: | ---: |\n")
		for i, v := range w.Variants {
			over := "-"
			if i > 0 {
				over = "+" + ms(v.P50-w.Variants[0].P50)
			}
			p("| %s | %s | %s | %s |\n", v.Name, ms(v.P50), ms(v.P95), over)
		}
		p("\n%d concurrent writers for %s, median of %d runs:\n\n| transaction | commits/s (median) | runs |\n| --- | ---: | --- |\n", concurrentWriters, r.Options.WriterDuration, r.Options.Repeats)
		for _, t := range w.Concurrent {
			p("| %s | %s | %s |\n", t.Label, thousands(t.Median()), runsString(t.Runs))
		}
		if len(w.Concurrent) == 4 && w.Concurrent[2].Median() > 0 {
			p("\nNOTIFY costs %.0f %% of the commits/s of the same transaction without it.\n", (1-w.Concurrent[3].Median()/w.Concurrent[2].Median())*100)
		}
		p("\n")
	}

	if w := r.Wakeup; w != nil {
		r.wakeupMarkdown(p)
	}

	if len(r.Idle) > 0 {
		p("## Idle cost\n\n")
		p("An empty outbox, a relay at the given settings, a window of %s after a %s warm-up. "+
			"Statements are counted by a pgx tracer on the relay's pool. "+
			"Write transactions are transaction ids assigned cluster-wide (PostgreSQL gives one only to a transaction that writes; "+
			"`pg_stat_database.xact_commit` would count read-only ones too), WAL bytes the advance of `pg_current_wal_lsn()`. "+
			"Both are cluster-wide, hence the first row: the same window with no relay. "+
			"All windows use one table with no DDL in between, after a `VACUUM ANALYZE`, and a window in which autovacuum worked (its ANALYZE of a catalog is a write transaction) is measured again.\n\n", r.Options.IdleDuration, idleWarmup)
		p("| set-up | statements/s | round trips/s | write transactions | WAL bytes |\n| --- | ---: | ---: | ---: | ---: |\n")
		for _, i := range r.Idle {
			note := ""
			if i.Autovacuum {
				note = " (autovacuum worked during the window)"
			}
			p("| %s%s | %.2f | %.2f | %d | %d |\n", i.Name, note, float64(i.Statements)/i.Window.Seconds(), float64(i.RoundTrips)/i.Window.Seconds(), i.Xids, i.WALBytes)
		}
		p("\n")
	}

	if g := r.Growth; g != nil {
		p("## Growth with retention on\n\n")
		p("%s messages written by %d writers (%d messages per transaction, `Writer.Transact`) at a target of %s msg/s, "+
			"one relay at its defaults with `Retention: %s` (published rows kept, then deleted by its cleanup in batches of %d). "+
			"Sampled every second.\n\n", thousands(float64(g.Messages)), growthWriters, growthPerTx, thousands(float64(r.Options.GrowthRate)), g.Retention, 1000)
		if charts {
			p("![Rows by state over time](benchmarks/growth-rows.svg)\n\n![Table size and dead tuples over time](benchmarks/growth-size.svg)\n\n")
		}
		p("| | before | peak | after |\n| --- | ---: | ---: | ---: |\n")
		p("| `pg_total_relation_size` | %s | %s | %s |\n", mib(g.Before.TotalBytes), mib(g.Peak.TotalBytes), mib(g.After.TotalBytes))
		p("| `n_dead_tup` | %s | %s | %s |\n", thousands(float64(g.Before.DeadTuples)), thousands(float64(g.Peak.DeadTuples)), thousands(float64(g.After.DeadTuples)))
		p("| `n_live_tup` | %s | | %s |\n", thousands(float64(g.Before.LiveTuples)), thousands(float64(g.After.LiveTuples)))
		p("| autovacuum runs | %d | | %d |\n\n", g.Before.Autovacuum, g.After.Autovacuum)
		p("- Written at %s msg/s on average; the run took %s until every message was published and every expired row deleted.\n", thousands(g.WriteRate), g.Duration.Round(time.Second))
		p("- Cleanup: at most %s published rows past retention at once; the oldest expired row was at worst %s past its expiry. Caught up at the end: %v.\n",
			thousands(float64(g.MaxExpired)), g.CleanupLagMax.Round(time.Millisecond), g.CaughtUp)
		var maxPending int64
		for _, s := range g.Samples {
			maxPending = max(maxPending, s.Pending)
		}
		p("- At most %s messages were pending (written, not yet published) at once.\n\n", thousands(float64(maxPending)))
	}

	if len(r.Explain) > 0 {
		p("## What each batch costs the server\n\n")
		p("The relay's statements, captured from a real `Exchange` on a %s-message backlog and run again under `EXPLAIN (ANALYZE, BUFFERS, WAL)` in a rolled-back transaction; "+
			"WAL is the advance of `pg_current_wal_insert_lsn()` around each.\n\n", thousands(float64(r.Options.Backlog)))
		p("| statement | rows | execution | WAL bytes | WAL bytes/row |\n| --- | ---: | ---: | ---: | ---: |\n")
		for _, x := range r.Explain {
			p("| %s | %d | %s | %s | %.0f |\n", x.Name, x.Rows, ms(x.Execution), thousands(float64(x.WALBytes)), float64(x.WALBytes)/float64(max(x.Rows, 1)))
		}
		if r.Commit.N > 0 {
			p("\nA one-row write transaction takes %s (p50 of %d) with `synchronous_commit = on` and %s with it off: every batch's commit pays about %s for the WAL flush.\n",
				ms(r.Commit.On), r.Commit.N, ms(r.Commit.Off), ms(r.Commit.On-r.Commit.Off))
		}
		if charts {
			p("\n<details><summary>Plans</summary>\n\n")
			for _, x := range r.Explain {
				p("%s:\n\n```\n%s\n```\n\n", x.Name, x.Plan)
			}
			p("</details>\n")
		}
		p("\n")
	}
	return b.String()
}

var nan = math.NaN()

func walPerMsg(t Throughput) string {
	if t.Backlog == 0 || t.WAL.Bytes == 0 {
		return "-"
	}
	return thousands(float64(t.WAL.Bytes) / float64(t.Backlog))
}

// charts returns the SVG files of the report by file name.
func (r *Report) charts() map[string]string {
	out := map[string]string{}
	if len(r.Drain) > 0 {
		out["throughput.svg"] = r.throughputChart()
	}
	if len(r.Latency) > 0 {
		out["latency.svg"] = r.latencyChart()
	}
	if r.Growth != nil && len(r.Growth.Samples) > 0 {
		rows, size := r.growthCharts()
		out["growth-rows.svg"], out["growth-size.svg"] = rows, size
	}
	return out
}

func (r *Report) throughputChart() string {
	batches := []int{10, 100, 1000}
	var relays []int
	for _, t := range r.Drain {
		if t.Publisher == "noop" && t.Variant == "" && !slices.Contains(relays, t.Relays) {
			relays = append(relays, t.Relays)
		}
	}
	slices.Sort(relays)
	c := barChart{Title: fmt.Sprintf("Relay drain of %s messages to a no-op publisher (median of %d)", thousands(float64(r.Options.Backlog)), r.Options.Repeats),
		YLabel: "messages per second", Format: func(v float64) string { return thousands(v) }}
	for _, b := range batches {
		c.Groups = append(c.Groups, fmt.Sprintf("batch %d", b))
	}
	for _, n := range relays {
		c.Series = append(c.Series, fmt.Sprintf("%d relay(s)", n))
		vals := make([]float64, len(batches))
		for i, b := range batches {
			vals[i] = nan
			for _, t := range r.Drain {
				if t.Publisher == "noop" && t.Variant == "" && t.Batch == b && t.Relays == n {
					vals[i] = t.Median()
				}
			}
		}
		c.Values = append(c.Values, vals)
	}
	for i, b := range batches {
		if t := r.ceiling(b); t.Median() > 0 {
			c.Refs = append(c.Refs, refLine{Label: "raw DELETE ceiling (same batch)", Value: t.Median(), Group: i, Color: "#c00", Dash: "6 4"})
		}
	}
	for _, t := range r.Watermill {
		ref := refLine{Label: "watermill forwarder, defaults: " + thousands(t.Median()), Value: t.Median(), Group: -1, Color: "#333", Dash: "2 3"}
		if t.Batch != 0 {
			ref.Label, ref.Color, ref.Dash = "watermill, batch 1000: "+thousands(t.Median()), "#999", "8 3"
		}
		c.Refs = append(c.Refs, ref)
	}
	return c.svg()
}

func (r *Report) latencyChart() string {
	c := barChart{Title: "Commit-to-publish latency, one message per transaction", YLabel: "milliseconds (log scale)", Log: true,
		Format: func(v float64) string { return trimFloat(v) }}
	c.Series = []string{"p50", "p95", "p99", "max"}
	c.Values = make([][]float64, 4)
	for _, l := range r.Latency {
		c.Groups = append(c.Groups, fmt.Sprintf("%s\n%s msg/s", l.Mode, thousands(float64(l.Rate))))
		for i, d := range []time.Duration{l.P50, l.P95, l.P99, l.Max} {
			c.Values[i] = append(c.Values[i], max(float64(d)/float64(time.Millisecond), 0.01))
		}
	}
	c.Refs = []refLine{{Label: "target: p99 < 5 ms at 1,000 msg/s", Value: 5, Group: -1, Color: "#c00", Dash: "6 4"}}
	return c.svg()
}

func (r *Report) growthCharts() (string, string) {
	g := r.Growth
	var xs, pending, kept, expired, size, dead []float64
	for _, s := range g.Samples {
		xs = append(xs, s.At.Seconds())
		pending = append(pending, float64(s.Pending))
		kept = append(kept, float64(s.Kept))
		expired = append(expired, float64(s.Expired))
		size = append(size, float64(s.TotalBytes)/(1<<20))
		dead = append(dead, float64(s.DeadTuples)/1000)
	}
	f := func(v float64) string { return thousands(v) }
	rows := lineChart{Title: fmt.Sprintf("%s messages, Retention %s: rows by state", thousands(float64(g.Messages)), g.Retention), XLabel: "seconds", YLabel: "rows", Format: f,
		Series: []lineSeries{{Name: "pending", X: xs, Y: pending}, {Name: "published, kept", X: xs, Y: kept}, {Name: "published, expired (cleanup backlog)", X: xs, Y: expired}}}
	sizeC := lineChart{Title: "Table size (MiB, with indexes) and dead tuples (thousands)", XLabel: "seconds", YLabel: "MiB / thousands of tuples", Format: f,
		Series: []lineSeries{{Name: "pg_total_relation_size, MiB", X: xs, Y: size}, {Name: "n_dead_tup, thousands", X: xs, Y: dead, Dash: true}}}
	return rows.svg(), sizeC.svg()
}

// wakeupMarkdown renders the wakeup step: the cross-process wake-ups side by
// side, each ratio against "neither" at the same writer count in the same run.
func (r *Report) wakeupMarkdown(p func(string, ...any)) {
	w := r.Wakeup
	p("## Cross-process wake-up\n\n")
	p("How a relay in another process learns of commits, each way measured with that relay running (noop publisher, defaults) on a server with `wal_level = logical` "+
		"(which the WAL watch needs; the other rows use the same server, so the ratios compare like with like). "+
		"Writers commit an order row and one outbox message per transaction (`Store.RunInTx`, no in-process wake-up) for %s, median of %d interleaved runs. "+
		"Database CPU is user + system time from `/proc/<pid>/stat` of every server process `pg_stat_activity` lists (backends, walsender, background processes) over the same window; "+
		"the walsender column is the WAL watch's decoding alone. Relay claims are its `Exchange` round trips (claim plus the previous batch's outcomes, one transaction each): "+
		"a wake-up per commit makes the relay claim as soon as a message is there, in smaller batches than polling, which costs commits too.\n\n", r.Options.WriterDuration, r.Options.Repeats)
	p("| mode | writers | commits/s (median) | runs | vs neither | database CPU (cores) | database CPU ms / 1k commits | walsender ms / 1k commits | relay claims / 1k commits |\n")
	p("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n")
	for _, t := range w.Writers {
		base := 0.0
		for _, o := range w.Writers {
			if o.Mode == "neither" && o.Writers == t.Writers {
				base = o.Median()
			}
		}
		cores, perK, ws := t.CPUMedian()
		p("| %s | %d | **%s** | %s | %s | %.2f | %.0f | %.0f | %.0f |\n", t.Mode, t.Writers, thousands(t.Median()), runsString(t.Runs), ratio(t.Median(), base), cores, perK, ws, median(t.Claims))
	}
	p("\nCommit-to-publish latency at %s msg/s (one message per transaction, %d writer goroutines on a pool of their own) after %s with nothing written, "+
		"the relay warmed up before the idle spell; \"first\" is the first message after the spell. Median p50 and p99 over the runs:\n\n", thousands(float64(w.Rate)), latencyWriters, w.Idle)
	p("| mode | p50 | p99 (median) | p99 runs | max (worst run) | first message (runs) | achieved msg/s | missing |\n| --- | ---: | ---: | --- | ---: | --- | ---: | ---: |\n")
	for _, l := range w.Latency {
		var p50s, p99s, ach []float64
		var p99runs, firsts []string
		var worst time.Duration
		missing := 0
		for _, run := range l.Runs {
			p50s = append(p50s, float64(run.P50))
			p99s = append(p99s, float64(run.P99))
			ach = append(ach, run.Achieved)
			p99runs = append(p99runs, ms(run.P99))
			firsts = append(firsts, ms(run.First))
			worst = max(worst, run.Max)
			missing += run.Missing
		}
		p("| %s | %s | **%s** | %s | %s | %s | %.0f | %d |\n", l.Mode, ms(time.Duration(median(p50s))), ms(time.Duration(median(p99s))), strings.Join(p99runs, " / "),
			ms(worst), strings.Join(firsts, " / "), median(ach), missing)
	}
	p("\n")
	for _, l := range w.Latency {
		p("- **%s**: %s.\n", l.Mode, l.Label)
	}
	p("\n")
}
