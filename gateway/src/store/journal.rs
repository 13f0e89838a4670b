//! The owner's journal: every write it received, by (caller node, request id).
//!
//! States:
//! - `running`: written by releases before the owner's running marks (`owner::marks`), which
//!   now keep that trace outside the journal; [`recover_interrupted`] turns every such row an
//!   older release's crash left into `not_carried_out: interrupted` when the owner starts.
//! - `answered`: carried out or refused; the first answer, replayed verbatim for a repeat.
//! - `not_carried_out`: a tombstone with its reason; that id can never run afterwards.

use ferry_peer::outcome::NotCarriedOutReason;
use ferry_peer::wire::{CallState, RequestId, WriteAnswer};
use ferry_ticket::NodeId;
use rusqlite::{params, Connection, OptionalExtension};

use super::StoreError;

/// What the journal knows about one request id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalEntry {
    Running { since_ms: u64 },
    Answered(WriteAnswer),
    NotCarriedOut(NotCarriedOutReason),
}

impl JournalEntry {
    /// The entry as a settle query's answer.
    pub fn to_call_state(&self) -> CallState {
        match self {
            Self::Running { since_ms } => CallState::Running {
                since_ms: *since_ms,
                // Only an older release wrote `running` rows, and recovery fences them before
                // the owner serves; the executor answers its stranded ids (`owner::marks`) so
                // too: being worked on as far as anyone can say until a restart settles them.
                heartbeat_age_ms: 0,
            },
            Self::Answered(answer) => CallState::Answered(answer.clone()),
            Self::NotCarriedOut(reason) => CallState::NotCarriedOut { reason: *reason },
        }
    }

    /// The answer a repeated write gets.
    pub fn to_write_answer(&self) -> Option<WriteAnswer> {
        match self {
            Self::Running { .. } => None,
            Self::Answered(answer) => Some(answer.clone()),
            Self::NotCarriedOut(reason) => Some(WriteAnswer::NotCarriedOut { reason: *reason }),
        }
    }
}

fn reason_from(text: &str) -> Option<NotCarriedOutReason> {
    match text {
        "never_arrived" => Some(NotCarriedOutReason::NeverArrived),
        "expired" => Some(NotCarriedOutReason::Expired),
        "interrupted" => Some(NotCarriedOutReason::Interrupted),
        _ => None,
    }
}

pub fn lookup(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
) -> Result<Option<JournalEntry>, StoreError> {
    let row: Option<(String, Option<String>, Option<String>, i64)> = conn
        .prepare_cached(
            "SELECT state, answer, reason, updated_ms FROM journal WHERE caller = ?1 AND request_id = ?2",
        )?
        .query_row(params![caller.to_string(), &request_id.as_bytes()[..]], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
        })
        .optional()?;
    let corrupt = |what: &str| StoreError::Corrupt {
        detail: format!("journal entry for {request_id}: {what}"),
    };
    Ok(match row {
        None => None,
        Some((state, _, _, updated_ms)) if state == "running" => Some(JournalEntry::Running {
            since_ms: updated_ms as u64,
        }),
        Some((state, Some(answer), _, _)) if state == "answered" => Some(JournalEntry::Answered(
            serde_json::from_str(&answer).map_err(|err| corrupt(&err.to_string()))?,
        )),
        Some((state, _, Some(reason), _)) if state == "not_carried_out" => {
            Some(JournalEntry::NotCarriedOut(
                reason_from(&reason).ok_or_else(|| corrupt("unknown reason"))?,
            ))
        }
        Some((state, ..)) => return Err(corrupt(&format!("state {state:?}"))),
    })
}

/// Records the first answer of a request the journal does not hold yet, with its vault.
/// Returns false, and records nothing, if the journal holds the id (a copy, or an id settled
/// meanwhile: a dead request stays dead).
pub fn record_first_answer(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
    vault: &str,
    answer: &WriteAnswer,
    now_ms: u64,
) -> Result<bool, StoreError> {
    let answer = serde_json::to_string(answer).map_err(|source| StoreError::Encode {
        what: "answer",
        source,
    })?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO journal (caller, request_id, vault, state, answer, created_ms, updated_ms)
             VALUES (?1, ?2, ?3, 'answered', ?4, ?5, ?5)
             ON CONFLICT (caller, request_id) DO NOTHING",
        )?
        .execute(params![
            caller.to_string(),
            &request_id.as_bytes()[..],
            vault,
            answer,
            now_ms as i64
        ])?;
    Ok(inserted == 1)
}

