//! The owner's journal: every write it received, by (caller node, request id), with the first
//! answer it gave, kept so a repeated request is answered from here, never run again.

use ferry_peer::wire::{RequestId, WriteAnswer};
use ferry_ticket::NodeId;
use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;

/// What the journal knows about one request id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalEntry {
    /// Carried out or refused: the first answer, to replay verbatim.
    Answered(WriteAnswer),
}

pub fn lookup(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
) -> Result<Option<JournalEntry>, StoreError> {
    let row: Option<(String, Option<String>)> = conn
        .prepare_cached("SELECT state, answer FROM journal WHERE caller = ?1 AND request_id = ?2")?
        .query_row(params![caller.to_string(), &request_id.0[..]], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })
        .optional()?;
    match row {
        None => Ok(None),
        Some((state, Some(answer))) if state == "answered" => serde_json::from_str(&answer)
            .map(|answer| Some(JournalEntry::Answered(answer)))
            .map_err(|err| StoreError::Corrupt(format!("journal answer for {request_id}: {err}"))),
        Some((state, _)) => Err(StoreError::Corrupt(format!(
            "journal entry for {request_id} in unknown state {state:?}"
        ))),
    }
}

/// Records the first answer to a request, in the caller's transaction.
pub fn record_answer(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
    vault: &str,
    answer: &WriteAnswer,
    now_ms: u64,
) -> Result<(), StoreError> {
    let answer = serde_json::to_string(answer)
        .map_err(|err| StoreError::Corrupt(format!("answer not encodable: {err}")))?;
    conn.prepare_cached(
        "INSERT INTO journal (caller, request_id, vault, state, answer, created_ms)
         VALUES (?1, ?2, ?3, 'answered', ?4, ?5)",
    )?
    .execute(params![
        caller.to_string(),
        &request_id.0[..],
        vault,
        answer,
        now_ms as i64
    ])?;
    Ok(())
}
