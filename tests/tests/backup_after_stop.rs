//! A stopped gateway's `ferry.db` is whole by itself: `ferry stop` moves the write-ahead log's
//! changes into the database file, so copying that one file is a complete backup (what the
//! upgrade notes tell people to keep), and an older build that refuses the database finds
//! nothing to move into it (`compat.rs` checks its bytes stay the same).

// Tests may unwrap: a panic here is a failed test, not a crashed gateway.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use ferry_harness::two_with_notes;

#[test]
fn after_ferry_stop_the_database_file_alone_holds_every_committed_change() {
    let (mut a, b) = two_with_notes();
    for i in 0..20 {
        let (status, body) = b.put("notes", &format!("k{i}"), b"value", &[]);
        assert_eq!(status, 200, "{body}");
    }
    assert_eq!(a.stop(), Some(0), "a clean stop");
    let wal = a.home.join("ferry.db-wal");
    let left = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    assert_eq!(left, 0, "{} still holds {left} bytes", wal.display());

    // The database file copied alone, without its log, has everything.
    let copy = tempfile::tempdir().unwrap();
    let backup = copy.path().join("ferry.db");
    std::fs::copy(a.home.join("ferry.db"), &backup).unwrap();
    let conn = rusqlite::Connection::open(&backup).unwrap();
    let records: i64 = conn
        .query_row("SELECT COUNT(*) FROM records", [], |row| row.get(0))
        .unwrap();
    assert_eq!(records, 20, "every record is in the copied file");
    let peers: i64 = conn
        .query_row("SELECT COUNT(*) FROM peers", [], |row| row.get(0))
        .unwrap();
    assert_eq!(peers, 1, "the trust store is in the copied file");
}