/// A `running` row, as releases before the running marks (`owner::marks`) wrote them: what
/// a crash of such a release leaves for [`recover_interrupted`].
#[cfg(test)]
pub(crate) fn insert_running(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
    now_ms: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO journal (caller, request_id, vault, state, created_ms, updated_ms)
         VALUES (?1, ?2, 'v', 'running', ?3, ?3)",
    )?
    .execute(params![
        caller.to_string(),
        &request_id.as_bytes()[..],
        now_ms as i64
    ])?;
    Ok(())
}

/// Fences an id the owner has never seen: it can never run afterwards. `vault` is the one the
/// caller named (`""`: none), so the fence goes with its vault's rows if the vault moves.
pub fn tombstone(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
    vault: &str,
    reason: NotCarriedOutReason,
    now_ms: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO journal (caller, request_id, vault, state, reason, created_ms, updated_ms)
         VALUES (?1, ?2, ?3, 'not_carried_out', ?4, ?5, ?5)
         ON CONFLICT (caller, request_id) DO NOTHING",
    )?
    .execute(params![
        caller.to_string(),
        &request_id.as_bytes()[..],
        vault,
        reason.as_str(),
        now_ms as i64
    ])?;
    Ok(())
}

/// Fences an id whose verb did not commit (its batch failed, or a crash came first): not
/// carried out, `interrupted`. An id the journal holds keeps its row (a first answer stands),
/// except a `running` row an older release left, which is fenced too.
pub fn fence_interrupted(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
    vault: &str,
    now_ms: u64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO journal (caller, request_id, vault, state, reason, created_ms, updated_ms)
         VALUES (?1, ?2, ?3, 'not_carried_out', 'interrupted', ?4, ?4)
         ON CONFLICT (caller, request_id) DO UPDATE
             SET state = 'not_carried_out', reason = 'interrupted', updated_ms = ?4
             WHERE state = 'running'",
    )?
    .execute(params![
        caller.to_string(),
        &request_id.as_bytes()[..],
        vault,
        now_ms as i64
    ])?;
    Ok(())
}

/// After a crash of a release that wrote `running` rows (before the running marks): every id
/// that was running without a committed answer was interrupted.
pub fn recover_interrupted(conn: &Connection, now_ms: u64) -> Result<usize, StoreError> {
    Ok(conn.execute(
        "UPDATE journal SET state = 'not_carried_out', reason = 'interrupted', updated_ms = ?1
         WHERE state = 'running'",
        [now_ms as i64],
    )?)
}

