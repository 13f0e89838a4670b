//! One write against the store, in two steps the executor runs in two transactions:
//! 1. [`admit`]: a known request id is answered from the journal; a stale one is refused; a new
//!    one is marked `running`;
//! 2. [`execute`]: the checks, the first answer and the effect, the answer recorded first and
//!    only if the id is still `running` (a request declared dead meanwhile stays dead), and the
//!    effect made only if it was. Nothing is written before that record, so a fenced write needs
//!    no savepoint to undo; a store error fails the whole transaction (the executor fences that
//!    write and runs the rest of its batch again).
//!
//! The vaults a batch writes to are read once per batch ([`BatchVaults`]) and their revisions
//! written back once, before its commit: a batch of 64 writes to one vault reads and updates the
//! vault's row once, not 64 times.

use std::time::Duration;

use ferry_peer::call::WriteCall;
use ferry_peer::outcome::{Refusal, RefusalCode};
use ferry_peer::wire::{CallState, RequestId, WriteAnswer, WriteVerb};
use ferry_ticket::NodeId;
use rusqlite::Connection;

use crate::names;
use crate::store::journal;
use crate::store::vaults::Role;
use crate::store::{records, vaults, StoreError};
use ferry_peer::outcome::NotCarriedOutReason;

/// Limits the owner applies to every write, whoever sent it.
#[derive(Debug, Clone, Copy)]
pub struct WriteLimits {
    pub max_value_bytes: usize,
    pub journal_retention: Duration,
    /// Ids dated before this (Unix ms) may have had their journal rows collected: refused as
    /// stale whatever the clock says now (a clock set back cannot revive them).
    pub collected_before_ms: u64,
}

/// How far in the future a request id may be dated (clock skew between machines). Further is
/// refused: such an id would outlive the retention its row is kept for.
pub const MAX_FUTURE_SKEW: Duration = Duration::from_secs(5 * 60);

/// Why a request id cannot be acted on, whatever the journal says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdProblem {
    /// Not a UUIDv7 with the RFC 9562 variant.
    Malformed,
    /// Older than the journal keeps (or than what was collected).
    Stale,
    /// Dated more than [`MAX_FUTURE_SKEW`] ahead of this owner's clock.
    FromTheFuture,
}

impl WriteLimits {
    /// Whether `request_id` may be acted on at `now_ms`.
    pub fn check_id(&self, request_id: RequestId, now_ms: u64) -> Result<(), IdProblem> {
        check_id(
            request_id,
            self.journal_retention,
            self.collected_before_ms,
            now_ms,
        )
    }
}

/// Whether `request_id` may be acted on at `now_ms` by a journal that keeps ids for
/// `retention` and has collected those dated before `collected_before_ms` (the local API asks
/// with 0: it has no journal of its own to have collected).
pub fn check_id(
    request_id: RequestId,
    retention: Duration,
    collected_before_ms: u64,
    now_ms: u64,
) -> Result<(), IdProblem> {
    if request_id.check().is_err() {
        return Err(IdProblem::Malformed);
    }
    let id_ms = request_id.unix_ms();
    let retention_ms = retention.as_millis() as u64;
    if id_ms.saturating_add(retention_ms) < now_ms || id_ms < collected_before_ms {
        return Err(IdProblem::Stale);
    }
    if id_ms > now_ms.saturating_add(MAX_FUTURE_SKEW.as_millis() as u64) {
        return Err(IdProblem::FromTheFuture);
    }
    Ok(())
}

/// What step 1 decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Answer now without running anything (a repeat, a fenced id, a stale id).
    Answer(WriteAnswer),
    /// New: marked running; run it in step 2.
    Run,
}

