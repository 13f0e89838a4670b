//! The commands about writes whose outcome was unknown: `calls` lists them, `settle` asks the
//! owner what became of one.

use std::time::Duration;

use ferry_kit::contract::CallAnswer;
use ferry_kit::{Kit, Settlement};
use serde::Serialize;

use super::{fail, kit_failure, output, show};
use crate::cli::progress::WaitNotice;
use crate::cli::Exit;
use crate::names::VaultName;

pub(super) async fn list(kit: &Kit, json: bool, state: Option<String>) -> Exit {
    let path = match state.as_deref() {
        None => "/v1/calls".to_string(),
        Some(state) => format!("/v1/calls?state={state}"),
    };
    show(kit, json, &path, print_calls).await
}

fn print_calls(calls: Vec<CallAnswer>) {
    let rows: Vec<Vec<String>> = calls
        .into_iter()
        .map(|c| {
            vec![
                c.request_id,
                output::cell(c.owner),
                output::cell(c.vault),
                c.state.to_string(),
                output::cell(c.since),
            ]
        })
        .collect();
    output::table(
        &["request id", "owner", "vault", "state", "since (unix ms)"],
        &rows,
    );
}

/// `ferry settle --json`: what the owner says became of the write. `state` is `done` (with
/// `status`, and the `revision` or the refusal's `error` and `detail`), `not_carried_out`
/// (with its `reason`), `running`, `unknown` (the owner could not be asked) or `never_sent`.
#[derive(Debug, Serialize)]
struct CliSettle<'a> {
    request_id: &'a str,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    revision: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

impl<'a> CliSettle<'a> {
    /// The owner's answer as printed, and the exit code it ends the command with.
    fn of(request_id: &'a str, settlement: &'a Settlement) -> (Exit, Self) {
        let base = |state| Self {
            request_id,
            state,
            status: None,
            revision: None,
            error: None,
            reason: None,
            detail: None,
        };
        let failed = |state, error, detail: &'a String| Self {
            error: Some(error),
            detail: Some(detail.as_str()),
            ..base(state)
        };
        match settlement {
            Settlement::Done { revision } => (
                Exit::Done,
                Self {
                    status: Some(200),
                    revision: Some(*revision),
                    ..base("done")
                },
            ),
            Settlement::Refused {
                status,
                code,
                detail,
            } => (
                Exit::Refused,
                Self {
                    status: Some(*status),
                    ..failed("done", code.as_str(), detail)
                },
            ),
            Settlement::NotCarriedOut { reason } => (
                Exit::NothingWritten,
                Self {
                    reason: Some(reason),
                    ..base("not_carried_out")
                },
            ),
            Settlement::Running => (Exit::Unknown, base("running")),
            Settlement::Unavailable { detail } => {
                (Exit::Unknown, failed("unknown", "unavailable", detail))
            }
            Settlement::NeverSent { detail } => (
                Exit::NothingWritten,
                failed("never_sent", "unknown_call", detail),
            ),
        }
    }

    /// The line `ferry settle` prints: `ID: STATE` and what the owner said, `name=value`.
    fn line(&self) -> String {
        let mut line = format!("{}: {}", self.request_id, self.state);
        if let Some(revision) = self.revision {
            line.push_str(&format!(" revision={revision}"));
        }
        for (name, value) in [
            ("error", self.error),
            ("reason", self.reason),
            ("detail", self.detail),
        ] {
            if let Some(value) = value {
                line.push_str(&format!(" {name}={value}"));
            }
        }
        line
    }
}

pub(super) async fn settle(
    kit: &Kit,
    json: bool,
    request_id: &str,
    wait: Option<String>,
    vault: Option<VaultName>,
) -> Exit {
    let wait = match wait.as_deref().map(ferry_kit::contract::parse_wait) {
        None => None,
        Some(Some(wait)) => Some(wait),
        Some(None) => {
            return fail(
                Exit::Usage,
                "--wait takes seconds between 0 and 600 (e.g. 2.5)",
            )
        }
    };
    let _notice = WaitNotice::after(
        Duration::from_secs(1),
        match wait {
            Some(wait) => format!(
                "asking the owner what became of {request_id} (waiting up to {:.1} s while it runs)",
                wait.as_secs_f64()
            ),
            None => format!("asking the owner what became of {request_id}"),
        },
    );
    let settlement = match kit.settle(request_id, vault.as_deref(), wait).await {
        Ok(settlement) => settlement,
        // Whatever went wrong with the settle query, the write's outcome is still unknown
        // (exit 4), never "nothing written" (3): a bad argument is the only exception.
        Err(err) => {
            let exit = kit_failure(err, json);
            return if exit == Exit::Usage {
                exit
            } else {
                Exit::Unknown
            };
        }
    };
    let (exit, answer) = CliSettle::of(request_id, &settlement);
    if json {
        output::json(&answer);
    } else {
        println!("{}", answer.line());
    }
    exit
}

#[cfg(test)]
mod tests {
    use ferry_kit::contract::ErrorCode;

    use super::*;

    /// Each answer keeps the keys (for scripts) and the line (for people) it always had.
    #[test]
    fn each_settlement_prints_the_keys_and_the_line_it_always_had() {
        let cases = [
            (
                Settlement::Done { revision: 2 },
                Exit::Done,
                r#"{"request_id":"id","revision":2,"state":"done","status":200}"#,
                "id: done revision=2",
            ),
            (
                Settlement::Refused {
                    status: 409,
                    code: ErrorCode::Conflict,
                    detail: "at 2".into(),
                },
                Exit::Refused,
                r#"{"detail":"at 2","error":"conflict","request_id":"id","state":"done","status":409}"#,
                "id: done error=conflict detail=at 2",
            ),
            (
                Settlement::NotCarriedOut {
                    reason: "never_arrived".into(),
                },
                Exit::NothingWritten,
                r#"{"reason":"never_arrived","request_id":"id","state":"not_carried_out"}"#,
                "id: not_carried_out reason=never_arrived",
            ),
            (
                Settlement::Running,
                Exit::Unknown,
                r#"{"request_id":"id","state":"running"}"#,
                "id: running",
            ),
            (
                Settlement::Unavailable { detail: "d".into() },
                Exit::Unknown,
                r#"{"detail":"d","error":"unavailable","request_id":"id","state":"unknown"}"#,
                "id: unknown error=unavailable detail=d",
            ),
            (
                Settlement::NeverSent { detail: "d".into() },
                Exit::NothingWritten,
                r#"{"detail":"d","error":"unknown_call","request_id":"id","state":"never_sent"}"#,
                "id: never_sent error=unknown_call detail=d",
            ),
        ];
        for (settlement, exit, json, line) in cases {
            let (got_exit, answer) = CliSettle::of("id", &settlement);
            let text = output::to_text(&answer, false).unwrap_or_else(|err| panic!("{err}"));
            assert_eq!(
                (got_exit, text.as_str(), answer.line().as_str()),
                (exit, json, line),
                "{settlement:?}"
            );
        }
    }
}
