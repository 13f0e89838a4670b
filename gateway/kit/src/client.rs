//! [`Kit`]: a client of one local gateway, found through its state directory.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde::de::DeserializeOwned;

use crate::contract::{
    parse_timeout, CallAnswer, CallStateName, ChangePage, ErrorBody, ErrorCode, FeedChange,
    ListPage, ListedKey, WriteDone, DEFAULT_TIMEOUT, HEADER_CLASS, HEADER_IF_MATCH,
    HEADER_REQUEST_ID, HEADER_REVISION, HEADER_SOURCE, HEADER_STALE, HEADER_TIMEOUT, MAX_TIMEOUT,
    QUERY_VAULT,
};
use crate::http::{self, encode_segment, query, Answer, Call, Failure};
use crate::outcome::{KitError, ReadRecord, Settlement, WriteResult};

/// How long the kit waits for the gateway's answer beyond the call's own timeout, so the
/// gateway's answer (which it must give by the deadline) wins over the kit giving up.
const CLIENT_GRACE: Duration = Duration::from_secs(5);
/// The call timeout when the app names none (SPEC 5).
/// Admin and listing calls: answered from the gateway's memory or database.
const ADMIN_BOUND: Duration = Duration::from_secs(60);

/// The longest a change feed page waits for its first change (the API's bound).
pub const MAX_FEED_WAIT: Duration = Duration::from_secs(60);

/// A vault's change feed on the local gateway, followed page after page: each change once, in
/// revision order, from a cursor the app may keep (and give back after a restart, its own or
/// the gateway's, to lose nothing).
#[derive(Debug, Clone)]
pub struct ChangeFeed {
    kit: Kit,
    vault: String,
    cursor: u64,
    wait: Duration,
}

impl ChangeFeed {
    /// The feed of `vault` after revision `after` (0: from the start), each page waiting up to
    /// `wait` for news.
    pub fn new(kit: Kit, vault: &str, after: u64, wait: Duration) -> Self {
        ChangeFeed {
            kit,
            vault: vault.to_string(),
            cursor: after,
            wait,
        }
    }

    /// The revision the feed has reached: every change up to it was returned.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The next changes (none if `wait` passed with no news). On an error the cursor stays,
    /// so calling again (once the gateway is back, say) loses nothing and repeats nothing.
    pub async fn next(&mut self) -> Result<Vec<FeedChange>, KitError> {
        let page = self
            .kit
            .changes(&self.vault, self.cursor, None, self.wait)
            .await?;
        // A page never goes back (a copy's feed only moves forward), and nothing at or below
        // the cursor is given twice.
        let changes: Vec<FeedChange> = page
            .changes
            .into_iter()
            .filter(|c| c.revision > self.cursor)
            .collect();
        self.cursor = self.cursor.max(page.next);
        Ok(changes)
    }
}

/// Options of one write.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    /// Compare-and-swap: the revision the record must have (0: must not exist).
    pub if_revision: Option<u64>,
    /// The write's request id (a UUIDv7). The kit makes one when this is `None`, so every
    /// write it sends carries an id it can report.
    pub request_id: Option<String>,
    /// Seconds the write may take, as sent in `X-Ferry-Timeout` (the gateway checks it).
    pub timeout: Option<String>,
    /// How long this app waits for the answer before giving up on it (the write then is
    /// `OutcomeUnknown`, and the gateway still carries it through and remembers it). Default:
    /// the timeout plus a few seconds, so the gateway's own answer comes first.
    pub client_timeout: Option<Duration>,
    /// Sends `X-Ferry-Class: background`: a bulk import or other work that may wait behind
    /// apps' writes at the owner (never more than its aging time, 10 s by default).
    pub background: bool,
}

/// How [`Kit::put_retrying`] and [`Kit::delete_retrying`] retry `busy` and `rate_limited`.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// The whole budget: no attempt starts, and no wait runs, past it.
    pub within: Duration,
    /// The first wait when the owner gave no `Retry-After`; it doubles each time.
    pub first_backoff: Duration,
    /// The longest wait between two attempts.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            within: DEFAULT_TIMEOUT,
            first_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// A read straight from a trusted peer's gateway, for when the local gateway is down (SPEC 9,