/// Step 1: the id's date, then the `running` marker unless the journal holds the id (then
/// its answer from the journal).
pub fn admit(
    conn: &Connection,
    caller: NodeId,
    request: &WriteCall,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<Admission, StoreError> {
    let problem = limits.check_id(request.request_id, now_ms).err();
    // The common case in one statement: a good id the journal does not hold is marked running.
    if problem.is_none()
        && journal::mark_running(conn, caller, request.request_id, &request.vault, now_ms)?
    {
        return Ok(Admission::Run);
    }
    // A known id is answered from the journal, whatever its date says now.
    if let Some(entry) = journal::lookup(conn, caller, request.request_id)? {
        // A `running` row here is the same id twice in one batch: the copy is told to ask
        // again, and gets the first's answer from the journal then.
        return Ok(Admission::Answer(
            entry.to_write_answer().unwrap_or_else(busy_duplicate),
        ));
    }
    // An id older than the journal keeps might have run and been forgotten: refuse it rather
    // than risk running it twice. Not journaled: this same check refuses it every time.
    match problem {
        None => Err(StoreError::Corrupt {
            detail: format!(
                "journal entry for {} neither inserted nor found",
                request.request_id
            ),
        }),
        Some(IdProblem::Stale) => Ok(Admission::Answer(WriteAnswer::Refused(Refusal::new(
            RefusalCode::StaleRequestId,
            format!(
                "request id {} is older than the owner's journal keeps ({} days); send the write under a new request id",
                request.request_id,
                limits.journal_retention.as_secs() / 86_400
            ),
        )))),
        Some(IdProblem::FromTheFuture) => {
            Ok(Admission::Answer(WriteAnswer::Refused(Refusal::new(
                RefusalCode::BadRequest,
                format!(
                    "request id {} is dated more than {} minutes ahead of the owner's clock; check the clocks, and send the write under a new request id",
                    request.request_id,
                    MAX_FUTURE_SKEW.as_secs() / 60
                ),
            ))))
        }
        Some(IdProblem::Malformed) => {
            Ok(Admission::Answer(WriteAnswer::Refused(Refusal::new(
                RefusalCode::BadRequest,
                "the request id is not a UUIDv7 with the RFC 9562 variant",
            ))))
        }
    }
}

fn busy_duplicate() -> WriteAnswer {
    WriteAnswer::Refused(Refusal::busy(
        "the same request id is already running; send it again with the same id to get its answer",
        Duration::from_millis(100),
    ))
}

/// What step 2 did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Execution {
    /// Carried out or refused; the answer is recorded. Commit.
    Recorded(WriteAnswer),
    /// The id was settled while it waited: nothing was written. Answer this.
    Fenced(WriteAnswer),
}

/// The vaults one execute transaction writes to: read on first use, their revisions moved on
/// in memory, and written back by [`BatchVaults::write_back`] before the commit. Valid for one
/// transaction only (the executor is the store's one writer while it holds the write lock).
/// A batch touches a vault or a few, so a list searched in order is all it needs.
#[derive(Debug, Default)]
pub struct BatchVaults {
    by_name: Vec<(String, BatchVault)>,
}

#[derive(Debug, Clone, Copy)]
struct BatchVault {
    owned: bool,
    revision: u64,
    moved: bool,
}

impl BatchVaults {
    fn vault(&mut self, conn: &Connection, name: &str) -> Result<&mut BatchVault, StoreError> {
        let index = match self.by_name.iter().position(|(known, _)| known == name) {
            Some(index) => index,
            None => {
                let row = vaults::get(conn, name)?;
                let vault = BatchVault {
                    owned: row.as_ref().is_some_and(|row| row.role == Role::Owner),
                    revision: row.map_or(0, |row| row.revision),
                    moved: false,
                };
                self.by_name.push((name.to_owned(), vault));
                self.by_name.len() - 1
            }
        };
        Ok(&mut self.by_name[index].1)
    }

    /// Writes each moved revision to its vault's row (in the batch's transaction).
    pub fn write_back(&mut self, conn: &Connection) -> Result<(), StoreError> {
        for (name, vault) in &mut self.by_name {
            if vault.moved {
                vaults::set_revision(conn, name, vault.revision)?;
                vault.moved = false;
            }
        }
        Ok(())
    }
}

