// Package pgfence is a PostgreSQL fenced resource for the chaos harness:
// the storage side of fencing tokens, with exactly the SQL that
// docs/fencing.md recommends, run under chaos.
//
// Store keeps a row (id, body, fence) and writes it with
//
//	UPDATE reports SET body = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// through pgx: "rows affected = 0" is a refused, stale write. (docs/fencing.md
// gives fence < $2 for one write per token and fence <= $2 when one holder
// writes several times, as the harness's holders do; <= accepts an equal
// token like fencing.Register and fencing.SetIfNewer.) It implements
// chaos.FencedStore, so chaos.Run's holders write to PostgreSQL: set it as
// chaos.ClusterOptions.Fenced.
//
// StartServer runs a PostgreSQL server of its own for tests and the
// pgchaos command (cmd/pgchaos): a fresh data directory (initdb) and a free
// loopback port, as the package's postgres user when this process is root
// (PostgreSQL refuses to run as root), verified by pid and stopped by pid.
//
// The package is a module of its own, so that pgx never enters the lock
// library's import graph; the chaos package knows only its FencedStore
// interface.
package pgfence