/// last point). The gateway crate provides one (it needs QUIC and the home's trust store,
/// which the kit itself does not link).
pub trait ReadAround: Send + Sync + std::fmt::Debug {
    /// Reads `key` of `vault` from a peer, as this machine's node, within `timeout`.
    fn get(
        &self,
        app: String,
        vault: String,
        key: String,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<AroundRead, AroundError>> + Send + 'static>>;
}

/// Why a read around the local gateway gave no record. Reads are safe to repeat: each case may
/// be tried again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AroundError {
    /// The vault name or the key is one the gateway would refuse (`detail` says why); no peer
    /// was asked. Correct it: the local gateway would answer 400 for it too.
    #[error("{detail}")]
    Invalid { detail: String },
    /// No trusted peer's gateway gave an answer (or there was none to ask); `detail` says what
    /// each one did. Start the local gateway, or try again once a peer is reachable.
    #[error("{detail}")]
    Unanswered { detail: String },
}

/// What a read around the local gateway found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AroundRead {
    Found(ReadRecord),
    /// The vault has no such record, as far as `source` knows.
    NotFound {
        source: String,
    },
}

/// Where the local gateway listens, and the token it wants.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Endpoint {
    addr: SocketAddr,
    token: String,
}

/// A client of the local gateway whose state directory is `home`, calling as `app`.
#[derive(Debug, Clone)]
pub struct Kit {
    home: PathBuf,
    app: String,
    endpoint: Arc<Mutex<Option<Endpoint>>>,
    around: Option<Arc<dyn ReadAround>>,
}

/// Where a gateway keeps its state when neither `--home` nor `FERRY_HOME` says: `ferry` in the
/// local (not roaming) data folder, since a node key is this machine's identity and must not
/// follow the user to another machine. The same folder as the data folder on Linux and macOS;
/// `%LOCALAPPDATA%` on Windows. `None` where the platform names no such folder.
pub fn default_home() -> Option<PathBuf> {
    Some(dirs::data_local_dir()?.join("ferry"))
}

impl Kit {
    /// A client of the gateway whose state directory is `home`. Never fails: a gateway that is
    /// not running is reported by each call.
    pub fn from_home(home: impl Into<PathBuf>, app: &str) -> Self {
        Self {
            home: home.into(),
            app: app.to_string(),
            endpoint: Arc::new(Mutex::new(None)),
            around: None,
        }
    }

    /// A client of the gateway in `$FERRY_HOME`, else in [`default_home`].
    pub fn from_default_home(app: &str) -> Option<Self> {
        let home = match std::env::var_os("FERRY_HOME") {
            Some(home) => PathBuf::from(home),
            None => default_home()?,
        };
        Some(Self::from_home(home, app))
    }

    /// Reads go around a stopped local gateway through `around`.
    pub fn with_read_around(mut self, around: Arc<dyn ReadAround>) -> Self {
        self.around = Some(around);
        self
    }

    /// The state directory this kit calls through.
    pub fn home(&self) -> &Path {
        &self.home
    }

    fn down(&self, why: Unreachable) -> GatewayDown {
        GatewayDown {
            home: self.home.clone(),
            why,
        }
    }

    /// The endpoint as last read from the home (read now if never).
    fn endpoint(&self) -> Result<Endpoint, GatewayDown> {
        let mut cached = self
            .endpoint
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(endpoint) = cached.as_ref() {
            return Ok(endpoint.clone());
        }
        let endpoint = self.read_endpoint()?;
        *cached = Some(endpoint.clone());
        Ok(endpoint)
    }

    /// `api.addr` and `local-token` as they are on disk now.
    fn read_endpoint(&self) -> Result<Endpoint, GatewayDown> {
        let addr = std::fs::read_to_string(self.home.join("api.addr"))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .ok_or_else(|| self.down(Unreachable::NoAddress))?;
        let token = std::fs::read_to_string(self.home.join("local-token"))
            .map(|text| text.trim().to_string())
            .map_err(|source| self.down(Unreachable::NoToken { source }))?;
        Ok(Endpoint { addr, token })
    }