/// What the checks decided, before anything is written.
enum Decision<'a> {
    Refuse(WriteAnswer),
    Write {
        key: &'a str,
        revision: u64,
        value: Option<&'a [u8]>,
    },
}

/// Step 2: the checks, the recorded first answer, then the effect. Nothing is written unless
/// the answer was recorded (the id still `running`); an error leaves the transaction to be
/// rolled back whole.
pub fn execute(
    conn: &Connection,
    vaults: &mut BatchVaults,
    caller: NodeId,
    request: &WriteCall,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<Execution, StoreError> {
    let decision = decide(conn, vaults, request, limits)?;
    let answer = match &decision {
        Decision::Refuse(answer) => answer.clone(),
        Decision::Write { revision, .. } => WriteAnswer::Done {
            revision: *revision,
        },
    };
    if !journal::record_answer(conn, caller, request.request_id, &answer, now_ms)? {
        let fence = journal::lookup(conn, caller, request.request_id)?
            .and_then(|entry| entry.to_write_answer())
            .unwrap_or(WriteAnswer::NotCarriedOut {
                reason: NotCarriedOutReason::Interrupted,
            });
        return Ok(Execution::Fenced(fence));
    }
    if let Decision::Write {
        key,
        revision,
        value,
    } = decision
    {
        records::set(conn, &request.vault, key, revision, value)?;
        let vault = vaults.vault(conn, &request.vault)?;
        vault.revision = revision;
        vault.moved = true;
    }
    Ok(Execution::Recorded(answer))
}

/// A settle query: the journal's answer, or a tombstone for an id never seen.
pub fn status(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
    vault: &str,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<CallState, StoreError> {
    if let Some(entry) = journal::lookup(conn, caller, request_id)? {
        return Ok(entry.to_call_state());
    }
    match limits.check_id(request_id, now_ms) {
        // Too old to be in the journal any more: if it ran, its row was collected. A tombstone
        // now would claim it never ran, which the owner can no longer know.
        Err(IdProblem::Stale) => {
            return Ok(CallState::Forgotten {
                retention_ms: limits.journal_retention.as_millis() as u64,
            })
        }
        // Not a UUIDv7 with the RFC variant: refused at every arrival, so it can never run,
        // and no row is needed to fence it (nor kept for a peer to fill the journal with).
        Err(IdProblem::Malformed) => {
            return Ok(CallState::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived,
            })
        }
        // A future-dated id is fenced like any other: once this clock catches up with it, a
        // write under it would be admitted.
        Err(IdProblem::FromTheFuture) | Ok(()) => {}
    }
    // SPEC 7 rule 6: record the tombstone first, then answer, so the id can never run later.
    if ferry_core::bugs::on(ferry_core::bugs::Bug::SkippedTombstone) {
        return Ok(CallState::NotCarriedOut {
            reason: NotCarriedOutReason::NeverArrived,
        });
    }
    // Filed under the vault the caller named only if this store owns it: the name comes from
    // the caller, and a fence filed under a vault owned elsewhere would be filed nowhere useful.
    let owned =
        !vault.is_empty() && vaults::get(conn, vault)?.is_some_and(|row| row.role == Role::Owner);
    journal::tombstone(
        conn,
        caller,
        request_id,
        if owned { vault } else { "" },
        NotCarriedOutReason::NeverArrived,
        now_ms,
    )?;
    Ok(CallState::NotCarriedOut {
        reason: NotCarriedOutReason::NeverArrived,
    })
}

fn decide<'a>(
    conn: &Connection,
    vaults: &mut BatchVaults,
    request: &'a WriteCall,
    limits: &WriteLimits,
) -> Result<Decision<'a>, StoreError> {
    let refuse = |code, detail: String| {
        Ok(Decision::Refuse(WriteAnswer::Refused(Refusal::new(
            code, detail,
        ))))
    };
    let vault = *vaults.vault(conn, &request.vault)?;
    if !vault.owned {
        return refuse(
            RefusalCode::UnknownVault,
            format!(
                "this gateway does not own a vault named {:?}",
                request.vault
            ),
        );
    }
    let key = request.verb.key();
    if let Err(err) = names::check_key(key) {
        return refuse(RefusalCode::BadRequest, err.to_string());
    }
    let if_revision = match &request.verb {
        WriteVerb::Put { if_revision, .. } | WriteVerb::Delete { if_revision, .. } => *if_revision,
    };
    // Only a condition or a delete looks at the record now; a plain put, most writes, is
    // decided without it (the upsert finds the record anyway), saving a lookup in the record
    // table and its key index on every one.
    let looks = if_revision.is_some() || matches!(request.verb, WriteVerb::Delete { .. });
    let current = if looks {
        records::live_revision(conn, &request.vault, key)?
    } else {
        0
    };
    if let Some(expected) = if_revision {
        if expected != current {
            return Ok(Decision::Refuse(WriteAnswer::Refused(Refusal::conflict(
                current,
            ))));
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
    Ok(Decision::Write {
        key,
        revision: vault.revision + 1,
        value,
    })
}

/// Both steps in one transaction (the caller's, or one of its own), for tests and callers that
/// need no crash marker in between. One transaction, because step 2 records the answer before
/// the effect: only the commit makes the two one.
pub fn apply(
    conn: &Connection,
    caller: NodeId,
    request: &WriteCall,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<WriteAnswer, StoreError> {
    crate::store::in_transaction(conn, |conn| {
        match admit(conn, caller, request, limits, now_ms)? {
            Admission::Answer(answer) => Ok(answer),
            Admission::Run => {
                let mut vaults = BatchVaults::default();
                let execution = execute(conn, &mut vaults, caller, request, limits, now_ms)?;
                vaults.write_back(conn)?;
                match execution {
                    Execution::Recorded(answer) | Execution::Fenced(answer) => Ok(answer),
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::open_temp;
    use ferry_peer::wire::Priority;
    use ferry_ticket::NodeKey;

    const LIMITS: WriteLimits = WriteLimits {
        max_value_bytes: 8,
        journal_retention: Duration::from_secs(7 * 86_400),
        collected_before_ms: 0,
    };

    fn put(key: &str, value: &[u8], if_revision: Option<u64>) -> WriteCall {
        WriteCall {
            request_id: RequestId::generate(),
            app: "app".into(),
            vault: "v".into(),
            verb: WriteVerb::Put {
                key: key.into(),
                value: value.to_vec(),
                if_revision,
            },
            priority: Priority::Interactive,
        }
    }

    fn setup() -> (tempfile::TempDir, Connection, NodeId, u64) {
        let (dir, conn) = open_temp();
        let me = NodeKey::from_secret_bytes([1; 32]).node_id();
        vaults::create_owned(&conn, "v", me, 0).unwrap();
        (dir, conn, me, crate::store::unix_ms())
    }

    #[test]
    fn a_repeated_request_id_gets_the_first_answer_and_runs_once() {
        let (_dir, conn, me, now) = setup();
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
    fn a_batch_writes_its_vaults_revision_back_at_the_end_and_a_fenced_write_spends_none() {
        let (_dir, conn, me, now) = setup();
        let mut batch = BatchVaults::default();
        let run = |batch: &mut BatchVaults, request: &WriteCall| {
            assert_eq!(
                admit(&conn, me, request, &LIMITS, now).unwrap(),
                Admission::Run
            );
            execute(&conn, batch, me, request, &LIMITS, now).unwrap()
        };
        let first = put("a", b"1", None);
        let fenced = put("b", b"2", None);
        let third = put("a", b"3", Some(1));
        assert_eq!(
            run(&mut batch, &first),
            Execution::Recorded(WriteAnswer::Done { revision: 1 })
        );
        // Settled while it waited (a crash, recovery): it writes nothing, spends no revision.
        assert_eq!(
            admit(&conn, me, &fenced, &LIMITS, now).unwrap(),
            Admission::Run
        );
        journal::recover_interrupted(&conn, now).unwrap();
        let execution = execute(&conn, &mut batch, me, &fenced, &LIMITS, now).unwrap();
        assert!(matches!(execution, Execution::Fenced(_)), "{execution:?}");
        assert_eq!(records::get(&conn, "v", "b").unwrap(), None);
        // The next write of the batch sees the first's record and revision.
        assert_eq!(
            run(&mut batch, &third),
            Execution::Recorded(WriteAnswer::Done { revision: 2 })
        );
        assert_eq!(
            vaults::get(&conn, "v").unwrap().unwrap().revision,
            0,
            "not written back yet"
        );
        batch.write_back(&conn).unwrap();
        assert_eq!(vaults::get(&conn, "v").unwrap().unwrap().revision, 2);
    }

    #[test]
    fn compare_and_swap_refuses_with_the_current_revision() {
        let (_dir, conn, me, now) = setup();
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
        let (_dir, conn, me, now) = setup();
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

    #[test]
    fn an_id_asked_about_first_is_tombstoned_and_never_runs() {
        let (_dir, conn, me, now) = setup();
        let request = put("k", b"a", None);
        assert_eq!(
            status(&conn, me, request.request_id, "v", &LIMITS, now).unwrap(),
            CallState::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived
            }
        );
        assert_eq!(
            apply(&conn, me, &request, &LIMITS, now).unwrap(),
            WriteAnswer::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived
            }
        );
        assert_eq!(records::get(&conn, "v", "k").unwrap(), None, "it never ran");
    }

    #[test]
    fn a_tombstone_is_filed_under_the_named_vault_only_if_it_is_owned_here() {
        let (_dir, conn, me, now) = setup();
        let filed_under = |vault: &str| {
            let id = RequestId::generate();
            status(&conn, me, id, vault, &LIMITS, now).unwrap();
            conn.query_row(
                "SELECT vault FROM journal WHERE request_id = ?1",
                [&id.0[..]],
                |row| row.get::<_, String>(0),
            )
            .unwrap()
        };
        assert_eq!(filed_under("v"), "v");
        assert_eq!(filed_under("not-here"), "");
        assert_eq!(filed_under(""), "");
        vaults::create_replica(&conn, "copy", me, 0).unwrap();
        assert_eq!(
            filed_under("copy"),
            "",
            "a replica here is not the vault's owner"
        );
    }

    #[test]
    fn a_malformed_id_is_answered_never_arrived_without_a_row() {
        let (_dir, conn, me, now) = setup();
        let mut wrong_variant = RequestId::generate();
        wrong_variant.0[8] &= 0x3f;
        assert_eq!(
            status(&conn, me, wrong_variant, "v", &LIMITS, now).unwrap(),
            CallState::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived
            }
        );
        assert_eq!(journal::lookup(&conn, me, wrong_variant).unwrap(), None);
    }

    #[test]
    fn a_request_settled_between_admission_and_execution_stays_dead() {
        let (_dir, conn, me, now) = setup();
        let request = put("k", b"a", None);
        assert_eq!(
            admit(&conn, me, &request, &LIMITS, now).unwrap(),
            Admission::Run
        );
        // A crash and recovery between the two steps fences it.
        journal::recover_interrupted(&conn, now).unwrap();
        let mut batch = BatchVaults::default();
        let fenced = execute(&conn, &mut batch, me, &request, &LIMITS, now).unwrap();
        assert_eq!(
            fenced,
            Execution::Fenced(WriteAnswer::NotCarriedOut {
                reason: NotCarriedOutReason::Interrupted
            })
        );
    }
}
