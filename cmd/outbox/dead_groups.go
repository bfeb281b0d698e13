package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox"
	"github.com/go-outbox/outbox/outboxdriver"
)

// deadGroupScanLimit bounds how many dead messages one grouping reads.
const deadGroupScanLimit = 100000

// deadGroup is the dead messages that failed the same way: one topic, one
// class of failure, one error once ids, numbers and addresses are masked.
type deadGroup struct {
	ID      string // a short hash of the fingerprint, for --group
	Topic   string
	Class   outboxdriver.AttemptClass
	Pattern string // the error with its variable parts masked
	Example string // the whole last error of the group's latest failure
	Count   int
	First   time.Time // when its first member died (written, if no history)
	Last    time.Time
	IDs     []uuid.UUID
}

var (
	attemptPrefix = regexp.MustCompile(`^attempt \d+ of \d+: `)
	uuidRE        = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
	addrRE        = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}(:\d+)?\b|\[[0-9a-fA-F:]+\](:\d+)?`)
	hexRE         = regexp.MustCompile(`\b(0x)?[0-9a-fA-F]{8,}\b`)
	numberRE      = regexp.MustCompile(`\d+(\.\d+)?`)
)

// failureClass sorts a dead message's last error as the relay wrote it.
func failureClass(lastError string) (outboxdriver.AttemptClass, string) {
	switch {
	case strings.HasPrefix(lastError, "expired at "):
		return outboxdriver.ClassExpired, lastError
	case attemptPrefix.MatchString(lastError):
		return outboxdriver.ClassExhausted, attemptPrefix.ReplaceAllString(lastError, "")
	}
	return outboxdriver.ClassPermanent, lastError
}

// maskError replaces the parts of an error that differ between messages
// failing the same way: ids, addresses, hex strings of 8 characters or
// more that mix letters and digits, and numbers.
func maskError(s string) string {
	s = uuidRE.ReplaceAllString(s, "<id>")
	s = addrRE.ReplaceAllString(s, "<addr>")
	s = hexRE.ReplaceAllStringFunc(s, func(h string) string {
		if strings.ContainsAny(h, "0123456789") {
			return "<hex>"
		}
		return h // a word such as "deadbeef"
	})
	return numberRE.ReplaceAllString(s, "<n>")
}

// groupDead groups the dead messages of admin (at most deadGroupScanLimit
// of them; truncated says whether there were more), the largest group
// first. Members' times come from the attempts history where the store
// keeps one, else from when they were written.
func groupDead(ctx context.Context, admin outboxdriver.Admin) (groups []*deadGroup, truncated bool, err error) {
	var dead []outbox.Message
	for after := uuid.Nil; ; {
		page, err := admin.ListDead(ctx, after, listPage)
		if err != nil {
			return nil, false, err
		}
		dead = append(dead, page...)
		if len(page) < listPage {
			break
		}
		if len(dead) >= deadGroupScanLimit {
			truncated = true
			break
		}
		after = page[len(page)-1].ID
	}
	died := map[uuid.UUID]time.Time{}
	if rec, ok := admin.(outboxdriver.AttemptRecorder); ok {
		for chunk := range slices.Chunk(dead, listPage) {
			ids := make([]uuid.UUID, len(chunk))
			for i, m := range chunk {
				ids[i] = m.ID
			}
			last, err := rec.LastFailures(ctx, ids)
			if err != nil {
				break // no history: the messages' write times stand in
			}
			for id, at := range last {
				died[id] = at
			}
		}
	}
	byID := map[string]*deadGroup{}
	for _, m := range dead {
		class, text := failureClass(m.LastError)
		pattern := maskError(text)
		sum := sha256.Sum256([]byte(m.Topic + "\x00" + string(class) + "\x00" + pattern))
		id := hex.EncodeToString(sum[:4])
		g, ok := byID[id]
		if !ok {
			g = &deadGroup{ID: id, Topic: m.Topic, Class: class, Pattern: pattern}
			byID[id] = g
			groups = append(groups, g)
		}
		at := cmp.Or(died[m.ID], m.CreatedAt)
		if g.Count == 0 || at.Before(g.First) {
			g.First = at
		}
		if g.Count == 0 || !at.Before(g.Last) {
			g.Last, g.Example = at, m.LastError
		}
		g.Count++
		g.IDs = append(g.IDs, m.ID)
	}
	slices.SortStableFunc(groups, func(a, b *deadGroup) int {
		return cmp.Or(b.Count-a.Count, b.Last.Compare(a.Last))
	})
	return groups, truncated, nil
}

// deadGroupIDs returns the ids of the dead messages in group id.
func deadGroupIDs(ctx context.Context, admin outboxdriver.Admin, id string) ([]uuid.UUID, error) {
	groups, _, err := groupDead(ctx, admin)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		if g.ID == id {
			return g.IDs, nil
		}
	}
	return nil, fmt.Errorf("no group %q among the dead messages; list the groups with `outbox dead groups`", id)
}

func newDeadGroupsCommand(g *globalFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "groups",
		Short: "Group the dead messages by how they failed, the largest group first",
		Long: `groups sorts the dead messages into groups that failed the same way: the same topic, the same
class of failure (permanent, exhausted: out of attempts, expired) and the same error once the parts
that differ between messages (ids, addresses, numbers, hex strings) are masked. Each group shows its
count, when its first and last members died, and one member's whole error. Retry or discard a whole
group with ` + "`outbox dead retry --group ID`" + ` or ` + "`outbox dead discard --group ID`" + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := g.openReady(cmd.Context(), storeMode{})
			if err != nil {
				return err
			}
			defer b.close()
			groups, truncated, err := groupDead(cmd.Context(), b.admin)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				list := make([]map[string]any, 0, len(groups))
				for _, g := range groups {
					list = append(list, map[string]any{"group": g.ID, "topic": g.Topic, "class": g.Class, "pattern": g.Pattern,
						"example": g.Example, "count": g.Count, "first_seen": g.First, "last_seen": g.Last})
				}
				return json.NewEncoder(out).Encode(map[string]any{"groups": list, "truncated": truncated})
			}
			if len(groups) == 0 {
				fmt.Fprintln(out, "no dead messages")
				return nil
			}
			w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "GROUP\tCOUNT\tFIRST SEEN\tLAST SEEN\tTOPIC\tCLASS\tERROR")
			for _, g := range groups {
				fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", g.ID, g.Count, g.First.UTC().Format(time.DateTime), g.Last.UTC().Format(time.DateTime), g.Topic, g.Class, g.Example)
			}
			if err := w.Flush(); err != nil {
				return err
			}
			if truncated {
				fmt.Fprintf(out, "(the first %d dead messages only)\n", deadGroupScanLimit)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object")
	return cmd
}

// attemptsJSON is a message's history of failed attempts for `dead show`.
func attemptsJSON(history []outboxdriver.Attempt) []map[string]any {
	list := make([]map[string]any, 0, len(history))
	for _, a := range history {
		list = append(list, map[string]any{"attempt": a.Number, "at": a.At, "outcome": a.Outcome, "class": a.Class, "error": a.Error})
	}
	return list
}
