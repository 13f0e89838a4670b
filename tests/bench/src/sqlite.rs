//! The durable SQLite both the bare relay and the floor write to, and the floor itself.
//!
//! Same settings as Ferry's store: WAL and `synchronous=FULL`, so a commit returns only once it
//! is on disk. The floor is the cost of durability alone: one insert per commit, one at a
//! time, on the benchmark's thread, with no network and no runtime.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{params, Connection};

use crate::load::{value, Keys, Sample};

/// Opens (and creates) a records table with Ferry's durability settings.
pub fn open_durable(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "FULL")?;
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS records (key TEXT PRIMARY KEY, value BLOB NOT NULL);",
    )?;
    Ok(conn)
}

/// Inserts one 64-byte value per durable commit, at most `count` times within `bound`.
pub fn floor(path: &Path, count: usize, bound: Duration) -> rusqlite::Result<Sample> {
    let conn = open_durable(path)?;
    let mut insert = conn.prepare("INSERT INTO records (key, value) VALUES (?1, ?2)")?;
    let keys = Keys::new("floor-");
    let value = value();
    let started = Instant::now();
    let mut latencies = Vec::with_capacity(count);
    for _ in 0..count {
        if started.elapsed() >= bound {
            break;
        }
        let key = keys.next_key();
        let one = Instant::now();
        // Outside a transaction every statement is its own commit.
        insert.execute(params![key, &value[..]])?;
        latencies.push(one.elapsed());
    }
    Ok(Sample::from_latencies(latencies, started.elapsed()))
}
