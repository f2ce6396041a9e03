//! The server in-process and the tests' HTTP client (formerly
//! `tests/http_support/mod.rs`).
//!
//! - [`start_server`] starts the real server in-process, exactly as `sluice
//!   server` starts it (`sluice_server::server::start`), on ephemeral
//!   loopback ports over a data directory the caller owns, with `iggy`/`iggy`,
//!   a fast reconciler and a short failed-login delay.
//! - [`Api`] is the one HTTP client of the tests, for an in-process server or
//!   the binary alike: it logs in through `sluice_cli::login` (the CLI's own
//!   login, typed [`LoginError`]) and reduces every answer to a [`Reply`].
//!
//! Invariant: a request that gets no answer panics (the server under test is
//! always expected to answer); an answer of any status is returned as is.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sluice_server::config::ServerConfig;
use sluice_server::http::auth::RootSource;
use sluice_server::server::{RunningServer, ServeOptions, ServerError, start};
use sluice_storage::{DiskStorage, DurableStorage};

pub use sluice_cli::login::LoginError;

pub use crate::{ROOT_PASSWORD, ROOT_USER};

/// Starts a server on `data_dir` with `iggy`/`iggy`, a fast reconciler and a
/// short failed-login delay.
pub async fn start_server(data_dir: &Path) -> RunningServer {
    start_server_with(data_dir, |_| {}).await
}

pub async fn start_server_with(
    data_dir: &Path,
    adjust: impl FnOnce(&mut ServerConfig),
) -> RunningServer {
    start_server_on(Arc::new(DiskStorage::new()), data_dir, adjust).await
}

/// As `start_server_with`, on any storage (e.g. a `SimStorage` with faults).
pub async fn start_server_on(
    storage: Arc<dyn DurableStorage>,
    data_dir: &Path,
    adjust: impl FnOnce(&mut ServerConfig),
) -> RunningServer {
    try_start_server_on(storage, data_dir, adjust)
        .await
        .expect("server starts")
}

/// As `start_server_on`, returning why the server did not start.
pub async fn try_start_server_on(
    storage: Arc<dyn DurableStorage>,
    data_dir: &Path,
    adjust: impl FnOnce(&mut ServerConfig),
) -> Result<RunningServer, ServerError> {
    let mut config = ServerConfig {
        data_dir: data_dir.to_path_buf(),
        ..ServerConfig::default()
    };
    config.http.address = "127.0.0.1:0".parse().unwrap();
    config.tcp.address = "127.0.0.1:0".parse().unwrap();
    config.reconciler.period = Duration::from_millis(20);
    config.auth.failed_login_delay = Duration::from_millis(20);
    adjust(&mut config);
    start(
        storage,
        ServeOptions {
            config,
            root: RootSource::DefaultIggy,
            seed: 7,
        },
    )
    .await
}

/// A raw HTTP client bound to one server and (after `login`) one token.
pub struct Api {
    pub base: String,
    pub client: reqwest::Client,
    pub token: Option<String>,
}

/// A response reduced to what the tests look at.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.text)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.text))
    }

    /// Asserts Iggy's error body shape and returns its `code`.
    pub fn error_code(&self) -> String {
        let body = self.json();
        assert!(body["id"].is_u64(), "error id missing: {body}");
        assert!(body["reason"].is_string(), "error reason missing: {body}");
        assert!(
            body.get("field").is_some(),
            "error field missing (null allowed): {body}"
        );
        body["code"].as_str().expect("error code").to_string()
    }
}

impl Api {
    /// A client of the server at `base` (`http://ip:port`), not logged in.
    pub fn at(base: impl Into<String>) -> Api {
        Api {
            base: base.into(),
            client: reqwest::Client::new(),
            token: None,
        }
    }

    /// A client of an in-process server, not logged in.
    pub fn new(server: &RunningServer) -> Api {
        Api::at(format!("http://{}", server.local_addr))
    }

    /// A client of an in-process server, logged in as `iggy`/`iggy`.
    pub async fn login(server: &RunningServer) -> Api {
        Api::new(server)
            .logged_in(ROOT_USER, ROOT_PASSWORD)
            .await
            .expect("root login")
    }

