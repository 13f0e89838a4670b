//! One write against the store: the journal first (a known request id is answered from it),
//! then the checks, then the effect and its journal record. Runs inside the executor's
//! transaction, so effect and record commit together or not at all.

use std::time::Duration;

use ferry_peer::outcome::{Refusal, RefusalCode};
use ferry_peer::wire::{WriteAnswer, WriteRequest, WriteVerb};
use ferry_ticket::NodeId;
use rusqlite::Connection;

use crate::names;
use crate::store::journal::{self, JournalEntry};
use crate::store::vaults::Role;
use crate::store::{records, vaults, StoreError};

/// Limits the owner applies to every write, whoever sent it.
#[derive(Debug, Clone, Copy)]
pub struct WriteLimits {
    pub max_value_bytes: usize,
    pub journal_retention: Duration,
}

/// Runs one write and returns the answer to give (and, for a new request id, journals it).
pub fn apply(
    conn: &Connection,
    caller: NodeId,
    request: &WriteRequest,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<WriteAnswer, StoreError> {
    if let Some(JournalEntry::Answered(first)) = journal::lookup(conn, caller, request.request_id)?
    {
        return Ok(first);
    }
    // An id older than the journal keeps might have run and been forgotten: refuse it rather
    // than risk running it twice. Not journaled: this same check refuses it every time.
    let retention_ms = limits.journal_retention.as_millis() as u64;
    if request.request_id.unix_ms().saturating_add(retention_ms) < now_ms {
        return Ok(WriteAnswer::Refused(Refusal::new(
            RefusalCode::StaleRequestId,
            format!(
                "request id {} is older than the owner's journal keeps ({} days); send the write under a new request id",
                request.request_id,
                limits.journal_retention.as_secs() / 86_400
            ),
        )));
    }
    let answer = decide(conn, request, limits)?;
    journal::record_answer(
        conn,
        caller,
        request.request_id,
        &request.vault,
        &answer,
        now_ms,
    )?;
    Ok(answer)
}

fn decide(
    conn: &Connection,
    request: &WriteRequest,
    limits: &WriteLimits,
) -> Result<WriteAnswer, StoreError> {
    let refuse = |code, detail: String| Ok(WriteAnswer::Refused(Refusal::new(code, detail)));
    match vaults::get(conn, &request.vault)? {
        Some(vault) if vault.role == Role::Owner => {}
        _ => {
            return refuse(
                RefusalCode::UnknownVault,
                format!(
                    "this gateway does not own a vault named {:?}",
                    request.vault
                ),
            )
        }
    }
    let key = request.verb.key();
    if let Err(detail) = names::check_key(key) {
        return refuse(RefusalCode::BadRequest, detail);
    }
    let current = records::live_revision(conn, &request.vault, key)?;
    let if_revision = match &request.verb {
        WriteVerb::Put { if_revision, .. } | WriteVerb::Delete { if_revision, .. } => *if_revision,
    };
    if let Some(expected) = if_revision {
        if expected != current {
            return Ok(WriteAnswer::Refused(Refusal::conflict(current)));
        }
    }
    let value = match &request.verb {
        WriteVerb::Put { value, .. } => {
            if value.len() > limits.max_value_bytes {
                return refuse(
                    RefusalCode::BadRequest,
                    format!(
                        "the value is {} bytes; this owner accepts at most {}",
                        value.len(),
                        limits.max_value_bytes
                    ),
                );
            }
            Some(value.as_slice())
        }
        WriteVerb::Delete { .. } => {
            if current == 0 {
                return refuse(
                    RefusalCode::NotFound,
                    format!("there is no record {key:?} to delete"),
                );
            }
            None
        }
    };
    let revision = vaults::next_revision(conn, &request.vault)?;
    records::set(conn, &request.vault, key, revision, value)?;
    Ok(WriteAnswer::Done { revision })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::open_temp;
    use ferry_peer::wire::{Priority, RequestId};
    use ferry_ticket::NodeKey;

    const LIMITS: WriteLimits = WriteLimits {
        max_value_bytes: 8,
        journal_retention: Duration::from_secs(7 * 86_400),
    };

    fn put(key: &str, value: &[u8], if_revision: Option<u64>) -> WriteRequest {
        WriteRequest {
            request_id: RequestId::generate(),
            app: "app".into(),
            vault: "v".into(),
            verb: WriteVerb::Put {
                key: key.into(),
                value: value.to_vec(),
                if_revision,
            },
            deadline_ms: 1000,
            priority: Priority::Interactive,
        }
    }

    #[test]
    fn a_repeated_request_id_gets_the_first_answer_and_runs_once() {
        let (_dir, conn) = open_temp();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, "v", me, 0).unwrap();
        let now = crate::store::unix_ms();
        let request = put("k", b"one", None);
        let first = apply(&conn, me, &request, &LIMITS, now).unwrap();
        assert_eq!(first, WriteAnswer::Done { revision: 1 });
        assert_eq!(apply(&conn, me, &request, &LIMITS, now).unwrap(), first);
        assert_eq!(vaults::get(&conn, "v").unwrap().unwrap().revision, 1);
        // The same id from another caller is another request.
        let other = NodeKey::from_secret_bytes([2; 32]).node_id();
        assert_eq!(
            apply(&conn, other, &request, &LIMITS, now).unwrap(),
            WriteAnswer::Done { revision: 2 }
        );
    }

    #[test]
    fn compare_and_swap_refuses_with_the_current_revision() {
        let (_dir, conn) = open_temp();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, "v", me, 0).unwrap();
        let now = crate::store::unix_ms();
        apply(&conn, me, &put("k", b"a", Some(0)), &LIMITS, now).unwrap();
        let refused = apply(&conn, me, &put("k", b"b", Some(0)), &LIMITS, now).unwrap();
        let WriteAnswer::Refused(refusal) = refused else {
            panic!("expected a conflict")
        };
        assert_eq!(
            (refusal.code, refusal.current_revision),
            (RefusalCode::Conflict, Some(1))
        );
        assert_eq!(
            apply(&conn, me, &put("k", b"b", Some(1)), &LIMITS, now).unwrap(),
            WriteAnswer::Done { revision: 2 }
        );
    }

    #[test]
    fn stale_ids_unknown_vaults_and_big_values_are_refused() {
        let (_dir, conn) = open_temp();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, "v", me, 0).unwrap();
        let now = crate::store::unix_ms();
        let code = |answer: WriteAnswer| match answer {
            WriteAnswer::Refused(r) => r.code,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let far_future = now + 8 * 86_400_000;
        assert_eq!(
            code(apply(&conn, me, &put("k", b"a", None), &LIMITS, far_future).unwrap()),
            RefusalCode::StaleRequestId
        );
        assert_eq!(
            code(apply(&conn, me, &put("k", b"123456789", None), &LIMITS, now).unwrap()),
            RefusalCode::BadRequest
        );
        let mut elsewhere = put("k", b"a", None);
        elsewhere.vault = "nope".into();
        assert_eq!(
            code(apply(&conn, me, &elsewhere, &LIMITS, now).unwrap()),
            RefusalCode::UnknownVault
        );
    }
}
