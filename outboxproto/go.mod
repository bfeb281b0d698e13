module github.com/go-outbox/outbox/outboxproto

go 1.25.0

require (
	github.com/go-outbox/outbox v0.0.0-00010101000000-000000000000
	google.golang.org/protobuf v1.36.12
)

require github.com/google/uuid v1.6.0 // indirect

replace github.com/go-outbox/outbox => ..
