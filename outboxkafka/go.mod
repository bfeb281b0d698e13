module github.com/go-outbox/outbox/outboxkafka

go 1.26.0

require (
	github.com/go-outbox/outbox v0.0.0-00010101000000-000000000000
	github.com/go-outbox/outbox/internal/kafkatest v0.0.0-00010101000000-000000000000
	github.com/google/uuid v1.6.0
	github.com/twmb/franz-go v1.22.2
	github.com/twmb/franz-go/pkg/kadm v1.18.0
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.0
)

require (
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	golang.org/x/crypto v0.58.0 // indirect
)

replace github.com/go-outbox/outbox => ..

replace github.com/go-outbox/outbox/internal/kafkatest => ../internal/kafkatest
