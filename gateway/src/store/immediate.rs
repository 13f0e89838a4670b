//! The owner's write transactions: `BEGIN IMMEDIATE` and `COMMIT` from the connection's
//! statement cache.
//!
//! `rusqlite::Transaction` runs its `BEGIN` and `COMMIT` as fresh SQL text, which SQLite
//! parses and plans every time, two parses a batch. Here each is a prepared statement reused
//! from the cache. (Not so the `PRAGMA synchronous` switches of a replica's pages: SQLite
//! applies a pragma while preparing it and marks it to run once, so a cached one is parsed
//! again at each use anyway; they stay `pragma_update`.) The rest is `Transaction`'s contract: the guard borrows the connection
//! mutably (nothing else can begin one meanwhile), derefs to it, and a guard dropped without a
//! successful commit rolls back.

use std::ops::Deref;

use rusqlite::Connection;

/// An open `IMMEDIATE` transaction on a connection (see the module's documentation).
#[derive(Debug)]
pub struct Immediate<'c> {
    conn: &'c mut Connection,
    open: bool,
}

impl<'c> Immediate<'c> {
    /// Begins one: takes the write lock now, waiting out the busy timeout if another
    /// connection holds it.
    pub fn begin(conn: &'c mut Connection) -> rusqlite::Result<Self> {
        conn.prepare_cached("BEGIN IMMEDIATE")?.execute([])?;
        Ok(Self { conn, open: true })
    }

    /// Commits it. On an error the transaction is rolled back as the guard drops, like
    /// `rusqlite::Transaction::commit`.
    pub fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Deref for Immediate<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Immediate<'_> {
    fn drop(&mut self) {
        // A failed statement can have ended the transaction already (SQLite rolls back on
        // some errors by itself); only one still open is rolled back here.
        if self.open && !self.conn.is_autocommit() {
            if let Err(err) = self.conn.execute_batch("ROLLBACK") {
                tracing::error!(%err, "a write transaction could not be rolled back");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::open_temp;

    fn count(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM meta WHERE key = 'k'", [], |row| {
            row.get(0)
        })
        .unwrap()
    }

    #[test]
    fn a_committed_transaction_stays_and_a_dropped_one_is_rolled_back() {
        let (_dir, mut conn) = open_temp();
        for _ in 0..2 {
            let tx = Immediate::begin(&mut conn).unwrap();
            assert!(!tx.is_autocommit(), "a transaction is open");
            tx.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')", [])
                .unwrap();
            drop(tx);
            assert!(conn.is_autocommit());
            assert_eq!(count(&conn), 0, "dropped without a commit: rolled back");
        }
        let tx = Immediate::begin(&mut conn).unwrap();
        tx.execute("INSERT INTO meta (key, value) VALUES ('k', 'v')", [])
            .unwrap();
        tx.commit().unwrap();
        assert!(conn.is_autocommit());
        assert_eq!(count(&conn), 1);
        // The cached statements run again: a second transaction after a commit.
        let tx = Immediate::begin(&mut conn).unwrap();
        tx.execute("DELETE FROM meta WHERE key = 'k'", []).unwrap();
        tx.commit().unwrap();
        assert_eq!(count(&conn), 0);
    }

    #[test]
    fn a_commit_that_fails_leaves_no_transaction_open() {
        let (_dir, mut conn) = open_temp();
        // A deferred foreign key broken at commit makes `COMMIT` itself fail.
        conn.execute_batch(
            "CREATE TABLE parent (id INTEGER PRIMARY KEY);
             CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED);",
        )
        .unwrap();
        let tx = Immediate::begin(&mut conn).unwrap();
        tx.execute("INSERT INTO child (p) VALUES (7)", []).unwrap();
        assert!(tx.commit().is_err(), "the foreign key is checked at commit");
        assert!(conn.is_autocommit(), "rolled back as the guard dropped");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM child", [], |row| row.get(0))
            .unwrap();
        assert_eq!(rows, 0);
    }
}