/// Forgets the rows of request ids dated before `before_ms` (the time embedded in the id, the
/// clock the stale check uses), at most `limit` of them. The owner refuses such ids as stale
/// from then on (its watermark is raised in the same transaction), so an id whose row went
/// can never run. `running` rows are kept: only a crash leaves one, and recovery settles it.
///
/// UUIDv7 bytes start with the big-endian millisecond time, and SQLite compares blobs with
/// `memcmp`, so "dated before" is `request_id < <6-byte time>`. The journal is keyed by request
/// id first, so a chunk is the start of its key: found without reading younger rows.
pub fn collect(conn: &Connection, before_ms: u64, limit: u32) -> Result<usize, StoreError> {
    let cutoff = &before_ms.to_be_bytes()[2..];
    Ok(conn
        .prepare_cached(
            "DELETE FROM journal WHERE (request_id, caller) IN (
                 SELECT request_id, caller FROM journal
                 WHERE request_id < ?1 AND state != 'running' LIMIT ?2)",
        )?
        .execute(params![cutoff, limit])?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::open_temp;
    use ferry_ticket::NodeKey;

    /// A UUIDv7 dated `ms`.
    pub(crate) fn id_at(ms: u64) -> RequestId {
        let mut bytes = *RequestId::generate().as_bytes();
        bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
        RequestId::from_bytes(bytes)
    }

    #[test]
    fn collection_goes_by_the_time_in_the_id() {
        let (_dir, conn) = open_temp();
        let caller = NodeKey::from_secret_bytes([1; 32]).node_id();
        let (old, edge, young) = (id_at(1_000), id_at(2_000), id_at(3_000));
        // Created "now": collection must not go by when the row was written.
        for id in [old, edge, young] {
            let done = WriteAnswer::Done { revision: 1 };
            assert!(record_first_answer(&conn, caller, id, "v", &done, 10_000).unwrap());
        }
        assert_eq!(collect(&conn, 2_000, 100).unwrap(), 1);
        assert_eq!(lookup(&conn, caller, old).unwrap(), None);
        assert!(lookup(&conn, caller, edge).unwrap().is_some());
        assert!(lookup(&conn, caller, young).unwrap().is_some());
    }

    #[test]
    fn a_settled_id_stays_settled() {
        let (_dir, conn) = open_temp();
        let caller = NodeKey::from_secret_bytes([1; 32]).node_id();
        let id = RequestId::generate();
        tombstone(&conn, caller, id, "v", NotCarriedOutReason::NeverArrived, 1).unwrap();
        // The fence names the vault the caller named, so it moves with the vault's rows.
        let vault: String = conn
            .query_row(
                "SELECT vault FROM journal WHERE request_id = ?1",
                [&id.as_bytes()[..]],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(vault, "v");
        // A late copy of the request cannot record an answer (so its verb never runs), and a
        // fence after a failed batch leaves the first fence as it was.
        let done = WriteAnswer::Done { revision: 1 };
        assert!(!record_first_answer(&conn, caller, id, "v", &done, 3).unwrap());
        fence_interrupted(&conn, caller, id, "v", 4).unwrap();
        assert_eq!(
            lookup(&conn, caller, id).unwrap(),
            Some(JournalEntry::NotCarriedOut(
                NotCarriedOutReason::NeverArrived
            ))
        );
    }

    #[test]
    fn a_fence_takes_an_unknown_or_running_id_and_leaves_an_answered_one() {
        let (_dir, conn) = open_temp();
        let caller = NodeKey::from_secret_bytes([1; 32]).node_id();
        let (unknown, running, answered) = (
            RequestId::generate(),
            RequestId::generate(),
            RequestId::generate(),
        );
        insert_running(&conn, caller, running, 1).unwrap();
        let done = WriteAnswer::Done { revision: 7 };
        assert!(record_first_answer(&conn, caller, answered, "v", &done, 1).unwrap());
        for id in [unknown, running, answered] {
            fence_interrupted(&conn, caller, id, "v", 2).unwrap();
        }
        let interrupted = Some(JournalEntry::NotCarriedOut(
            NotCarriedOutReason::Interrupted,
        ));
        assert_eq!(lookup(&conn, caller, unknown).unwrap(), interrupted);
        assert_eq!(lookup(&conn, caller, running).unwrap(), interrupted);
        assert_eq!(
            lookup(&conn, caller, answered).unwrap(),
            Some(JournalEntry::Answered(done))
        );
    }

    #[test]
    fn running_rows_become_interrupted_on_recovery() {
        let (_dir, conn) = open_temp();
        let caller = NodeKey::from_secret_bytes([1; 32]).node_id();
        let (running, answered) = (RequestId::generate(), RequestId::generate());
        insert_running(&conn, caller, running, 1).unwrap();
        let done = WriteAnswer::Done { revision: 4 };
        assert!(record_first_answer(&conn, caller, answered, "v", &done, 2).unwrap());
        assert_eq!(recover_interrupted(&conn, 3).unwrap(), 1);
        assert_eq!(
            lookup(&conn, caller, running).unwrap(),
            Some(JournalEntry::NotCarriedOut(
                NotCarriedOutReason::Interrupted
            ))
        );
        assert_eq!(
            lookup(&conn, caller, answered).unwrap(),
            Some(JournalEntry::Answered(WriteAnswer::Done { revision: 4 }))
        );
    }
}
