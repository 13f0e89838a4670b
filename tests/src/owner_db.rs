//! What an owner's database holds, read for the history checker (`crate::history`) by the
//! tests that run real gateways, and how an app's answers map to the checker's fates.

// Test support: a database or answer this cannot read fails the test that asked, naming it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::path::Path;

use ferry_peer::wire::{RequestId, WriteAnswer};
use serde_json::Value;

use crate::history::{JournalState, Records, WriteFate};

/// Opens the database at `path` read-only (a running gateway keeps writing it; WAL lets both).
pub fn open_read_only(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap_or_else(|err| panic!("open {} read-only: {err}", path.display()))
}

/// A vault's records in the database `conn` is open on.
pub fn records(conn: &rusqlite::Connection, vault: &str) -> Records {
    let mut stmt = conn
        .prepare("SELECT key, revision, value FROM records WHERE vault = ?1")
        .unwrap();
    stmt.query_map([vault], |row| {
        Ok((
            row.get::<_, String>(0)?,
            (
                row.get::<_, i64>(1)? as u64,
                row.get::<_, Option<Vec<u8>>>(2)?,
            ),
        ))
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

/// The owner's journal, every row read strictly: a row this build cannot read (one the
/// previous release wrote, say) fails the test, naming it.
pub fn journal(
    conn: &rusqlite::Connection,
    owner: &str,
) -> HashMap<(String, String), JournalState> {
    let mut stmt = conn
        .prepare("SELECT caller, request_id, state, answer FROM journal")
        .unwrap();
    let rows: Vec<(String, Vec<u8>, String, Option<String>)> = stmt
        .query_map([], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut journal = HashMap::new();
    for (caller, id, state, answer) in rows {
        let id: [u8; 16] = id
            .try_into()
            .unwrap_or_else(|id| panic!("{owner}: a journal request id is not 16 bytes: {id:?}"));
        let id = RequestId::from_bytes(id).to_string();
        let entry = match state.as_str() {
            "running" => JournalState::Running,
            "not_carried_out" => JournalState::NotCarriedOut,
            "answered" => {
                let text = answer.clone().unwrap_or_default();
                match serde_json::from_str::<WriteAnswer>(&text) {
                    Ok(WriteAnswer::Done { revision }) => JournalState::Done(revision),
                    Ok(WriteAnswer::NotCarriedOut { .. }) => JournalState::NotCarriedOut,
                    Ok(WriteAnswer::Refused(_)) => JournalState::Refused,
                    Err(err) => panic!(
                        "{owner}: this build cannot read the journal's answer to {id} from {caller}: {text:?}: {err}"
                    ),
                }
            }
            other => panic!("{owner}: journal row {id} is in state {other:?}"),
        };
        assert!(
            journal
                .insert((caller.clone(), id.clone()), entry)
                .is_none(),
            "{owner}: two journal rows for {id} from {caller}"
        );
    }
    journal
}

/// What an app was told, as the history checker's fate.
pub fn told_fate(code: &str, revision: Option<u64>) -> WriteFate {
    match code {
        "done" => WriteFate::Done(revision.expect("a done write has a revision")),
        "outcome_unknown" | "app_unknown" => WriteFate::Unknown,
        "not_carried_out" => WriteFate::NotCarriedOut(code.into()),
        // The local gateway says it sent nothing, or the app never reached it.
        "unavailable" | "local_gateway_down" | "unknown_vault" | "bad_request" => {
            WriteFate::NothingSent(code.into())
        }
        // The owner's answer (`conflict`, `busy`, `rate_limited`, ...).
        other => WriteFate::Refused(other.into()),
    }
}

/// What settling said, as a fate; `None` when it did not settle.
pub fn settled_fate(body: &Value) -> Option<WriteFate> {
    match body["state"].as_str() {
        Some("done") if body["status"] == 200 => Some(WriteFate::Done(body["revision"].as_u64()?)),
        Some("done") => Some(WriteFate::Refused(
            body["error"].as_str().unwrap_or("?").into(),
        )),
        Some("not_carried_out") => Some(WriteFate::NotCarriedOut(
            body["reason"].as_str().unwrap_or("?").into(),
        )),
        _ => None,
    }
}
