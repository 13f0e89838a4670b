//! The record commands: the writes (`put`, `delete`) and what they printed, and the reads
//! (`get`, `list`, `watch`).

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use ferry_kit::{Kit, KitError, ReadRecord, WriteOptions, WriteResult};
use serde::Serialize;

use super::{fail, kit_failure, output};
use crate::cli::progress::WaitNotice;
use crate::cli::{Exit, WriteFlags};

pub(super) async fn put(
    kit: &Kit,
    json: bool,
    vault: &str,
    key: &str,
    value: Option<String>,
    file: Option<PathBuf>,
    flags: WriteFlags,
) -> Exit {
    let value = match read_value(value, file) {
        Ok(value) => value,
        Err(err) => return fail(Exit::Usage, &err.to_string()),
    };
    let options = options(flags);
    let _notice = write_wait_notice(vault, &options);
    let started = ferry_peer::clock::now();
    let result = kit.put(vault, key, value, &options).await;
    report_write(&result, json, ferry_peer::clock::since(started))
}

pub(super) async fn delete(
    kit: &Kit,
    json: bool,
    vault: &str,
    key: &str,
    flags: WriteFlags,
) -> Exit {
    let options = options(flags);
    let _notice = write_wait_notice(vault, &options);
    let started = ferry_peer::clock::now();
    let result = kit.delete(vault, key, &options).await;
    report_write(&result, json, ferry_peer::clock::since(started))
}

/// Why `ferry put` has no value to write (nothing was sent).
#[derive(Debug, thiserror::Error)]
enum ValueError {
    #[error("cannot read {}: {source}", path.display())]
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read standard input: {source}")]
    Stdin { source: std::io::Error },
    #[error("give the value, `-` to read standard input, or --file F")]
    Missing,
}

fn read_value(value: Option<String>, file: Option<PathBuf>) -> Result<Vec<u8>, ValueError> {
    match (value, file) {
        (_, Some(path)) => std::fs::read(&path).map_err(|source| ValueError::File { path, source }),
        (Some(dash), None) if dash == "-" => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|source| ValueError::Stdin { source })?;
            Ok(buf)
        }
        (Some(text), None) => Ok(text.into_bytes()),
        (None, None) => Err(ValueError::Missing),
    }
}

/// After a second of waiting for a write's answer, says so, with the request id: a person who
/// gives up with Ctrl-C then still has the id to settle it with (the write goes on).
fn write_wait_notice(vault: &str, options: &WriteOptions) -> WaitNotice {
    let id = options.request_id.clone().unwrap_or_default();
    WaitNotice::after(
        Duration::from_secs(1),
        format!(
            "waiting for the owner of {vault} to answer (up to {} s); if you stop waiting, the write still goes on: `ferry settle {id} --vault {vault}` tells what became of it",
            options.timeout.as_deref().unwrap_or("30")
        ),
    )
}

/// The write's options. The CLI makes the request id itself when none is given (the kit would
/// too), so the id is known before anything is sent.
fn options(flags: WriteFlags) -> WriteOptions {
    WriteOptions {
        if_revision: flags.if_revision,
        request_id: Some(
            flags
                .request_id
                .unwrap_or_else(|| uuid::Uuid::now_v7().hyphenated().to_string()),
        ),
        timeout: flags.timeout,
        client_timeout: None,
        background: flags.background,
    }
}

/// `ferry put --json` and `ferry delete --json`: what became of the write. `outcome`,
/// `request_id` and `elapsed_ms` are always there (`request_id` null when the gateway never
/// took the write); the rest only where the outcome has them.
#[derive(Debug, Serialize)]
struct CliWriteOutcome<'a> {
    /// `done`, `refused`, `not_carried_out`, `unavailable` or `outcome_unknown`.
    outcome: &'static str,
    request_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    revision: Option<u64>,
    /// Every outcome but `done`: the error code (`conflict`, `local_gateway_down`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
    /// With `not_carried_out`: why (`never_arrived`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    /// With `outcome_unknown`: the vault to settle it by, and its owner (null when the
    /// gateway did not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    vault: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<Option<&'a str>>,
    /// With a `conflict`: the record's revision now.
    #[serde(skip_serializing_if = "Option::is_none")]
    current_revision: Option<u64>,
    /// With `busy` and `rate_limited`: the seconds to wait before sending it again.
    #[serde(skip_serializing_if = "Option::is_none")]
    retry_after_s: Option<u64>,
    /// The time the gateway took to answer, in milliseconds to two decimals.
    elapsed_ms: f64,
}

