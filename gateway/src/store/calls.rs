//! The caller's memory of writes it answered `outcome_unknown` (SPEC 6 rule 10): kept until the
//! owner settles them, and after, so `GET /v1/calls/{id}` can answer from here.

use ferry_peer::wire::{CallState, RequestId};
use ferry_ticket::NodeId;
use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;

/// One remembered call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallRow {
    pub request_id: RequestId,
    pub owner: NodeId,
    pub owner_label: String,
    pub vault: String,
    pub app: String,
    /// `None` while unknown; the owner's settled answer after.
    pub settled: Option<CallState>,
    pub since_ms: u64,
}

/// A `calls` row as stored: id, owner, owner label, vault, app, settled answer, since.
type RawCall = (String, String, String, String, String, Option<String>, i64);

fn parse(row: &rusqlite::Row<'_>) -> rusqlite::Result<RawCall> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
    ))
}

fn to_call(raw: RawCall) -> Result<CallRow, StoreError> {
    let (id, owner, owner_label, vault, app, answer, since_ms) = raw;
    let corrupt = |what: &str| StoreError::Corrupt(format!("remembered call {id}: {what}"));
    Ok(CallRow {
        request_id: RequestId::parse(&id).map_err(|_| corrupt("bad request id"))?,
        owner: owner.parse().map_err(|_| corrupt("bad owner id"))?,
        owner_label,
        vault,
        app,
        settled: answer
            .map(|text| serde_json::from_str(&text).map_err(|err| corrupt(&err.to_string())))
            .transpose()?,
        since_ms: since_ms as u64,
    })
}

const COLUMNS: &str = "request_id, owner, owner_label, vault, app, answer, since_ms";

pub fn record_unknown(conn: &Connection, call: &CallRow) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO calls (request_id, owner, owner_label, vault, app, state, since_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, 'unknown', ?6) ON CONFLICT (request_id) DO NOTHING",
    )?
    .execute(params![
        call.request_id.to_string(),
        call.owner.to_string(),
        call.owner_label,
        call.vault,
        call.app,
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
    let answer = serde_json::to_string(state)
        .map_err(|err| StoreError::Corrupt(format!("settled state not encodable: {err}")))?;
    conn.prepare_cached(
        "UPDATE calls SET state = 'settled', answer = ?2, settled_ms = ?3 WHERE request_id = ?1",
    )?
    .execute(params![request_id.to_string(), answer, now_ms as i64])?;
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

/// Every call still unknown, oldest first.
pub fn unknown(conn: &Connection) -> Result<Vec<CallRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM calls WHERE state = 'unknown' ORDER BY since_ms"
    ))?;
    let rows = stmt.query_map([], parse)?;
    rows.map(|raw| to_call(raw?)).collect()
}

/// Every remembered call, newest first.
pub fn all(conn: &Connection) -> Result<Vec<CallRow>, StoreError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM calls ORDER BY since_ms DESC"
    ))?;
    let rows = stmt.query_map([], parse)?;
    rows.map(|raw| to_call(raw?)).collect()
}
