//! The caller's memory of the writes it sent to owners (SPEC 5, "settling outlives the
//! caller"; SPEC 6 rule 10).
//!
//! A call in flight is recorded before its first byte leaves: in a slot of the call log's slot
//! file (`call_log::slots`), or, when every slot is taken, as an `in_flight` row here. Then:
//! - `outcome_unknown` makes it an `unknown` row, and the background settler asks the owner
//!   (never re-sends) until it can be `settled`, with the answer kept;
//! - an answer from the owner, or nothing sent after all, leaves no row (the owner's journal
//!   has the answer; a settle query with no row here asks the owner);
//! - a call a crash cut short (a slot found at start, or an `in_flight` row) becomes `unknown`
//!   and is settled like any other.

use ferry_peer::wire::{CallState, RequestId};
use ferry_ticket::NodeId;
use rusqlite::{params, Connection, OptionalExtension};

use super::{stored_name, StoreError};
use crate::names::{AppName, Label, VaultName};

/// Where a remembered call stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowState {
    /// On its way (or cut short by a crash, until the next start).
    InFlight,
    /// Answered `outcome_unknown` (or found in flight after a crash): to be settled.
    Unknown,
    /// The owner's definite answer.
    Settled(CallState),
}

/// One remembered call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRow {
    pub request_id: RequestId,
    pub owner: NodeId,
    pub owner_label: Label,
    pub vault: VaultName,
    pub app: AppName,
    pub state: RowState,
    pub since_ms: u64,
}

/// A `calls` row as stored: id, owner, owner label, vault, app, state, answer, since.
type RawCall = (
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    i64,
);

fn parse(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawCall> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
        row.get(7)?,
    ))
}

fn to_call(raw: RawCall) -> Result<CallRow, StoreError> {
    let (id, owner, owner_label, vault, app, state, answer, since_ms) = raw;
    let corrupt = |what: &str| StoreError::Corrupt {
        detail: format!("remembered call {id}: {what}"),
    };
    let state = match (state.as_str(), answer) {
        ("in_flight", _) => RowState::InFlight,
        ("unknown", _) => RowState::Unknown,
        ("settled", Some(text)) => {
            RowState::Settled(serde_json::from_str(&text).map_err(|err| corrupt(&err.to_string()))?)
        }
        (other, _) => return Err(corrupt(&format!("state {other:?}"))),
    };
    Ok(CallRow {
        request_id: RequestId::parse(&id).map_err(|_| corrupt("bad request id"))?,
        owner: owner.parse().map_err(|_| corrupt("bad owner id"))?,
        owner_label: stored_name(owner_label, format_args!("remembered call {id}"))?,
        vault: stored_name(vault, format_args!("remembered call {id}"))?,
        app: stored_name(app, format_args!("remembered call {id}"))?,
        state,
        since_ms: since_ms as u64,
    })
}

const COLUMNS: &str = "request_id, owner, owner_label, vault, app, state, answer, since_ms";

/// Records a call about to be sent (`in_flight`), before its first byte leaves. Returns
/// whether the row is new (a repeat of an id this gateway sent before updates that row).
pub fn begin(conn: &Connection, call: &CallRow) -> Result<bool, StoreError> {
    let existed: bool = conn
        .prepare_cached("SELECT EXISTS (SELECT 1 FROM calls WHERE request_id = ?1)")?
        .query_row([call.request_id.to_string()], |row| row.get(0))?;
    insert(
        conn,
        "INSERT INTO calls (request_id, owner, owner_label, vault, app, state, since_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, 'in_flight', ?6)
         ON CONFLICT (request_id) DO UPDATE SET
             owner = excluded.owner, owner_label = excluded.owner_label, vault = excluded.vault,
             app = excluded.app, state = 'in_flight', answer = NULL, settled_ms = NULL",
        call,
    )?;
    Ok(!existed)
}

/// Records a call whose outcome is unknown (answered `outcome_unknown`), inserting it if this
/// gateway had no row for it (a local write that timed out in the owner's queue).
pub fn mark_unknown(conn: &Connection, call: &CallRow) -> Result<(), StoreError> {
    insert(
        conn,
        "INSERT INTO calls (request_id, owner, owner_label, vault, app, state, since_ms,
                            reported_unknown)
         VALUES (?1, ?2, ?3, ?4, ?5, 'unknown', ?6, 1)
         ON CONFLICT (request_id) DO UPDATE SET state = 'unknown', answer = NULL, settled_ms = NULL,
             reported_unknown = 1",
        call,
    )
}

/// Runs an insert of `call` whose parameters are its id, owner, label, vault, app and since.
fn insert(conn: &Connection, sql: &str, call: &CallRow) -> Result<(), StoreError> {
    conn.prepare_cached(sql)?.execute(params![
        call.request_id.to_string(),
        call.owner.to_string(),
        call.owner_label.as_str(),
        call.vault.as_str(),
        call.app.as_str(),
        call.since_ms as i64
    ])?;
    Ok(())
}