impl<'a> CliWriteOutcome<'a> {
    /// A write's result as printed, and the exit code it ends the command with (SPEC 13).
    fn of(result: &'a WriteResult, elapsed: Duration) -> (Exit, Self) {
        let base = |outcome, request_id: Option<&'a String>| Self {
            outcome,
            request_id: request_id.map(String::as_str),
            revision: None,
            error: None,
            detail: None,
            reason: None,
            vault: None,
            owner: None,
            current_revision: None,
            retry_after_s: None,
            elapsed_ms: (elapsed.as_secs_f64() * 1000.0 * 100.0).round() / 100.0,
        };
        let failed = |outcome, request_id, error, detail: &'a String| Self {
            error: Some(error),
            detail: Some(detail.as_str()),
            ..base(outcome, request_id)
        };
        match result {
            WriteResult::Done {
                revision,
                request_id,
            } => (
                Exit::Done,
                Self {
                    revision: Some(*revision),
                    ..base("done", Some(request_id))
                },
            ),
            WriteResult::Refused {
                code,
                detail,
                request_id,
                current_revision,
                retry_after,
                ..
            } => (
                Exit::Refused,
                Self {
                    current_revision: *current_revision,
                    retry_after_s: retry_after.map(|after| after.as_secs()),
                    ..failed("refused", Some(request_id), code.as_str(), detail)
                },
            ),
            WriteResult::NotCarriedOut {
                request_id,
                reason,
                detail,
            } => (
                Exit::NothingWritten,
                Self {
                    reason: Some(reason),
                    ..failed(
                        "not_carried_out",
                        Some(request_id),
                        "not_carried_out",
                        detail,
                    )
                },
            ),
            WriteResult::Unavailable { request_id, detail } => (
                Exit::NothingWritten,
                failed("unavailable", Some(request_id), "unavailable", detail),
            ),
            WriteResult::OutcomeUnknown {
                request_id,
                vault,
                owner,
                detail,
            } => (
                Exit::Unknown,
                Self {
                    vault: Some(vault),
                    owner: Some(owner.as_deref()),
                    ..failed(
                        "outcome_unknown",
                        Some(request_id),
                        "outcome_unknown",
                        detail,
                    )
                },
            ),
            WriteResult::Invalid { code, detail, .. } => {
                (Exit::Usage, failed("refused", None, code.as_str(), detail))
            }
            WriteResult::LocalGatewayDown { detail } => (
                Exit::NothingWritten,
                failed("unavailable", None, "local_gateway_down", detail),
            ),
        }
    }
}

/// Prints a write's result and returns its exit code (SPEC 13). `elapsed` is the time the
/// gateway took to answer (the call itself, not this process's start), in the JSON output.
fn report_write(result: &WriteResult, json: bool, elapsed: Duration) -> Exit {
    let (exit, outcome) = CliWriteOutcome::of(result, elapsed);
    if json {
        output::json(&outcome);
        return exit;
    }
    if let WriteResult::Done {
        revision,
        request_id,
    } = result
    {
        println!("done: revision {revision} (request {request_id})");
        return exit;
    }
    eprintln!(
        "ferry: {}: {}",
        output::cell(outcome.error),
        output::cell(outcome.detail)
    );
    if let WriteResult::OutcomeUnknown {
        request_id, vault, ..
    } = result
    {
        eprintln!("ferry: the write may or may not have happened; do not resend it under a new id; `ferry settle {request_id} --vault {vault}` says what became of it");
    }
    if let (Some(after), Some(request_id)) = (result.may_resend_after(), result.request_id()) {
        eprintln!(
            "ferry: nothing was written; wait {} s (the Retry-After of the refusal), then send it again with --request-id {request_id}",
            after.as_secs().max(1)
        );
    }
    exit
}