    /// This client with the token of a login as `username`.
    pub async fn logged_in(mut self, username: &str, password: &str) -> Result<Api, LoginError> {
        let url = reqwest::Url::parse(&format!("{}/users/login", self.base))
            .map_err(|_| LoginError::BadUrl(self.base.clone()))?;
        let token = sluice_cli::login::login(&self.client, url, username, password).await?;
        self.token = Some(token);
        Ok(self)
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Reply {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let response = req.send().await.expect("request reaches the server");
        Reply {
            status: response.status().as_u16(),
            headers: response.headers().clone(),
            text: response.text().await.expect("response body"),
        }
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(self.client.get(format!("{}{path}", self.base)))
            .await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.send(self.client.delete(format!("{}{path}", self.base)))
            .await
    }

    pub async fn post(&self, path: &str, body: Value) -> Reply {
        self.send(self.client.post(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub async fn put(&self, path: &str, body: Value) -> Reply {
        self.send(self.client.put(format!("{}{path}", self.base)).json(&body))
            .await
    }

    pub async fn post_raw(&self, path: &str, content_type: &str, body: Vec<u8>) -> Reply {
        self.send(
            self.client
                .post(format!("{}{path}", self.base))
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body),
        )
        .await
    }

    /// Creates stream `s` and topic `t` with `partitions` partitions.
    pub async fn create_stream_and_topic(&self, s: &str, t: &str, partitions: u32) {
        let r = self.post("/streams", serde_json::json!({"name": s})).await;
        assert_eq!(r.status, 200, "create stream: {}", r.text);
        let r = self
            .post(
                &format!("/streams/{s}/topics"),
                serde_json::json!({
                    "name": t,
                    "partitions_count": partitions,
                    "compression_algorithm": "none",
                    "message_expiry": 0,
                    "max_topic_size": 0,
                    "options": {"durability": "replicated", "consumer_offset_durability": "persisted"}
                }),
            )
            .await;
        assert_eq!(r.status, 200, "create topic: {}", r.text);
    }

    /// Sends `payloads` to partition 1 of `s`/`t`.
    pub async fn send_to(&self, s: &str, t: &str, payloads: &[&str]) -> Reply {
        use base64::Engine as _;
        let messages: Vec<Value> = payloads
            .iter()
            .map(|p| {
                serde_json::json!({
                    "id": 0,
                    "payload": base64::engine::general_purpose::STANDARD.encode(p),
                })
            })
            .collect();
        self.post(
            &format!("/streams/{s}/topics/{t}/messages"),
            serde_json::json!({
                "partitioning": {
                    "kind": "partition_id",
                    "value": base64::engine::general_purpose::STANDARD.encode(0u32.to_le_bytes()),
                },
                "messages": messages,
            }),
        )
        .await
    }

    /// Polls `s`/`t` partition 1 and returns `(offset, payload)` pairs.
    pub async fn poll(&self, s: &str, t: &str, query: &str) -> Vec<(u64, String)> {
        use base64::Engine as _;
        let r = self
            .get(&format!(
                "/streams/{s}/topics/{t}/messages?partition_id=0&{query}"
            ))
            .await;
        assert_eq!(r.status, 200, "poll {query}: {}", r.text);
        r.json()["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| {
                let payload = base64::engine::general_purpose::STANDARD
                    .decode(m["payload"].as_str().expect("payload"))
                    .expect("base64 payload");
                (
                    m["header"]["offset"].as_u64().expect("offset"),
                    String::from_utf8(payload).expect("utf-8 payload"),
                )
            })
            .collect()
    }

    /// Waits (bounded) until every obligation the status endpoint lists is applied.
    pub async fn wait_until_applied(&self, query: &str) -> Value {
        for _ in 0..500 {
            let r = self.get(&format!("/status/purge?{query}")).await;
            assert_eq!(r.status, 200, "status: {}", r.text);
            let body = r.json();
            let rows = body["partitions"].as_array().expect("rows");
            if !rows.is_empty()
                && rows
                    .iter()
                    .all(|row| row["obligation"]["state"] == "applied")
            {
                return body;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("purge cleanup did not reach applied within 10 s");
    }

    /// Polls `GET /status/obligations` until nothing is pending; returns the
    /// answers seen, first to last.
    pub async fn wait_until_no_obligation(&self) -> Vec<Value> {
        let mut seen = Vec::new();
        for _ in 0..500 {
            let r = self.get("/status/obligations").await;
            assert_eq!(r.status, 200, "status: {}", r.text);
            let body = r.json();
            let done = body["summary"]["pending"] == 0;
            seen.push(body);
            if done {
                return seen;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("obligations still pending after 10 s: {:?}", seen.last());
    }
}
