//! The kit: the client library apps (and the `ferry` CLI) use to call their local gateway.
//!
//! A write's answer is a [`WriteResult`], one variant per case of SPEC 5's table, so an app
//! cannot mistake "nothing was sent" for "the request left and nobody knows". When the local
//! gateway does not answer its connect, a write is [`WriteResult::LocalGatewayDown`]: nothing
//! was sent, and the kit never goes around the local gateway to write.
//!
//! A [`Kit::get`] that finds the local gateway down (no `api.addr`, or its connect refused)
//! reads straight from a trusted peer's gateway instead, as this machine's node (SPEC 9; see
//! [`peer_read`]). Only when no peer can answer either is it [`KitError::LocalGatewayDown`].

mod peer_read;

use std::net::SocketAddr;
use std::time::Duration;

use serde_json::Value;

use crate::home::Home;
use peer_read::{PeerRead, PeerReadError};

/// Extra time the HTTP client waits beyond the call's own timeout, so the gateway's answer
/// (which it must give by the deadline) always wins over the client giving up.
const CLIENT_GRACE: Duration = Duration::from_secs(5);

/// Options of one write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub if_revision: Option<u64>,
    pub request_id: Option<String>,
    /// Seconds, as sent in `X-Ferry-Timeout` (validated by the gateway).
    pub timeout: Option<String>,
}

/// What became of a write (SPEC 5).
#[derive(Debug, Clone, PartialEq)]
pub enum WriteResult {
    /// The owner carried it out.
    Done { revision: u64, request_id: String },
    /// The owner answered and did not carry it out (`conflict`, `busy`, `ticket_refused`, ...).
    Refused {
        status: u16,
        code: String,
        detail: String,
        body: Value,
    },
    /// The request left, the connection broke, and the owner confirmed it never ran.
    NotCarriedOut { request_id: String, detail: String },
    /// The call never left this machine.
    Unavailable { request_id: String, detail: String },
    /// The call left and no answer came back: settle it, never resend under a new id.
    OutcomeUnknown {
        request_id: String,
        owner: String,
        detail: String,
    },
    /// The local gateway refused the call before sending anything (bad input, unknown vault).
    Invalid {
        status: u16,
        code: String,
        detail: String,
    },
    /// The local gateway is not running: nothing was sent.
    LocalGatewayDown { detail: String },
}

/// What the owner says became of a write (`GET /v1/calls/{id}`).
#[derive(Debug, Clone, PartialEq)]
pub enum Settlement {
    /// Carried out: the first answer's revision.
    Done { revision: u64 },
    /// The owner answered and did not carry it out (its first answer, verbatim).
    Refused {
        status: u16,
        code: String,
        detail: String,
    },
    /// Not carried out, and never will be: send it again under a new request id.
    NotCarriedOut { reason: String },
    /// Still running at the owner; ask again (or pass a longer `wait`).
    Running,
    /// The owner could not be asked now; the outcome is still unknown. Ask again later.
    Unavailable { detail: String },
}

/// A record as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadRecord {
    pub value: Vec<u8>,
    pub revision: u64,
    pub source: String,
    pub stale: bool,
}

/// A call other than a write that did not succeed.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum KitError {
    #[error("{detail}")]
    LocalGatewayDown { detail: String },
    #[error("{detail}")]
    Answered {
        status: u16,
        code: String,
        detail: String,
    },
    #[error("the gateway's answer could not be understood: {0}")]
    Protocol(String),
}

/// A client of one local gateway.
#[derive(Debug, Clone)]
pub struct Kit {
    http: reqwest::Client,
    base: Option<String>,
    token: String,
    app: String,
    home: String,
    /// The state directory itself: a read around a stopped gateway needs its node key and
    /// trust store.
    state: Home,
}

impl Kit {
    /// A client of the gateway whose state directory is `home`, calling as `app`.
    /// Never fails: a gateway that is not running is reported by each call.
    pub fn from_home(home: &Home, app: &str) -> Self {
        let base = home
            .read_api_addr()
            .map(|addr: SocketAddr| format!("http://{addr}"));
        let token = home.read_token().unwrap_or_default();
        Self {
            // The local API is on loopback; a proxy from the environment must never see it.
            http: reqwest::Client::builder()
                .no_proxy()
                .build()
                .unwrap_or_else(|_| reqwest::Client::new()),
            base,
            token,
            app: app.to_string(),
            home: home.root().display().to_string(),
            state: home.clone(),
        }
    }

