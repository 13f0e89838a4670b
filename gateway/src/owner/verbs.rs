//! One write against the store, in the batch's one transaction ([`execute`]): the id's date,
//! the checks and the first answer, the answer recorded only if the journal does not hold the
//! id (a copy hears the first answer, an id settled meanwhile its fence: a request declared dead
//! stays dead), and the effect made only if it was. Nothing is written before that record, so a
//! fenced write needs no savepoint to undo; a store error fails the whole transaction (the
//! executor fences that write and runs the rest of its batch again).
//!
//! The crash marker that once took a transaction of its own (a `running` row) is the
//! executor's running marks now (`owner::marks`), written before the transaction begins and
//! settled by [`fence`] at the next start.
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

use crate::names::{self, VaultName};
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

/// Whether `request` may run at all at `now_ms`: the executor marks only these (a write with
/// an unusable id is refused, or answered from the journal, and never runs).
pub fn may_run(request: &WriteCall, limits: &WriteLimits, now_ms: u64) -> bool {
    limits.check_id(request.request_id, now_ms).is_ok()
}

/// The answer to a write whose id the journal holds, or that cannot be acted on: the first
/// answer or the fence; a refusal for a stale, future or malformed id the journal does not
/// hold.
fn answer_without_running(
    conn: &Connection,
    caller: NodeId,
    request: &WriteCall,
    limits: &WriteLimits,
    problem: Option<IdProblem>,
) -> Result<WriteAnswer, StoreError> {
    // A known id is answered from the journal, whatever its date says now.
    if let Some(entry) = journal::lookup(conn, caller, request.request_id)? {
        // A `running` row is one an older release's crash left before recovery ran (it runs
        // before the owner serves): the copy is told to ask again.
        return Ok(entry.to_write_answer().unwrap_or_else(busy_duplicate));
    }
    // An id older than the journal keeps might have run and been forgotten: refuse it rather
    // than risk running it twice. Not journaled: this same check refuses it every time.
    Ok(match problem {
        None => {
            return Err(StoreError::Corrupt {
                detail: format!(
                    "journal entry for {} neither recorded nor found",
                    request.request_id
                ),
            })
        }
        Some(IdProblem::Stale) => WriteAnswer::Refused(Refusal::new(
            RefusalCode::StaleRequestId,
            format!(
                "request id {} is older than the owner's journal keeps ({} days); send the write under a new request id",
                request.request_id,
                limits.journal_retention.as_secs() / 86_400
            ),
        )),
        Some(IdProblem::FromTheFuture) => WriteAnswer::Refused(Refusal::new(
            RefusalCode::BadRequest,
            format!(
                "request id {} is dated more than {} minutes ahead of the owner's clock; check the clocks, and send the write under a new request id",
                request.request_id,
                MAX_FUTURE_SKEW.as_secs() / 60
            ),
        )),
        Some(IdProblem::Malformed) => WriteAnswer::Refused(Refusal::new(
            RefusalCode::BadRequest,
            "the request id is not a UUIDv7 with the RFC 9562 variant",
        )),
    })
}

/// The answer a copy of an id that is running now gets (ask again for its answer).
pub fn busy_duplicate() -> WriteAnswer {
    WriteAnswer::Refused(Refusal::busy(
        "the same request id is already running; send it again with the same id to get its answer",
        Duration::from_millis(100),
    ))
}

/// What [`execute`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Execution {
    /// Carried out or refused; the answer is recorded. Commit.
    Recorded(WriteAnswer),
    /// The journal held the id (a copy, or an id settled while it waited) or the id cannot be
    /// acted on: nothing was written. Answer this.
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