/// `ferry get --json`: the record, its value as text when it is UTF-8, else in base64.
#[derive(Debug, Serialize)]
struct CliRecord {
    revision: u64,
    /// `local`, `cache`, `owner` or `replica:LABEL`.
    source: String,
    stale: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_base64: Option<String>,
}

impl From<ReadRecord> for CliRecord {
    fn from(record: ReadRecord) -> Self {
        let (value, value_base64) = match String::from_utf8(record.value) {
            Ok(text) => (Some(text), None),
            Err(bytes) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(bytes.into_bytes())),
            ),
        };
        Self {
            revision: record.revision,
            source: record.source,
            stale: record.stale,
            value,
            value_base64,
        }
    }
}

pub(super) async fn get(kit: &Kit, json: bool, vault: &str, key: &str) -> Exit {
    let record = match kit.get(vault, key).await {
        Ok(record) => record,
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&CliRecord::from(record));
        return Exit::Done;
    }
    use std::io::Write;
    let mut stdout = std::io::stdout();
    if stdout
        .write_all(&record.value)
        .and_then(|()| stdout.flush())
        .is_err()
    {
        return fail(Exit::Unknown, "standard output closed");
    }
    Exit::Done
}

pub(super) async fn list(
    kit: &Kit,
    json: bool,
    vault: &str,
    prefix: &str,
    limit: Option<usize>,
) -> Exit {
    let keys = match kit.list(vault, prefix, limit).await {
        Ok(keys) => keys,
        Err(err) => return kit_failure(err, json),
    };
    if json {
        output::json(&keys);
    } else {
        let rows: Vec<Vec<String>> = keys
            .into_iter()
            .map(|k| vec![k.key, k.revision.to_string()])
            .collect();
        output::table(&["key", "revision"], &rows);
    }
    Exit::Done
}

/// How long `ferry watch` waits on one page before asking again.
const WATCH_WAIT: Duration = Duration::from_secs(25);

/// The pause before `ferry watch` asks a gateway that could not be reached again.
const WATCH_RETRY: Duration = Duration::from_secs(1);

