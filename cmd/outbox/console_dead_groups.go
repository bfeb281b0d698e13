package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"github.com/google/uuid"
)

// groupLine is a group of dead messages as the dead letters page lists it.
type groupLine struct {
	*deadGroup
	// Members is the digest of the group's ids the page counted, which its
	// retry and discard carry back.
	Members string
}

// membersDigest is a digest of the set ids: the same ids give the same
// digest, in any order, and one id more or less another. It lets a group's
// form name exactly the messages the page counted in a few bytes, where
// their ids could weigh megabytes (a group may hold deadGroupScanLimit).
func membersDigest(ids []uuid.UUID) string {
	sorted := slices.SortedFunc(slices.Values(ids), func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	h := sha256.New()
	for _, id := range sorted {
		h.Write(id[:])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// actOnGroup retries or discards a group of the dead letters page, as
// line.action says: exactly the messages the page counted in it. If the
// group changed since (a member retried or discarded elsewhere, a message
// that died since and failed the same way), it refuses: the user decided on
// what the page showed, and should look again.
func (c *console) actOnGroup(w http.ResponseWriter, r *http.Request, line *auditLine) {
	id, digest := r.PostForm.Get("group"), r.PostForm.Get("members")
	shown, err := strconv.Atoi(r.PostForm.Get("count"))
	line.add(slog.String("group", id), slog.Int("shown", shown))
	if id == "" || digest == "" || err != nil {
		http.Error(w, "the form does not say which group and which of its messages the page showed: reload the dead letters page and try again", http.StatusBadRequest)
		return
	}
	groups, _, err := groupDead(r.Context(), c.admin)
	if err != nil {
		c.fail(w, err)
		return
	}
	var ids []uuid.UUID
	for _, g := range groups {
		if g.ID == id {
			ids = g.IDs
		}
	}
	if membersDigest(ids) != digest {
		line.add(slog.Int("messages", len(ids)))
		http.Error(w, fmt.Sprintf("refused: group %s changed since the page was read (%d message(s) shown, %d now): reload the dead letters page and look at it again",
			id, shown, len(ids)), http.StatusConflict)
		return
	}
	line.ids(ids)
	c.act(w, r, line, ids, shown, "/dead")
}