    fn down(&self, why: &str) -> String {
        format!(
            "no gateway answers for {} ({why}); start it with `ferry serve --home {}`; nothing was sent",
            self.home, self.home
        )
    }

    fn url(&self, path: &str) -> Result<String, String> {
        match &self.base {
            Some(base) => Ok(format!("{base}{path}")),
            None => Err(self.down("it has not written api.addr")),
        }
    }

    fn request(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        self.http
            .request(method, url)
            .bearer_auth(&self.token)
            .header("x-ferry-app", &self.app)
    }

    async fn send(&self, builder: reqwest::RequestBuilder) -> Result<reqwest::Response, String> {
        builder.send().await.map_err(|err| {
            if err.is_connect() {
                self.down("connection refused")
            } else {
                self.down(&err.to_string())
            }
        })
    }

    pub async fn put(
        &self,
        vault: &str,
        key: &str,
        value: Vec<u8>,
        options: &WriteOptions,
    ) -> WriteResult {
        self.write(reqwest::Method::PUT, vault, key, Some(value), options)
            .await
    }

    pub async fn delete(&self, vault: &str, key: &str, options: &WriteOptions) -> WriteResult {
        self.write(reqwest::Method::DELETE, vault, key, None, options)
            .await
    }

    async fn write(
        &self,
        method: reqwest::Method,
        vault: &str,
        key: &str,
        value: Option<Vec<u8>>,
        options: &WriteOptions,
    ) -> WriteResult {
        let url = match self.url(&record_path(vault, key)) {
            Ok(url) => url,
            Err(detail) => return WriteResult::LocalGatewayDown { detail },
        };
        let timeout = options
            .timeout
            .as_deref()
            .and_then(|t| t.parse::<f64>().ok())
            .filter(|t| t.is_finite() && *t > 0.0 && *t <= 600.0)
            .map(Duration::from_secs_f64)
            .unwrap_or(Duration::from_secs(30));
        let mut builder = self.request(method, url).timeout(timeout + CLIENT_GRACE);
        if let Some(revision) = options.if_revision {
            builder = builder.header("if-match", revision.to_string());
        }
        if let Some(id) = &options.request_id {
            builder = builder.header("x-ferry-request-id", id);
        }
        if let Some(t) = &options.timeout {
            builder = builder.header("x-ferry-timeout", t);
        }
        if let Some(value) = value {
            builder = builder.body(value);
        }
        let response = match self.send(builder).await {
            Ok(response) => response,
            Err(detail) => return WriteResult::LocalGatewayDown { detail },
        };
        let status = response.status().as_u16();
        let header_id = response
            .headers()
            .get("x-ferry-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let text = |field: &str| {
            body.get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let request_id = if header_id.is_empty() {
            text("request_id")
        } else {
            header_id
        };
        if status == 200 {
            return match body.get("revision").and_then(Value::as_u64) {
                Some(revision) => WriteResult::Done {
                    revision,
                    request_id,
                },
                None => WriteResult::OutcomeUnknown {
                    request_id,
                    owner: String::new(),
                    detail: "the gateway answered 200 without a revision".into(),
                },
            };
        }
        let code = text("error");
        let detail = text("detail");
        match (status, code.as_str()) {
            (503, "not_carried_out") => WriteResult::NotCarriedOut { request_id, detail },
            (503, "unavailable") => WriteResult::Unavailable { request_id, detail },
            (502, "outcome_unknown") => WriteResult::OutcomeUnknown {
                request_id,
                owner: text("owner"),
                detail,
            },
            (400, _) | (401, "unauthorized") | (404, "unknown_vault") => WriteResult::Invalid {
                status,
                code,
                detail,
            },
            _ => WriteResult::Refused {
                status,
                code,
                detail,
                body,
            },
        }
    }

    /// Asks what became of a write, waiting up to `wait_s` seconds while it is running.
    pub async fn settle(
        &self,
        request_id: &str,
        wait_s: Option<u32>,
    ) -> Result<Settlement, KitError> {
        let path = match wait_s {
            Some(wait) => format!("/v1/calls/{}?wait={wait}", encode_segment(request_id)),
            None => format!("/v1/calls/{}", encode_segment(request_id)),
        };
        let body = match self.get_json(&path).await {
            Ok(body) => body,
            Err(KitError::Answered {
                status: 503,
                detail,
                ..
            }) => return Ok(Settlement::Unavailable { detail }),
            Err(err) => return Err(err),
        };
        let text = |field: &str| {
            body.get(field)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Ok(match text("state").as_str() {
            "done" => match (
                body.get("status").and_then(Value::as_u64),
                body.get("revision").and_then(Value::as_u64),
            ) {
                (Some(200), Some(revision)) => Settlement::Done { revision },
                (status, _) => Settlement::Refused {
                    status: status.unwrap_or_default() as u16,
                    code: text("error"),
                    detail: text("detail"),
                },
            },
            "not_carried_out" => Settlement::NotCarriedOut {
                reason: text("reason"),
            },
            "running" => Settlement::Running,
            other => return Err(KitError::Protocol(format!("unknown call state {other:?}"))),
        })
    }

    /// Reads one record. When the local gateway is down (it wrote no `api.addr`, or its
    /// connect is refused), reads it straight from a trusted peer's gateway: `source` is then
    /// `owner`, or `replica:<label>` with `stale` set.
    pub async fn get(&self, vault: &str, key: &str) -> Result<ReadRecord, KitError> {
        let Some(base) = &self.base else {
            return self
                .get_around(vault, key, "it has not written api.addr")
                .await;
        };
        let url = format!("{base}{}", record_path(vault, key));
        let response = match self.request(reqwest::Method::GET, url).send().await {
            Ok(response) => response,
            Err(err) if err.is_connect() => {
                return self.get_around(vault, key, "connection refused").await
            }
            Err(err) => {
                return Err(KitError::LocalGatewayDown {
                    detail: self.down(&err.to_string()),
                })
            }
        };
        if !response.status().is_success() {
            return Err(answered(response).await);
        }
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let revision = header("x-ferry-revision")
            .parse()
            .map_err(|_| KitError::Protocol("no X-Ferry-Revision on a record".into()))?;
        let source = header("x-ferry-source");
        let stale = header("x-ferry-stale") == "true";
        let value = response
            .bytes()
            .await
            .map_err(|err| KitError::Protocol(err.to_string()))?
            .to_vec();
        Ok(ReadRecord {
            value,
            revision,
            source,
            stale,
        })
    }

    /// `get` with the local gateway down (`why`): from a trusted peer's gateway, never a write.
    async fn get_around(&self, vault: &str, key: &str, why: &str) -> Result<ReadRecord, KitError> {
        // The checks the local API would make, so a bad name is the same 400 either way.
        crate::names::check_vault(vault)
            .and_then(|()| crate::names::check_key(key))
            .map_err(|detail| KitError::Answered {
                status: 400,
                code: "bad_request".into(),
                detail,
            })?;
        let timeout = peer_read::DEFAULT_TIMEOUT;
        match peer_read::get(&self.state, &self.app, vault, key, timeout).await {
            Ok(PeerRead::Found(record)) => Ok(record),
            // The shape the local gateway gives a missing record.
            Ok(PeerRead::NotFound { source }) => Err(KitError::Answered {
                status: 404,
                code: "not_found".into(),
                detail: format!(
                    "there is no record {key:?} in this vault \
                     (answered by {source}; the local gateway is down)"
                ),
            }),
            Err(err) => Err(KitError::LocalGatewayDown {
                detail: self.down_for_reads(why, &err),
            }),
        }
    }

    fn down_for_reads(&self, why: &str, peers: &PeerReadError) -> String {
        let home = &self.home;
        format!(
            "no gateway answers for {home} ({why}) and no trusted peer could answer either \
             ({peers}); start it with `ferry serve --home {home}`"
        )
    }

    /// Every key with `prefix`, page by page (or at most `limit`).
    pub async fn list(
        &self,
        vault: &str,
        prefix: &str,
        limit: Option<usize>,
    ) -> Result<Vec<(String, u64)>, KitError> {
        let mut keys = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut query = vec![("prefix", prefix.to_string())];
            if let Some(after) = &after {
                query.push(("after", after.clone()));
            }
            let page = self
                .get_json_query(
                    &format!("/v1/vaults/{}/records", encode_segment(vault)),
                    &query,
                )
                .await?;
            let items = page
                .get("keys")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            for item in items {
                let key = item
                    .get("key")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string();
                let revision = item
                    .get("revision")
                    .and_then(Value::as_u64)
                    .unwrap_or_default();
                keys.push((key, revision));
                if limit.is_some_and(|limit| keys.len() >= limit) {
                    return Ok(keys);
                }
            }
            match page.get("next_after").and_then(Value::as_str) {
                Some(next) if page.get("more").and_then(Value::as_bool) == Some(true) => {
                    after = Some(next.to_string())
                }
                _ => return Ok(keys),
            }
        }
    }

    /// GET an admin path as JSON.
    pub async fn get_json(&self, path: &str) -> Result<Value, KitError> {
        self.get_json_query(path, &[]).await
    }

    async fn get_json_query(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<Value, KitError> {
        let url = self
            .url(path)
            .map_err(|detail| KitError::LocalGatewayDown { detail })?;
        let response = self
            .send(self.request(reqwest::Method::GET, url).query(query))
            .await
            .map_err(|detail| KitError::LocalGatewayDown { detail })?;
        if !response.status().is_success() {
            return Err(answered(response).await);
        }
        response
            .json()
            .await
            .map_err(|err| KitError::Protocol(err.to_string()))
    }

    /// GET a path as text (for `/metrics`).
    pub async fn get_text(&self, path: &str) -> Result<String, KitError> {
        let url = self
            .url(path)
            .map_err(|detail| KitError::LocalGatewayDown { detail })?;
        let response = self
            .send(self.request(reqwest::Method::GET, url))
            .await
            .map_err(|detail| KitError::LocalGatewayDown { detail })?;
        if !response.status().is_success() {
            return Err(answered(response).await);
        }
        response
            .text()
            .await
            .map_err(|err| KitError::Protocol(err.to_string()))
    }

    /// POST JSON to an admin path.
    pub async fn post_json(&self, path: &str, body: &Value) -> Result<Value, KitError> {
        let url = self
            .url(path)
            .map_err(|detail| KitError::LocalGatewayDown { detail })?;
        let response = self
            .send(self.request(reqwest::Method::POST, url).json(body))
            .await
            .map_err(|detail| KitError::LocalGatewayDown { detail })?;
        if !response.status().is_success() {
            return Err(answered(response).await);
        }
        response
            .json()
            .await
            .map_err(|err| KitError::Protocol(err.to_string()))
    }
}

async fn answered(response: reqwest::Response) -> KitError {
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let text = |field: &str| {
        body.get(field)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    KitError::Answered {
        status,
        code: text("error"),
        detail: text("detail"),
    }
}

fn record_path(vault: &str, key: &str) -> String {
    format!(
        "/v1/vaults/{}/records/{}",
        encode_segment(vault),
        key.split('/')
            .map(encode_segment)
            .collect::<Vec<_>>()
            .join("/")
    )
}

/// Percent-encodes a path segment: everything but unreserved characters (RFC 3986).
fn encode_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_encoded_per_segment() {
        assert_eq!(
            record_path("v", "a b/ü?"),
            "/v1/vaults/v/records/a%20b/%C3%BC%3F"
        );
    }

    #[tokio::test]
    async fn a_gateway_that_never_started_is_local_gateway_down_for_writes() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::locate(Some(dir.path().to_path_buf())).unwrap();
        let kit = Kit::from_home(&home, "test");
        let result = kit
            .put("v", "k", b"x".to_vec(), &WriteOptions::default())
            .await;
        let WriteResult::LocalGatewayDown { detail } = result else {
            panic!("{result:?}")
        };
        assert!(detail.ends_with("nothing was sent"), "{detail}");
    }
}