    /// One exchange. A refused connect is tried once more if the home names another address
    /// now (the gateway restarted): nothing was sent the first time, so that is safe.
    async fn call(
        &self,
        method: Method,
        path_and_query: String,
        headers: Vec<(&'static str, String)>,
        body: Bytes,
        bound: Duration,
    ) -> Result<Answer, CallFailure> {
        let mut endpoint = self.endpoint().map_err(CallFailure::Down)?;
        let mut retried = false;
        loop {
            let call = Call {
                method: method.clone(),
                path_and_query: path_and_query.clone(),
                headers: headers.clone(),
                body: body.clone(),
                token: &endpoint.token,
                app: &self.app,
            };
            match http::exchange(endpoint.addr, call, bound).await {
                Ok(answer) => return Ok(answer),
                Err(Failure::NotConnected { addr, source }) => {
                    let fresh = self.read_endpoint().ok();
                    *self
                        .endpoint
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner()) = fresh.clone();
                    match fresh {
                        Some(fresh) if !retried && fresh != endpoint => {
                            endpoint = fresh;
                            retried = true;
                        }
                        _ => {
                            return Err(CallFailure::Down(
                                self.down(Unreachable::NotConnected { addr, source }),
                            ))
                        }
                    }
                }
                Err(Failure::Unbuildable { detail }) => {
                    return Err(CallFailure::Unbuildable { detail })
                }
                Err(Failure::AfterConnect { detail }) => {
                    return Err(CallFailure::Broken { detail })
                }
            }
        }
    }

    /// Writes `value` under `key`.
    pub async fn put(
        &self,
        vault: &str,
        key: &str,
        value: impl Into<Bytes>,
        options: &WriteOptions,
    ) -> WriteResult {
        self.write(Method::PUT, vault, key, value.into(), options)
            .await
    }

    /// Deletes `key`.
    pub async fn delete(&self, vault: &str, key: &str, options: &WriteOptions) -> WriteResult {
        self.write(Method::DELETE, vault, key, Bytes::new(), options)
            .await
    }

    /// [`Kit::put`], sent again under the same request id while the owner answers `busy` or
    /// `rate_limited` (and only then: those two certify the write was not carried out), after
    /// the owner's `Retry-After` or a doubling backoff with jitter, within `policy.within`.
    /// Every other result is returned as it came, `outcome_unknown` above all: that one is
    /// settled, never sent again.
    pub async fn put_retrying(
        &self,
        vault: &str,
        key: &str,
        value: impl Into<Bytes>,
        options: &WriteOptions,
        policy: RetryPolicy,
    ) -> WriteResult {
        self.retrying(Method::PUT, vault, key, value.into(), options, policy)
            .await
    }

    /// [`Kit::delete`] with [`Kit::put_retrying`]'s retries.
    pub async fn delete_retrying(
        &self,
        vault: &str,
        key: &str,
        options: &WriteOptions,
        policy: RetryPolicy,
    ) -> WriteResult {
        self.retrying(Method::DELETE, vault, key, Bytes::new(), options, policy)
            .await
    }

    async fn retrying(
        &self,
        method: Method,
        vault: &str,
        key: &str,
        body: Bytes,
        options: &WriteOptions,
        policy: RetryPolicy,
    ) -> WriteResult {
        let started = crate::clock::now();
        let deadline = started + policy.within;
        let mut options = options.clone();
        // One id for every attempt: the owner runs it at most once, whichever attempt lands.
        let request_id = options
            .request_id
            .get_or_insert_with(|| uuid::Uuid::now_v7().hyphenated().to_string())
            .clone();
        // A timeout the gateway would refuse is refused here the same way: nothing sent.
        let asked = match options.timeout.as_deref() {
            None => None,
            Some(raw) => match parse_timeout(raw) {
                Some(asked) => Some(asked),
                None => {
                    return WriteResult::Invalid {
                        status: 400,
                        code: ErrorCode::BadRequest,
                        detail: format!(
                            "timeout {raw:?} is not a decimal number of seconds greater than 0 and at most 600; nothing was sent"
                        ),
                    }
                }
            },
        };
        let mut backoff = policy.first_backoff;
        loop {
            let left = deadline.saturating_duration_since(crate::clock::now());
            // Each attempt's own timeout ends with the budget (so the last one cannot overrun),
            // and is one the gateway accepts: at most MAX_TIMEOUT, at least a millisecond.
            let attempt_timeout = asked
                .map_or(left, |asked| asked.min(left))
                .clamp(Duration::from_millis(1), MAX_TIMEOUT);
            let mut attempt = options.clone();
            attempt.timeout = Some(format!("{:.3}", attempt_timeout.as_secs_f64()));
            let result = self
                .write(method.clone(), vault, key, body.clone(), &attempt)
                .await;
            let Some(retry_after) = result.may_resend_after() else {
                return result;
            };
            let wait = retry_after.max(backoff) + jitter(&request_id, backoff);
            backoff = (backoff * 2).min(policy.max_backoff);
            let now = crate::clock::now();
            // The wait and a useful attempt after it must fit (a millisecond is no attempt).
            if now + wait + Duration::from_millis(10) >= deadline {
                return result;
            }
            tokio::time::sleep(wait).await;
        }
    }

