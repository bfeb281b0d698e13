module github.com/go-outbox/outbox/outboxmysql

go 1.26.0

replace github.com/go-outbox/outbox => ..

replace github.com/go-outbox/outbox/internal/mysqltest => ../internal/mysqltest

require (
	github.com/go-outbox/outbox v0.0.0-00010101000000-000000000000
	github.com/go-outbox/outbox/internal/mysqltest v0.0.0-00010101000000-000000000000
	github.com/go-sql-driver/mysql v1.10.1
	github.com/google/uuid v1.6.0
)

require filippo.io/edwards25519 v1.2.0 // indirect
