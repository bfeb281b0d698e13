package main

import (
	"fmt"
	"net/http"
	"time"

	"github.com/go-outbox/outbox/outboxdriver"
)

func (c *console) overview(w http.ResponseWriter, r *http.Request) {
	st, err := c.admin.Stats(r.Context())
	if err != nil {
		c.fail(w, err)
		return
	}
	oldest := "none"
	if st.Pending > 0 {
		oldest = st.OldestPending.Round(time.Millisecond).String()
	}
	rate := "n/a"
	if st.Published > 0 {
		rate = fmt.Sprintf("%.1f", float64(st.PublishedLastMinute)/60)
	}
	c.render(w, "overview", struct {
		page
		Stats            outboxdriver.Stats
		Oldest, Rate, At string
	}{c.page(r, "Overview"), st, oldest, rate, time.Now().UTC().Format("15:04:05 MST")})
}