    async fn write(
        &self,
        method: Method,
        vault: &str,
        key: &str,
        body: Bytes,
        options: &WriteOptions,
    ) -> WriteResult {
        let request_id = options
            .request_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().hyphenated().to_string());
        let mut headers = vec![(HEADER_REQUEST_ID, request_id.clone())];
        if let Some(revision) = options.if_revision {
            headers.push((HEADER_IF_MATCH, revision.to_string()));
        }
        if let Some(timeout) = &options.timeout {
            headers.push((HEADER_TIMEOUT, timeout.clone()));
        }
        if options.background {
            headers.push((HEADER_CLASS, "background".to_string()));
        }
        let bound = options.client_timeout.unwrap_or_else(|| {
            options
                .timeout
                .as_deref()
                .and_then(parse_timeout)
                .unwrap_or(DEFAULT_TIMEOUT)
                + CLIENT_GRACE
        });
        let answer = match self
            .call(method, record_path(vault, key), headers, body, bound)
            .await
        {
            Ok(answer) => answer,
            Err(CallFailure::Down(down)) => {
                return WriteResult::LocalGatewayDown {
                    detail: down.to_string(),
                }
            }
            Err(CallFailure::Unbuildable { detail }) => {
                return WriteResult::Invalid {
                    status: 400,
                    code: ErrorCode::BadRequest,
                    detail: format!("{detail}; nothing was sent"),
                }
            }
            // A byte may have reached the gateway: from here on, never "nothing was sent".
            Err(CallFailure::Broken { detail }) => {
                return WriteResult::OutcomeUnknown {
                    request_id,
                    vault: vault.to_string(),
                    owner: None,
                    detail: format!(
                        "the call to the local gateway ended without an answer ({detail}); \
                         settle it by its request id"
                    ),
                }
            }
        };
        write_result(answer, request_id, vault)
    }

    /// Asks what became of a write. `vault` (when the app knows it) lets the gateway ask the
    /// owner even if it has no memory of the call; `wait` waits while it is still running.
    pub async fn settle(
        &self,
        request_id: &str,
        vault: Option<&str>,
        wait: Option<Duration>,
    ) -> Result<Settlement, KitError> {
        let mut pairs = Vec::new();
        if let Some(vault) = vault {
            pairs.push((QUERY_VAULT, vault.to_string()));
        }
        if let Some(wait) = wait.filter(|wait| !wait.is_zero()) {
            // At least a millisecond: "0.000" would be refused as no wait at all.
            let seconds = wait.max(Duration::from_millis(1)).as_secs_f64().min(600.0);
            pairs.push(("wait", format!("{seconds:.3}")));
        }
        let path = format!("/v1/calls/{}{}", encode_segment(request_id), query(&pairs));
        let bound = wait.unwrap_or_default() + ADMIN_BOUND;
        let answer = match self
            .call(Method::GET, path, Vec::new(), Bytes::new(), bound)
            .await
        {
            Ok(answer) => answer,
            // A gateway that cannot be asked says nothing about the write: its outcome is
            // still unknown (never "nothing was sent", which would invite a second write).
            Err(CallFailure::Down(down)) => {
                return Ok(Settlement::Unavailable {
                    detail: format!(
                        "{}; the write's outcome is still unknown: settle it again once the gateway is back",
                        down.headline()
                    ),
                })
            }
            Err(failure) => return Err(failure.into_kit_error()),
        };
        if answer.status.is_success() {
            let call: CallAnswer = parse(&answer)?;
            return Ok(settlement(call));
        }
        let error = error_body(&answer)?;
        Ok(match (answer.status.as_u16(), &error.error) {
            (503, _) => Settlement::Unavailable {
                detail: error.detail,
            },
            (404, ErrorCode::UnknownCall) => Settlement::NeverSent {
                detail: error.detail,
            },
            (status, code) => {
                return Err(KitError::Answered {
                    status,
                    code: code.clone(),
                    detail: error.detail,
                })
            }
        })
    }

    /// Reads one record. When the local gateway cannot be reached and a [`ReadAround`] is set,
    /// reads it straight from a trusted peer's gateway (`source` `owner`, or `replica:<label>`
    /// with `stale`).
    pub async fn get(&self, vault: &str, key: &str) -> Result<ReadRecord, KitError> {
        let answer = match self
            .call(
                Method::GET,
                record_path(vault, key),
                Vec::new(),
                Bytes::new(),
                DEFAULT_TIMEOUT + CLIENT_GRACE,
            )
            .await
        {
            Ok(answer) => answer,
            Err(CallFailure::Down(why)) => return self.get_around(vault, key, why).await,
            Err(other) => return Err(other.into_kit_error()),
        };
        if !answer.status.is_success() {
            return Err(answered(&answer));
        }
        let revision = answer
            .header(HEADER_REVISION)
            .and_then(|r| r.parse().ok())
            .ok_or_else(|| KitError::Protocol {
                detail: "a record came without X-Ferry-Revision".into(),
            })?;
        Ok(ReadRecord {
            revision,
            source: answer.header(HEADER_SOURCE).unwrap_or_default().to_string(),
            stale: answer.header(HEADER_STALE) == Some("true"),
            value: answer.body.to_vec(),
        })
    }

    async fn get_around(
        &self,
        vault: &str,
        key: &str,
        down: GatewayDown,
    ) -> Result<ReadRecord, KitError> {
        let Some(around) = &self.around else {
            return Err(KitError::LocalGatewayDown {
                detail: down.to_string(),
            });
        };
        match around
            .get(
                self.app.clone(),
                vault.to_string(),
                key.to_string(),
                DEFAULT_TIMEOUT,
            )
            .await
        {
            Ok(AroundRead::Found(record)) => Ok(record),
            Ok(AroundRead::NotFound { source }) => Err(KitError::Answered {
                status: 404,
                code: ErrorCode::NotFound,
                detail: format!(
                    "there is no record {key:?} in this vault (answered by {source}; the local gateway is down)"
                ),
            }),
            // What the local gateway would have answered: the app's input is wrong.
            Err(AroundError::Invalid { detail }) => Err(KitError::Answered {
                status: 400,
                code: ErrorCode::BadRequest,
                detail,
            }),
            Err(AroundError::Unanswered { detail }) => Err(KitError::LocalGatewayDown {
                detail: format!(
                    "{} and no trusted peer could answer either ({detail})",
                    down.headline()
                ),
            }),
        }
    }

    /// Every key with `prefix`, page by page (or at most `limit`).
    pub async fn list(
        &self,
        vault: &str,
        prefix: &str,
        limit: Option<usize>,
    ) -> Result<Vec<ListedKey>, KitError> {
        let mut keys = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut pairs = vec![("prefix", prefix.to_string())];
            if let Some(after) = &after {
                pairs.push(("after", after.clone()));
            }
            let path = format!(
                "/v1/vaults/{}/records{}",
                encode_segment(vault),
                query(&pairs)
            );
            let page: ListPage = self.get_typed(&path).await?;
            for key in page.keys {
                keys.push(key);
                if limit.is_some_and(|limit| keys.len() >= limit) {
                    return Ok(keys);
                }
            }
            match page.next_after {
                Some(next) if page.more => after = Some(next),
                _ => return Ok(keys),
            }
        }
    }

    /// One page of `vault`'s change feed on the local gateway (its own copy: owned or
    /// replicated): the changes after revision `after`, oldest first, at once if there are any,
    /// else as soon as one is committed there, waiting up to `wait` (at most a minute). Resume
    /// with `after = page.next`. See [`ChangeFeed`] for the loop.
    pub async fn changes(
        &self,
        vault: &str,
        after: u64,
        limit: Option<u32>,
        wait: Duration,
    ) -> Result<ChangePage, KitError> {
        let wait = wait.min(MAX_FEED_WAIT);
        let mut pairs = vec![("after", after.to_string())];
        if let Some(limit) = limit {
            pairs.push(("limit", limit.to_string()));
        }
        if !wait.is_zero() {
            pairs.push(("wait", format!("{:.3}", wait.as_secs_f64())));
        }
        let path = format!(
            "/v1/vaults/{}/changes{}",
            encode_segment(vault),
            query(&pairs)
        );
        let answer = self
            .call(
                Method::GET,
                path,
                Vec::new(),
                Bytes::new(),
                wait + ADMIN_BOUND,
            )
            .await
            .map_err(CallFailure::into_kit_error)?;
        if !answer.status.is_success() {
            return Err(answered(&answer));
        }
        parse(&answer)
    }

    /// A call that is safe to repeat and must succeed: its answer, or the error it was.
    async fn successful(
        &self,
        method: Method,
        path: &str,
        headers: Vec<(&'static str, String)>,
        body: Bytes,
    ) -> Result<Answer, KitError> {
        let answer = self
            .call(method, path.to_string(), headers, body, ADMIN_BOUND)
            .await
            .map_err(CallFailure::into_kit_error)?;
        if !answer.status.is_success() {
            return Err(answered(&answer));
        }
        Ok(answer)
    }

    /// GET a path and decode its JSON answer as `T`.
    pub async fn get_typed<T: DeserializeOwned>(&self, path: &str) -> Result<T, KitError> {
        let answer = self
            .successful(Method::GET, path, Vec::new(), Bytes::new())
            .await?;
        parse(&answer)
    }

    /// GET a path as text (for `/metrics`).
    pub async fn get_text(&self, path: &str) -> Result<String, KitError> {
        let answer = self
            .successful(Method::GET, path, Vec::new(), Bytes::new())
            .await?;
        String::from_utf8(answer.body.to_vec()).map_err(|_| KitError::Protocol {
            detail: "the answer is not UTF-8 text".into(),
        })
    }

    /// POST `body` (one of [`crate::admin`]'s requests) to an admin path; its answer as `T`.
    pub async fn post_typed<B: serde::Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, KitError> {
        let bytes = serde_json::to_vec(body).map_err(|err| KitError::Invalid {
            detail: err.to_string(),
        })?;
        let headers = vec![("content-type", "application/json".to_string())];
        let answer = self
            .successful(Method::POST, path, headers, Bytes::from(bytes))
            .await?;
        parse(&answer)
    }
}

