module github.com/go-outbox/outbox/outboxpg

go 1.26.0

replace github.com/go-outbox/outbox => ..

replace github.com/go-outbox/outbox/internal/pgtest => ../internal/pgtest

require (
	github.com/go-outbox/outbox v0.0.0-00010101000000-000000000000
	github.com/go-outbox/outbox/internal/pgtest v0.0.0-00010101000000-000000000000
	github.com/google/uuid v1.6.0
	github.com/jackc/pgx/v5 v5.12.0
)

require (
	github.com/ThreeDotsLabs/watermill v1.5.1
	github.com/ThreeDotsLabs/watermill-sql/v3 v3.1.0
	github.com/antithesishq/antithesis-sdk-go v0.8.0-default-no-op
	github.com/dustin/go-humanize v1.0.1
	github.com/google/go-tpm v0.9.8
	github.com/inconshreveable/mousetrap v1.1.0
	github.com/jackc/pgpassfile v1.0.0 // indirect
	github.com/jackc/pgservicefile v0.0.0-20240606120523-5a60cdf6a761 // indirect
	github.com/jackc/puddle/v2 v2.2.3 // indirect
	github.com/klauspost/compress v1.20.3
	github.com/lithammer/shortuuid/v3 v3.0.7
	github.com/mattn/go-isatty v0.0.24
	github.com/minio/highwayhash v1.0.4
	github.com/nats-io/jwt/v2 v2.8.2
	github.com/nats-io/nats-server/v2 v2.15.2
	github.com/nats-io/nats.go v1.55.0
	github.com/nats-io/nkeys v0.4.16
	github.com/nats-io/nuid v1.0.1
	github.com/ncruces/go-strftime v1.0.0
	github.com/oklog/ulid v1.3.1
	github.com/pierrec/lz4/v4 v4.1.33
	github.com/pkg/errors v0.9.1
	github.com/rabbitmq/amqp091-go v1.16.0
	github.com/remyoudompheng/bigfft v0.0.0-20230129092748-24d4a6f8daec
	github.com/spf13/cobra v1.10.2
	github.com/spf13/pflag v1.0.9
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.0
	golang.org/x/crypto v0.58.0
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.49.0
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0
	modernc.org/libc v1.77.1
	modernc.org/mathutil v1.7.1
	modernc.org/memory v1.12.1
	modernc.org/sqlite v1.60.1
)