pub(super) async fn watch(
    kit: &Kit,
    json: bool,
    vault: &str,
    after: u64,
    count: Option<u64>,
) -> Exit {
    let mut feed = ferry_kit::ChangeFeed::new(kit.clone(), vault, after, WATCH_WAIT);
    let mut shown = 0u64;
    let mut said_down = false;
    // Said once per quiet stretch (a new one each time the feed moves on), not per long poll.
    let mut notice: Option<(u64, WaitNotice)> = None;
    loop {
        if count.is_some_and(|count| shown >= count) {
            return Exit::Done;
        }
        let cursor = feed.cursor();
        if notice.as_ref().map(|(at, _)| *at) != Some(cursor) {
            notice = Some((
                cursor,
                WaitNotice::after(
                    Duration::from_secs(2),
                    format!(
                        "waiting for changes to {vault} after revision {cursor} (Ctrl-C to stop)"
                    ),
                ),
            ));
        }
        let changes = match feed.next().await {
            Ok(changes) => changes,
            // The gateway restarting (down, its connection broken under a long poll, or
            // stopping): say so once, and carry on from the same revision; a page is safe to
            // ask for again.
            Err(
                KitError::LocalGatewayDown { detail }
                | KitError::Broken { detail }
                | KitError::Answered {
                    status: 503,
                    detail,
                    ..
                },
            ) => {
                if !said_down {
                    eprintln!(
                        "waiting for the gateway ({detail}); from revision {}",
                        feed.cursor()
                    );
                    said_down = true;
                }
                tokio::time::sleep(WATCH_RETRY).await;
                continue;
            }
            Err(err) => return kit_failure(err, json),
        };
        said_down = false;
        for change in changes {
            if json {
                output::json_line(&change);
            } else if change.deleted {
                println!("{} {} deleted", change.revision, change.key);
            } else {
                println!("{} {}", change.revision, change.key);
            }
            shown += 1;
            if count.is_some_and(|count| shown >= count) {
                return Exit::Done;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use ferry_kit::contract::ErrorCode;

    use super::*;

    /// The JSON `ferry put --json` printed for `result`, on one line.
    fn printed(result: WriteResult) -> (Exit, String) {
        let (exit, outcome) = CliWriteOutcome::of(&result, Duration::from_micros(1_234_567));
        let text = output::to_text(&outcome, false).unwrap_or_else(|err| panic!("{err}"));
        (exit, text)
    }

    /// Scripts read these keys: each outcome keeps the ones it always had, `null`s included.
    #[test]
    fn each_write_outcome_prints_the_keys_scripts_read() {
        let id = || "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01".to_string();
        let cases = [
            (
                WriteResult::Done {
                    revision: 3,
                    request_id: id(),
                },
                Exit::Done,
                r#"{"elapsed_ms":1234.57,"outcome":"done","request_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01","revision":3}"#,
            ),
            (
                WriteResult::Refused {
                    status: 409,
                    code: ErrorCode::Conflict,
                    detail: "d".into(),
                    request_id: id(),
                    current_revision: Some(2),
                    retry_after: None,
                },
                Exit::Refused,
                r#"{"current_revision":2,"detail":"d","elapsed_ms":1234.57,"error":"conflict","outcome":"refused","request_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01"}"#,
            ),
            (
                WriteResult::Refused {
                    status: 503,
                    code: ErrorCode::Busy,
                    detail: "d".into(),
                    request_id: id(),
                    current_revision: None,
                    retry_after: Some(Duration::from_secs(2)),
                },
                Exit::Refused,
                r#"{"detail":"d","elapsed_ms":1234.57,"error":"busy","outcome":"refused","request_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01","retry_after_s":2}"#,
            ),
            (
                WriteResult::NotCarriedOut {
                    request_id: id(),
                    reason: "never_arrived".into(),
                    detail: "d".into(),
                },
                Exit::NothingWritten,
                r#"{"detail":"d","elapsed_ms":1234.57,"error":"not_carried_out","outcome":"not_carried_out","reason":"never_arrived","request_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01"}"#,
            ),
            (
                WriteResult::Unavailable {
                    request_id: id(),
                    detail: "d".into(),
                },
                Exit::NothingWritten,
                r#"{"detail":"d","elapsed_ms":1234.57,"error":"unavailable","outcome":"unavailable","request_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01"}"#,
            ),
            (
                WriteResult::OutcomeUnknown {
                    request_id: id(),
                    vault: "notes".into(),
                    owner: None,
                    detail: "d".into(),
                },
                Exit::Unknown,
                r#"{"detail":"d","elapsed_ms":1234.57,"error":"outcome_unknown","outcome":"outcome_unknown","owner":null,"request_id":"0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a01","vault":"notes"}"#,
            ),
            (
                WriteResult::Invalid {
                    status: 400,
                    code: ErrorCode::BadRequest,
                    detail: "d".into(),
                },
                Exit::Usage,
                r#"{"detail":"d","elapsed_ms":1234.57,"error":"bad_request","outcome":"refused","request_id":null}"#,
            ),
            (
                WriteResult::LocalGatewayDown { detail: "d".into() },
                Exit::NothingWritten,
                r#"{"detail":"d","elapsed_ms":1234.57,"error":"local_gateway_down","outcome":"unavailable","request_id":null}"#,
            ),
        ];
        for (result, exit, json) in cases {
            assert_eq!(
                printed(result.clone()),
                (exit, json.to_string()),
                "{result:?}"
            );
        }
    }

    #[test]
    fn a_record_that_is_not_text_prints_its_value_in_base64() {
        let record = |value: &[u8]| ReadRecord {
            value: value.to_vec(),
            revision: 1,
            source: "cache".into(),
            stale: false,
        };
        let text = |value: &[u8]| output::to_text(&CliRecord::from(record(value)), false).ok();
        assert_eq!(
            text(b"world").as_deref(),
            Some(r#"{"revision":1,"source":"cache","stale":false,"value":"world"}"#)
        );
        assert_eq!(
            text(&[0xff, 0xfe, 0]).as_deref(),
            Some(r#"{"revision":1,"source":"cache","stale":false,"value_base64":"//4A"}"#)
        );
    }
}