/// Why the local gateway could not be reached. Not a byte of the call left.
#[derive(Debug, thiserror::Error)]
enum Unreachable {
    /// The home has no `api.addr` (or not one that parses): the gateway is not running, or
    /// never ran with this home.
    #[error("it has not written api.addr")]
    NoAddress,
    /// `local-token` is missing or unreadable.
    #[error("its local-token cannot be read: {source}")]
    NoToken { source: std::io::Error },
    /// No connection could be opened to the address in `api.addr` (the gateway stopped).
    #[error("connecting to {addr}: {source}")]
    NotConnected {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The local gateway of `home` could not be reached, and what to do about it. Its text is
/// the one apps see in `LocalGatewayDown`.
#[derive(Debug)]
struct GatewayDown {
    home: PathBuf,
    why: Unreachable,
}

impl GatewayDown {
    /// What happened and what to do, without "nothing was sent" (a read around goes on to say
    /// what the peers did).
    fn headline(&self) -> String {
        let home = self.home.display();
        format!(
            "no gateway answers for {home} ({}); start it with `ferry serve --home {home}`",
            self.why
        )
    }
}

impl std::fmt::Display for GatewayDown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; nothing was sent", self.headline())
    }
}

/// Why an exchange with the local gateway gave no answer.
#[derive(Debug)]
enum CallFailure {
    /// Not a byte left: the gateway could not be reached.
    Down(GatewayDown),
    /// The app's input cannot be sent; nothing left.
    Unbuildable { detail: String },
    /// Connected, then no whole answer: the request may have been read.
    Broken { detail: String },
}

