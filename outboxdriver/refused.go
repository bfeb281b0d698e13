package outboxdriver

import "errors"

// ErrRefused means the database refused the store's role outright: a wrong
// password, a database that does not exist, or a missing privilege on the
// table. CheckSchema wraps it, and a relay stops with the error instead of
// retrying, since asking again cannot help until someone changes the
// configuration. outbox.ErrRefused is the same value.
var ErrRefused = errors.New("outbox: the database refused the store's role")
