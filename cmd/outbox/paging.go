package main

import "github.com/google/uuid"

// listPage is how many rows the commands read at a time when they go
// through a whole list.
const listPage = 500

// eachListed hands fn every row list returns, page after page in id order
// (list takes the last id of the page before and a page size), until a page
// comes back short.
func eachListed[T any](list func(after uuid.UUID, limit int) ([]T, error), id func(T) uuid.UUID, fn func(T)) error {
	for after := uuid.Nil; ; {
		page, err := list(after, listPage)
		if err != nil {
			return err
		}
		for _, row := range page {
			fn(row)
		}
		if len(page) < listPage {
			return nil
		}
		after = id(page[len(page)-1])
	}
}