/// Keeps the owner's definite answer for a remembered call.
pub fn settle(
    conn: &Connection,
    request_id: RequestId,
    state: &CallState,
    now_ms: u64,
) -> Result<(), StoreError> {
    let answer = serde_json::to_string(state).map_err(|source| StoreError::Encode {
        what: "settled state",
        source,
    })?;
    conn.prepare_cached(
        "UPDATE calls SET state = 'settled', answer = ?2, settled_ms = ?3 WHERE request_id = ?1",
    )?
    .execute(params![request_id.to_string(), answer, now_ms as i64])?;
    Ok(())
}

/// A call recorded as an `in_flight` row ended with nothing to keep (answered by the owner,
/// whose journal has the answer, or never sent): the row goes, unless an earlier attempt with
/// that id was reported unknown, which then stays to be settled.
pub fn over(conn: &Connection, request_id: RequestId) -> Result<(), StoreError> {
    let removed = conn
        .prepare_cached(
            "DELETE FROM calls WHERE request_id = ?1 AND state = 'in_flight' AND reported_unknown = 0",
        )?
        .execute([request_id.to_string()])?;
    if removed == 0 {
        conn.prepare_cached(
            "UPDATE calls SET state = 'unknown' WHERE request_id = ?1 AND state = 'in_flight'",
        )?
        .execute([request_id.to_string()])?;
    }
    Ok(())
}

pub fn get(conn: &Connection, request_id: RequestId) -> Result<Option<CallRow>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM calls WHERE request_id = ?1"
    ))?
    .query_row([request_id.to_string()], parse)
    .optional()?
    .map(to_call)
    .transpose()
}

/// Every call still to be settled, oldest first.
pub fn unknown(conn: &Connection) -> Result<Vec<CallRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM calls WHERE state = 'unknown' ORDER BY since_ms"
    ))?;
    let rows = stmt.query_map([], parse)?;
    rows.map(|raw| to_call(raw?)).collect()
}

/// The calls `GET /v1/calls` lists, newest first: those answered `outcome_unknown` (settled
/// since or not) and those still in flight. Writes answered at once are remembered too, but
/// only looked up by id.
pub fn listed(conn: &Connection, only_unknown: bool) -> Result<Vec<CallRow>, StoreError> {
    let filter = if only_unknown {
        "state = 'unknown'"
    } else {
        "state = 'in_flight' OR reported_unknown = 1"
    };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM calls WHERE {filter} ORDER BY since_ms DESC"
    ))?;
    let rows = stmt.query_map([], parse)?;
    rows.map(|raw| to_call(raw?)).collect()
}

/// At start: every call a crash left in flight may have reached its owner; it is now unknown,
/// to be settled.
pub fn recover_in_flight(conn: &Connection) -> Result<usize, StoreError> {
    Ok(conn.execute(
        "UPDATE calls SET state = 'unknown', reported_unknown = 1 WHERE state = 'in_flight'",
        [],
    )?)
}

/// Forgets settled calls older than `older_than_ms`, at most `limit` of them.
pub fn collect(conn: &Connection, older_than_ms: u64, limit: u32) -> Result<usize, StoreError> {
    Ok(conn.execute(
        "DELETE FROM calls WHERE rowid IN (
             SELECT rowid FROM calls WHERE state = 'settled' AND since_ms < ?1 LIMIT ?2)",
        params![older_than_ms as i64, limit],
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::open_temp;
    use ferry_peer::wire::WriteAnswer;
    use ferry_ticket::NodeKey;

    fn row(id: RequestId) -> CallRow {
        CallRow {
            request_id: id,
            owner: NodeKey::from_secret_bytes([3; 32]).node_id(),
            owner_label: Label::from_static("a"),
            vault: VaultName::from_static("v"),
            app: AppName::from_static("app"),
            state: RowState::InFlight,
            since_ms: 1,
        }
    }

    #[test]
    fn a_call_cut_short_by_a_crash_becomes_unknown() {
        let (_dir, conn) = open_temp();
        let (cut, done) = (RequestId::generate(), RequestId::generate());
        assert!(begin(&conn, &row(cut)).unwrap());
        assert!(begin(&conn, &row(done)).unwrap());
        let answer = CallState::Answered(WriteAnswer::Done { revision: 3 });
        settle(&conn, done, &answer, 2).unwrap();
        assert_eq!(recover_in_flight(&conn).unwrap(), 1);
        assert_eq!(get(&conn, cut).unwrap().unwrap().state, RowState::Unknown);
        assert_eq!(
            get(&conn, done).unwrap().unwrap().state,
            RowState::Settled(answer)
        );
        assert_eq!(unknown(&conn).unwrap().len(), 1);
        // A repeat of a remembered id is not new.
        assert!(!begin(&conn, &row(done)).unwrap());
    }

    #[test]
    fn an_answer_at_once_forgets_the_row_unless_an_earlier_attempt_was_unknown() {
        let (_dir, conn) = open_temp();
        let (quick, retried) = (RequestId::generate(), RequestId::generate());
        begin(&conn, &row(quick)).unwrap();
        over(&conn, quick).unwrap();
        assert_eq!(
            get(&conn, quick).unwrap(),
            None,
            "the owner's journal has it"
        );
        mark_unknown(&conn, &row(retried)).unwrap();
        begin(&conn, &row(retried)).unwrap();
        over(&conn, retried).unwrap();
        assert_eq!(
            get(&conn, retried).unwrap().unwrap().state,
            RowState::Unknown,
            "reported unknown once: still to be settled"
        );
    }
}
