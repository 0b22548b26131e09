package pgfence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The table and row the store writes, as in docs/fencing.md.
const (
	createTable = `CREATE TABLE IF NOT EXISTS reports (
  id    bigint PRIMARY KEY,
  body  text   NOT NULL,
  fence bigint NOT NULL DEFAULT 0
)`
	resetRow = `INSERT INTO reports (id, body, fence) VALUES ($1, '', 0)
ON CONFLICT (id) DO UPDATE SET body = '', fence = 0`
	// fencedUpdate is docs/fencing.md's conditional update, with <= so that
	// one holder may write several times.
	fencedUpdate = `UPDATE reports SET body = $1, fence = $2 WHERE id = $3 AND fence <= $2`
	reportID     = 42
)

// ErrTokenRange is returned by Write for a token above 2^63 − 1, which a
// bigint column cannot hold (tokens are microsecond clocks: far below).
var ErrTokenRange = errors.New("pgfence: token does not fit a bigint")

// Store is a chaos.FencedStore on one row of a PostgreSQL table. Its
// methods are safe for concurrent use. Close it when done.
type Store struct {
	pool *pgxpool.Pool
	name string
}

// NewStore connects to the database at connString (a PostgreSQL URL or
// key=value string, as pgx takes it), creates the table reports if needed,
// and returns the store. It returns the error of connecting or creating the
// table.
func NewStore(ctx context.Context, connString string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgfence: %w", err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgfence: connect: %w", err)
	}
	var version string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgfence: connect: %w", err)
	}
	if _, err := pool.Exec(ctx, createTable); err != nil {
		pool.Close()
		return nil, fmt.Errorf("pgfence: create table: %w", err)
	}
	return &Store{pool: pool, name: "PostgreSQL " + version + ": UPDATE … WHERE fence <= token"}, nil
}

// Name says "PostgreSQL <version>: UPDATE … WHERE fence <= token".
func (s *Store) Name() string { return s.name }

// Reset sets the row to an empty body and fence 0, creating it if needed.
func (s *Store) Reset(ctx context.Context) error {
	if _, err := s.pool.Exec(ctx, resetRow, reportID); err != nil {
		return fmt.Errorf("pgfence: reset: %w", err)
	}
	return nil
}

// Write runs the fenced update with token: accepted when it updated the
// row, refused (stale) when it matched none because the row's fence is
// higher. It returns ErrTokenRange for a token above 2^63 − 1, or the
// database's error.
func (s *Store) Write(ctx context.Context, token uint64) (bool, error) {
	if token > math.MaxInt64 {
		return false, fmt.Errorf("%w: %d", ErrTokenRange, token)
	}
	tag, err := s.pool.Exec(ctx, fencedUpdate, "written with token "+strconv.FormatUint(token, 10), int64(token), reportID)
	if err != nil {
		return false, fmt.Errorf("pgfence: write: %w", err)
	}
	return tag.RowsAffected() == 1, nil
}

// Fence returns the row's fence: the highest token written (0 after Reset).
func (s *Store) Fence(ctx context.Context) (uint64, error) {
	var f int64
	if err := s.pool.QueryRow(ctx, "SELECT fence FROM reports WHERE id = $1", reportID).Scan(&f); err != nil {
		return 0, fmt.Errorf("pgfence: read: %w", err)
	}
	return uint64(f), nil
}

// Close closes the store's connections.
func (s *Store) Close() { s.pool.Close() }
