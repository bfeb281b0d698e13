package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/go-outbox/outbox/outboxmysql"
	"github.com/go-outbox/outbox/outboxpg"
	"github.com/go-outbox/outbox/outboxsqlite"
)

func newMigrateCommand(g *globalFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create, upgrade or remove the outbox table",
	}
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every migration not yet applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := g.open(cmd.Context(), storeMode{})
			if err != nil {
				return err
			}
			defer b.close()
			applied, err := b.migrator.Up(cmd.Context())
			if err != nil {
				return err
			}
			reportVersions(cmd, "applied", applied, b.store.Name())
			return nil
		},
	}
	var steps int
	down := &cobra.Command{
		Use:   "down",
		Short: "Revert the latest migrations (--steps, default 1); reverting all drops the table and its messages",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if steps < 1 {
				return usagef("--steps %d: use 1 or more", steps)
			}
			b, err := g.open(cmd.Context(), storeMode{})
			if err != nil {
				return err
			}
			defer b.close()
			reverted, err := b.migrator.Down(cmd.Context(), steps)
			if err != nil {
				return err
			}
			reportVersions(cmd, "reverted", reverted, b.store.Name())
			return nil
		},
	}
	down.Flags().IntVar(&steps, "steps", 1, "how many migrations to revert")
	list := &cobra.Command{
		Use:   "list",
		Short: "Show each migration and whether it is applied",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := g.open(cmd.Context(), storeMode{})
			if err != nil {
				return err
			}
			defer b.close()
			all, err := b.migrator.List(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 2, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
			for _, m := range all {
				applied := "no"
				if m.Applied {
					applied = m.AppliedAt.UTC().Format(time.RFC3339)
				}
				fmt.Fprintf(tw, "%03d\t%s\t%s\n", m.Version, m.Name, applied)
			}
			return tw.Flush()
		},
	}
	sqlCmd := &cobra.Command{
		Use:   "sql [up|down]",
		Short: "Print the migrations' SQL, for teams that apply it with another tool",
		Long: `sql prints the SQL of every migration in the given direction (default up), with
the schema and table names filled in. It connects to no database: the scheme of
--database-url (or DATABASE_URL) only picks the dialect, PostgreSQL when none is given.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := outboxpg.DirectionUp
			if len(args) == 1 {
				switch args[0] {
				case "up":
				case "down":
					dir = outboxpg.DirectionDown
				default:
					return usagef("migrate sql %q: use up or down", args[0])
				}
			}
			sql, err := g.migrationSQL(dir)
			if err != nil {
				return err
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), sql)
			return err
		},
	}
	cmd.AddCommand(up, down, list, sqlCmd)
	return cmd
}

func reportVersions(cmd *cobra.Command, verb string, versions []int, table string) {
	if len(versions) == 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "%s: nothing to do\n", table)
		return
	}
	s := ""
	for i, v := range versions {
		if i > 0 {
			s += ", "
		}
		s += strconv.Itoa(v)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %s migration(s) %s\n", table, verb, s)
}

// pgMigrator adapts outboxpg.Migrator to the CLI's migrator.
type pgMigrator struct{ m *outboxpg.Migrator }

func (p pgMigrator) Up(ctx context.Context) ([]int, error) { return p.m.Up(ctx) }
func (p pgMigrator) Down(ctx context.Context, steps int) ([]int, error) {
	return p.m.Down(ctx, steps)
}
func (p pgMigrator) List(ctx context.Context) ([]migrationStatus, error) {
	all, err := p.m.List(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]migrationStatus, len(all))
	for i, s := range all {
		out[i] = migrationStatus{Version: s.Version, Name: s.Name, Applied: s.Applied, AppliedAt: s.AppliedAt}
	}
	return out, nil
}

// migrationSQL returns the migrations' SQL in the dialect the database URL
// names, PostgreSQL when there is none.
func (g *globalFlags) migrationSQL(dir outboxpg.Direction) (string, error) {
	raw := g.databaseURL
	if raw == "" {
		raw = os.Getenv("DATABASE_URL")
	}
	if urlScheme(raw) == "sqlite" {
		m, err := outboxsqlite.NewMigrator(nil, outboxsqlite.Options{Table: g.table})
		if err != nil {
			return "", err
		}
		return m.SQL(dir), nil
	}
	if urlScheme(raw) == "mysql" {
		m, err := outboxmysql.NewMigrator(nil, outboxmysql.Options{Table: g.table})
		if err != nil {
			return "", err
		}
		return m.SQL(dir), nil
	}
	m, err := outboxpg.NewMigrator(nil, outboxpg.Options{Schema: g.schema, Table: g.table})
	if err != nil {
		return "", err
	}
	return m.SQL(dir), nil
}