impl CallFailure {
    /// For calls that are safe to repeat (everything but a write).
    fn into_kit_error(self) -> KitError {
        match self {
            Self::Down(down) => KitError::LocalGatewayDown {
                detail: down.to_string(),
            },
            Self::Unbuildable { detail } => KitError::Invalid { detail },
            Self::Broken { detail } => KitError::Broken { detail },
        }
    }
}

/// The one place a write's HTTP answer becomes a [`WriteResult`]. Anything it does not
/// recognise is `OutcomeUnknown`: the kit never guesses "nothing happened".
fn write_result(answer: Answer, request_id: String, vault: &str) -> WriteResult {
    let status = answer.status.as_u16();
    let unknown = |detail: String| WriteResult::OutcomeUnknown {
        request_id: request_id.clone(),
        vault: vault.to_string(),
        owner: None,
        detail,
    };
    if status == 200 {
        return match serde_json::from_slice::<WriteDone>(&answer.body) {
            Ok(done) => WriteResult::Done {
                revision: done.revision,
                request_id,
            },
            Err(err) => unknown(format!(
                "the gateway answered 200 without a revision ({err}); settle it by its request id"
            )),
        };
    }
    let Ok(error) = serde_json::from_slice::<ErrorBody>(&answer.body) else {
        return unknown(format!(
            "the gateway answered {status} without Ferry's error body; settle it by its request id"
        ));
    };
    let retry_after = answer
        .header("retry-after")
        .and_then(|s| s.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    match (status, &error.error) {
        (503, ErrorCode::NotCarriedOut) => WriteResult::NotCarriedOut {
            request_id,
            reason: error.reason.unwrap_or_default(),
            detail: error.detail,
        },
        (503, ErrorCode::Unavailable) => WriteResult::Unavailable {
            request_id,
            detail: error.detail,
        },
        (502, ErrorCode::OutcomeUnknown) => WriteResult::OutcomeUnknown {
            request_id,
            vault: vault.to_string(),
            owner: error.owner,
            detail: error.detail,
        },
        (400, ErrorCode::BadRequest | ErrorCode::StaleRequestId)
        | (401, ErrorCode::Unauthorized)
        | (404, ErrorCode::UnknownVault)
        | (409, ErrorCode::VaultAmbiguous) => WriteResult::Invalid {
            status,
            code: error.error,
            detail: error.detail,
        },
        (
            _,
            ErrorCode::Conflict
            | ErrorCode::NotFound
            | ErrorCode::Forbidden
            | ErrorCode::RateLimited
            | ErrorCode::Busy
            | ErrorCode::TicketRefused
            | ErrorCode::Refused,
        ) => WriteResult::Refused {
            status,
            code: error.error,
            detail: error.detail,
            request_id,
            current_revision: error.current_revision,
            retry_after,
        },
        // A code this kit does not know, or an internal error: it cannot say nothing ran.
        _ => unknown(format!(
            "the gateway answered {status} {}: {}; settle it by its request id",
            error.error, error.detail
        )),
    }
}

/// Up to a quarter of `backoff`, from the request id's random bits and the backoff, so callers
/// refused together do not come back together.
fn jitter(request_id: &str, backoff: Duration) -> Duration {
    let seed = request_id
        .bytes()
        .fold(backoff.as_millis() as u64, |acc, b| {
            acc.wrapping_mul(31).wrapping_add(u64::from(b))
        });
    let quarter = (backoff.as_millis() as u64 / 4).max(1);
    Duration::from_millis(seed % quarter)
}

fn settlement(call: CallAnswer) -> Settlement {
    match call.state {
        CallStateName::Done => match (call.status, call.revision) {
            (Some(200), Some(revision)) => Settlement::Done { revision },
            (status, _) => Settlement::Refused {
                status: status.unwrap_or_default(),
                code: call.error.unwrap_or(ErrorCode::Other),
                detail: call.detail.unwrap_or_default(),
            },
        },
        CallStateName::NotCarriedOut => Settlement::NotCarriedOut {
            reason: call.reason.unwrap_or_default(),
        },
        // Not final (or not known to this kit): ask again.
        CallStateName::Running | CallStateName::Unknown | CallStateName::Other => {
            Settlement::Running
        }
    }
}

fn parse<T: DeserializeOwned>(answer: &Answer) -> Result<T, KitError> {
    serde_json::from_slice(&answer.body).map_err(|err| KitError::Protocol {
        detail: format!("{err} (status {})", answer.status),
    })
}

fn error_body(answer: &Answer) -> Result<ErrorBody, KitError> {
    serde_json::from_slice(&answer.body).map_err(|_| KitError::Protocol {
        detail: format!(
            "the gateway answered {} without Ferry's error body",
            answer.status
        ),
    })
}

fn answered(answer: &Answer) -> KitError {
    match error_body(answer) {
        Ok(error) => KitError::Answered {
            status: answer.status.as_u16(),
            code: error.error,
            detail: error.detail,
        },
        Err(err) => err,
    }
}

/// `/v1/vaults/{vault}/records/{key}`, each one segment (a key's `/` is escaped).
fn record_path(vault: &str, key: &str) -> String {
    format!(
        "/v1/vaults/{}/records/{}",
        encode_segment(vault),
        encode_segment(key)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_gateway_that_never_started_is_local_gateway_down_for_writes() {
        let dir = tempfile::tempdir().unwrap();
        let kit = Kit::from_home(dir.path(), "test");
        let result = kit.put("v", "k", &b"x"[..], &WriteOptions::default()).await;
        let WriteResult::LocalGatewayDown { detail } = result else {
            panic!("{result:?}")
        };
        assert!(detail.ends_with("nothing was sent"), "{detail}");
    }

    /// A read around that always fails with `error`.
    #[derive(Debug)]
    struct Failing(AroundError);

    impl ReadAround for Failing {
        fn get(
            &self,
            _: String,
            _: String,
            _: String,
            _: Duration,
        ) -> Pin<Box<dyn Future<Output = Result<AroundRead, AroundError>> + Send + 'static>>
        {
            let error = self.0.clone();
            Box::pin(async move { Err(error) })
        }
    }

    #[tokio::test]
    async fn a_read_around_says_what_the_peers_did_or_what_was_wrong_with_the_input() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().display().to_string();
        let plain = Kit::from_home(dir.path(), "test");
        let Err(KitError::LocalGatewayDown { detail }) = plain.get("v", "k").await else {
            panic!("no gateway and no read around")
        };
        assert_eq!(
            detail,
            format!(
                "no gateway answers for {home} (it has not written api.addr); start it with \
                 `ferry serve --home {home}`; nothing was sent"
            )
        );

        let around = plain
            .clone()
            .with_read_around(Arc::new(Failing(AroundError::Unanswered {
                detail: "a did not answer".into(),
            })));
        let Err(KitError::LocalGatewayDown { detail }) = around.get("v", "k").await else {
            panic!("no peer answered")
        };
        assert_eq!(
            detail,
            format!(
                "no gateway answers for {home} (it has not written api.addr); start it with \
                 `ferry serve --home {home}` and no trusted peer could answer either \
                 (a did not answer)"
            )
        );

        let invalid = plain.with_read_around(Arc::new(Failing(AroundError::Invalid {
            detail: "the record key is empty".into(),
        })));
        assert_eq!(
            invalid.get("v", "").await,
            Err(KitError::Answered {
                status: 400,
                code: ErrorCode::BadRequest,
                detail: "the record key is empty".into(),
            })
        );
    }

    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status: hyper::StatusCode::from_u16(status).unwrap(),
            headers: Default::default(),
            body: Bytes::from(body.to_string()),
        }
    }

    #[test]
    fn an_answer_the_kit_cannot_read_is_never_nothing_was_sent() {
        for (status, body) in [
            (200, "{}"),
            (500, r#"{"error":"internal","detail":"x"}"#),
            (503, "<html>proxy</html>"),
            (418, r#"{"error":"brand_new","detail":"x"}"#),
        ] {
            let result = write_result(answer(status, body), "id".into(), "v");
            assert!(
                matches!(result, WriteResult::OutcomeUnknown { .. }),
                "{status} {body}: {result:?}"
            );
        }
    }

    /// A newer owner's refusal this gateway cannot name (`422 refused`) is still the owner's
    /// answer: refused, not carried out; never unknown, never "nothing was sent".
    #[test]
    fn a_refusal_the_gateway_could_not_name_is_a_refusal() {
        let body = r#"{"error":"refused","detail":"refused with a code from a newer owner"}"#;
        let result = write_result(answer(422, body), "id".into(), "v");
        let WriteResult::Refused { status, code, .. } = &result else {
            panic!("{result:?}")
        };
        assert_eq!((*status, code), (422, &ErrorCode::Refused));
    }
}
