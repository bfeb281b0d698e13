package outboxtest_test

import (
	"context"
	"errors"

	"github.com/go-outbox/outbox"
)

// table is a Table of messages at hand.
type table []outbox.Message

func (tb table) Pending(context.Context) ([]outbox.Message, error) { return tb, nil }

// brokenTable fails every read.
type brokenTable struct{}

func (brokenTable) Pending(context.Context) ([]outbox.Message, error) {
	return nil, errors.New("connection refused")
}