/// One write in the batch's transaction: the id's date, the checks, the first answer recorded
/// unless the journal holds the id, then the effect. Nothing is written unless the answer was
/// recorded; an error leaves the transaction to be rolled back whole.
pub fn execute(
    conn: &Connection,
    vaults: &mut BatchVaults,
    caller: NodeId,
    request: &WriteCall,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<Execution, StoreError> {
    if let Err(problem) = limits.check_id(request.request_id, now_ms) {
        return answer_without_running(conn, caller, request, limits, Some(problem))
            .map(Execution::Fenced);
    }
    let decision = decide(conn, vaults, request, limits)?;
    let answer = match &decision {
        Decision::Refuse(answer) => answer.clone(),
        Decision::Write { revision, .. } => WriteAnswer::Done {
            revision: *revision,
        },
    };
    // The common case in one statement: the answer of an id the journal does not hold.
    let recorded = journal::record_first_answer(
        conn,
        caller,
        request.request_id,
        &request.vault,
        &answer,
        now_ms,
    )?;
    if !recorded {
        return answer_without_running(conn, caller, request, limits, None).map(Execution::Fenced);
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

/// Fences a write whose batch did not commit (or that a crash cut short: its running mark),
/// and says what its caller may be told now: `interrupted` if the journal did not hold it,
/// else what the journal holds (a copy's first answer stands); for an id that cannot be acted
/// on, its refusal (nothing is filed for it).
pub fn fence(
    conn: &Connection,
    caller: NodeId,
    request: &WriteCall,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<WriteAnswer, StoreError> {
    let problem = limits.check_id(request.request_id, now_ms).err();
    if problem.is_none() {
        journal::fence_interrupted(conn, caller, request.request_id, &request.vault, now_ms)?;
    }
    answer_without_running(conn, caller, request, limits, problem)
}

/// Settles the running marks a crash left (at start, before the owner serves): each id the
/// journal does not hold is fenced `interrupted`. A mark of an id too old for the journal is
/// left alone: its row may have been collected after it ran, and a fence would then lie (as a
/// settle query does, [`status`]; a malformed id can never run and needs none). Returns how
/// many were fenced.
pub fn fence_marks(
    conn: &Connection,
    marks: &[super::marks::Mark],
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<usize, StoreError> {
    let mut fenced = 0;
    for mark in marks {
        let unusable = matches!(
            limits.check_id(mark.request_id, now_ms),
            Err(IdProblem::Stale | IdProblem::Malformed)
        );
        if unusable || journal::lookup(conn, mark.caller, mark.request_id)?.is_some() {
            continue;
        }
        journal::fence_interrupted(conn, mark.caller, mark.request_id, &mark.vault, now_ms)?;
        fenced += 1;
    }
    Ok(fenced)
}

/// A settle query: the journal's answer, or a tombstone for an id never seen.
pub fn status(
    conn: &Connection,
    caller: NodeId,
    request_id: RequestId,
    vault: Option<&VaultName>,
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
    let owned = match vault {
        Some(vault) => vaults::get(conn, vault)?.is_some_and(|row| row.role == Role::Owner),
        None => false,
    };
    journal::tombstone(
        conn,
        caller,
        request_id,
        vault.filter(|_| owned).map_or("", VaultName::as_str),
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

/// One write in a transaction of its own (the caller's, or one it opens), for tests and
/// callers that need no crash marker. One transaction, because [`execute`] records the answer
/// before the effect: only the commit makes the two one.
pub fn apply(
    conn: &Connection,
    caller: NodeId,
    request: &WriteCall,
    limits: &WriteLimits,
    now_ms: u64,
) -> Result<WriteAnswer, StoreError> {
    crate::store::in_transaction(conn, |conn| {
        let mut vaults = BatchVaults::default();
        let execution = execute(conn, &mut vaults, caller, request, limits, now_ms)?;
        vaults.write_back(conn)?;
        match execution {
            Execution::Recorded(answer) | Execution::Fenced(answer) => Ok(answer),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::{AppName, VaultName};
    use crate::owner::marks::Mark;
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
            app: AppName::from_static("app"),
            vault: VaultName::from_static("v"),
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
        vaults::create_owned(&conn, &VaultName::from_static("v"), me, 0).unwrap();
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
            fence_marks(&conn, &[mark(me, &fenced)], &LIMITS, now).unwrap(),
            1
        );
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
        elsewhere.vault = VaultName::from_static("nope");
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
            status(
                &conn,
                me,
                request.request_id,
                Some(&VaultName::from_static("v")),
                &LIMITS,
                now
            )
            .unwrap(),
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
            let vault = VaultName::parse(vault).ok();
            status(&conn, me, id, vault.as_ref(), &LIMITS, now).unwrap();
            conn.query_row(
                "SELECT vault FROM journal WHERE request_id = ?1",
                [&id.as_bytes()[..]],
                |row| row.get::<_, String>(0),
            )
            .unwrap()
        };
        assert_eq!(filed_under("v"), "v");
        assert_eq!(filed_under("not-here"), "");
        assert_eq!(filed_under(""), "");
        vaults::create_replica(&conn, &VaultName::from_static("copy"), me, 0).unwrap();
        assert_eq!(
            filed_under("copy"),
            "",
            "a replica here is not the vault's owner"
        );
    }

    #[test]
    fn a_malformed_id_is_answered_never_arrived_without_a_row() {
        let (_dir, conn, me, now) = setup();
        let mut bytes = *RequestId::generate().as_bytes();
        bytes[8] &= 0x3f;
        let wrong_variant = RequestId::from_bytes(bytes);
        assert_eq!(
            status(
                &conn,
                me,
                wrong_variant,
                Some(&VaultName::from_static("v")),
                &LIMITS,
                now
            )
            .unwrap(),
            CallState::NotCarriedOut {
                reason: NotCarriedOutReason::NeverArrived
            }
        );
        assert_eq!(journal::lookup(&conn, me, wrong_variant).unwrap(), None);
    }

    fn mark(caller: NodeId, request: &WriteCall) -> Mark {
        Mark {
            caller,
            request_id: request.request_id,
            vault: request.vault.to_string(),
        }
    }

    #[test]
    fn a_request_marked_before_a_crash_stays_dead_and_a_mark_never_rewrites_history() {
        let (_dir, conn, me, now) = setup();
        let cut_short = put("k", b"a", None);
        let ran = put("r", b"b", None);
        let done = apply(&conn, me, &ran, &LIMITS, now).unwrap();
        // Dated past the journal's retention at recovery: its row may have been collected
        // after it ran, so no fence may claim it never did.
        let mut old = put("o", b"c", None);
        let mut bytes = *old.request_id.as_bytes();
        bytes[..6].copy_from_slice(&(now - 8 * 86_400_000).to_be_bytes()[2..]);
        old.request_id = RequestId::from_bytes(bytes);
        let marks = [mark(me, &cut_short), mark(me, &ran), mark(me, &old)];
        assert_eq!(fence_marks(&conn, &marks, &LIMITS, now).unwrap(), 1);
        assert_eq!(journal::lookup(&conn, me, old.request_id).unwrap(), None);
        // The cut-short write's execution, landing late anyway, is fenced and writes nothing.
        let mut batch = BatchVaults::default();
        let fenced = execute(&conn, &mut batch, me, &cut_short, &LIMITS, now).unwrap();
        assert_eq!(
            fenced,
            Execution::Fenced(WriteAnswer::NotCarriedOut {
                reason: NotCarriedOutReason::Interrupted
            })
        );
        assert_eq!(records::get(&conn, "v", "k").unwrap(), None);
        // The one that ran keeps its first answer.
        assert_eq!(apply(&conn, me, &ran, &LIMITS, now).unwrap(), done);
    }

    #[test]
    fn a_fence_after_a_failed_batch_tells_each_write_the_truth() {
        let (_dir, conn, me, now) = setup();
        let ran = put("r", b"b", None);
        let done = apply(&conn, me, &ran, &LIMITS, now).unwrap();
        let lost = put("k", b"a", None);
        let interrupted = WriteAnswer::NotCarriedOut {
            reason: NotCarriedOutReason::Interrupted,
        };
        assert_eq!(fence(&conn, me, &lost, &LIMITS, now).unwrap(), interrupted);
        // A copy of a write that ran in an earlier batch was never cut short.
        assert_eq!(fence(&conn, me, &ran, &LIMITS, now).unwrap(), done);
        let mut malformed = put("m", b"c", None);
        let mut bytes = *malformed.request_id.as_bytes();
        bytes[8] &= 0x3f;
        malformed.request_id = RequestId::from_bytes(bytes);
        let WriteAnswer::Refused(refusal) = fence(&conn, me, &malformed, &LIMITS, now).unwrap()
        else {
            panic!("a malformed id is refused, and nothing is filed for it")
        };
        assert_eq!(refusal.code, RefusalCode::BadRequest);
        assert_eq!(
            journal::lookup(&conn, me, malformed.request_id).unwrap(),
            None
        );
    }
}
