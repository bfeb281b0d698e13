module github.com/go-outbox/outbox/outboxkafka

go 1.26.0

require (
	github.com/go-outbox/outbox v0.0.0-00010101000000-000000000000
	github.com/go-outbox/outbox/internal/kafkatest v0.0.0-00010101000000-000000000000
	github.com/google/uuid v1.6.0
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.0
)

require (
	github.com/dustin/go-humanize v1.0.1 // indirect
	github.com/mattn/go-isatty v0.0.24 // indirect
	github.com/ncruces/go-strftime v1.0.0 // indirect
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec // indirect
	golang.org/x/sys v0.49.0 // indirect
	modernc.org/libc v1.77.1 // indirect
	modernc.org/mathutil v1.7.1 // indirect
	modernc.org/memory v1.12.1 // indirect
	modernc.org/sqlite v1.60.1 // indirect
)

require (
	github.com/go-outbox/outbox/outboxsqlite v0.0.0-00010101000000-000000000000
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
)

replace github.com/go-outbox/outbox => ..

replace github.com/go-outbox/outbox/internal/kafkatest => ../internal/kafkatest

replace github.com/go-outbox/outbox/outboxsqlite => ../outboxsqlite
