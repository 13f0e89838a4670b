//! A lab app's client of its own gateway's local API (the failover test's app,
//! `crate::lab_steady`, and the fault campaign's, `crate::campaign::app`): it finds the
//! gateway's address and token in its home at every call (a restarted gateway has a new port),
//! and tells an answer, a call that never reached the gateway, and one that may have.

use std::path::PathBuf;
use std::time::Duration;

use reqwest::blocking::Client;
use serde_json::Value;

/// The gateway's API, as an app reaches it.
#[derive(Debug, Clone)]
pub struct Api {
    home: PathBuf,
    client: Client,
    /// `X-Ferry-App` and `X-Ferry-Timeout` (seconds) of every call.
    app: String,
    timeout_s: String,
}

/// An answer: status, the read headers, the body as JSON (or, if it is not JSON, as a JSON
/// string), and the body's text.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub source: Option<String>,
    pub stale: bool,
    pub revision: Option<u64>,
    pub body: Value,
    pub text: String,
}

/// Why a call has no answer; `sent`: it may have reached the gateway (a write's outcome is
/// then unknown to the app, and settled by its request id).
#[derive(Debug)]
pub struct NoAnswer {
    pub detail: String,
    pub sent: bool,
}

impl Api {
    /// The API of the gateway whose home is `home`, called as `app` with `X-Ferry-Timeout:
    /// timeout_s`; the app gives up on a call after `client_timeout` (a frozen gateway answers
    /// nothing). Each call on a new connection: the API's port changes when the gateway restarts.
    pub fn new(home: PathBuf, app: &str, timeout_s: &str, client_timeout: Duration) -> Api {
        let client = Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(client_timeout)
            .build()
            .unwrap_or_else(|err| panic!("an HTTP client: {err}"));
        Api {
            home,
            client,
            app: app.to_string(),
            timeout_s: timeout_s.to_string(),
        }
    }

    pub fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<String>,
    ) -> Result<Answer, NoAnswer> {
        let addr = std::fs::read_to_string(self.home.join("api.addr"))
            .ok()
            .filter(|addr| addr.ends_with('\n'))
            .ok_or_else(|| NoAnswer {
                detail: "no api.addr: the gateway is not running".into(),
                sent: false,
            })?;
        let token = std::fs::read_to_string(self.home.join("local-token")).unwrap_or_default();
        let mut request = self
            .client
            .request(method, format!("http://{}{path}", addr.trim()))
            .header("authorization", format!("Bearer {}", token.trim()))
            .header("x-ferry-app", &self.app)
            .header("x-ferry-timeout", &self.timeout_s);
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if let Some(body) = body {
            request = request.body(body);
        }
        let response = request.send().map_err(|err| NoAnswer {
            sent: !err.is_connect(),
            detail: err.to_string(),
        })?;
        let status = response.status().as_u16();
        let header = |name: &str| ferry_harness::header_text(&response, name);
        let source = header("x-ferry-source");
        let stale = header("x-ferry-stale").as_deref() == Some("true");
        let revision = header("x-ferry-revision").and_then(|r| r.parse().ok());
        let bytes = response.bytes().map_err(|err| NoAnswer {
            detail: err.to_string(),
            sent: true,
        })?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(text.clone()));
        Ok(Answer {
            status,
            source,
            stale,
            revision,
            body,
            text,
        })
    }
}

/// The text field `field` of a lab app's settings; panics (failing the test that started the
/// app, with its log) when it is missing.
pub fn setting(settings: &Value, field: &str) -> String {
    settings[field]
        .as_str()
        .unwrap_or_else(|| panic!("the app's settings have no {field}: {settings}"))
        .to_string()
}

/// Appends `line` and a newline to an app's output file.
pub fn append_line(out: &mut impl std::io::Write, line: &Value) {
    let mut text = line.to_string();
    text.push('\n');
    out.write_all(text.as_bytes())
        .unwrap_or_else(|err| panic!("write the app's output: {err}"));
}
