//! Logging in to a sluice server over HTTP (`POST /users/login`): the one
//! login every HTTP client of the CLI uses (`sluice status`, `sluice soak`,
//! `sluice bench`'s HTTP scenario).
//!
//! Invariants:
//! - The outcome is typed (`LoginError`), so each command words a failure
//!   its own way; nothing here prints or logs, and no error holds the
//!   password or the token.
//! - A token is returned only from a 2xx answer whose JSON carries
//!   `access_token.token`, the shape Iggy's `IdentityInfo` has.

use reqwest::StatusCode;
use serde_json::{Value, json};

/// Why a login gave no token.
#[derive(Debug)]
pub enum LoginError {
    /// The request failed or its answer could not be read.
    Transport(reqwest::Error),
    /// A non-2xx answer; `rejected` when the server refused the credentials.
    Refused {
        status: StatusCode,
        body: String,
        rejected: bool,
    },
    /// A 2xx answer that is not JSON.
    NotJson { status: StatusCode },
    /// A 2xx JSON answer without an access token.
    NoToken,
    /// The base URL gives no login URL.
    BadUrl(String),
}

impl std::fmt::Display for LoginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoginError::Transport(e) => write!(f, "login failed: no answer ({e})"),
            LoginError::Refused { status, body, .. } => {
                let cut: String = body.chars().take(300).collect();
                write!(f, "login failed: {} {cut}", status.as_u16())
            }
            LoginError::NotJson { status } => {
                write!(
                    f,
                    "login answered HTTP {status} with a body that is not JSON"
                )
            }
            LoginError::NoToken => write!(f, "login answer without a token"),
            LoginError::BadUrl(base) => write!(f, "no login URL under {base:?}"),
        }
    }
}

/// Logs in at `url` (the server's `/users/login`) and returns the token.
pub async fn login(
    client: &reqwest::Client,
    url: reqwest::Url,
    username: &str,
    password: &str,
) -> Result<String, LoginError> {
    let response = client
        .post(url)
        .json(&json!({"username": username, "password": password}))
        .send()
        .await
        .map_err(LoginError::Transport)?;
    let status = response.status();
    let body = response.text().await.map_err(LoginError::Transport)?;
    if !status.is_success() {
        let code = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["code"].as_str().map(str::to_string));
        let rejected = matches!(
            code.as_deref(),
            Some("invalid_credentials" | "invalid_username" | "invalid_password")
        ) || status == StatusCode::UNAUTHORIZED;
        return Err(LoginError::Refused {
            status,
            body,
            rejected,
        });
    }
    let identity: Value =
        serde_json::from_str(&body).map_err(|_| LoginError::NotJson { status })?;
    identity["access_token"]["token"]
        .as_str()
        .map(str::to_string)
        .ok_or(LoginError::NoToken)
}

/// `login` at `{base}/users/login` with the root user's default credentials
/// (`iggy`/`iggy`), as the soak's and the bench's servers are started.
pub async fn login_default_root(
    client: &reqwest::Client,
    base: &str,
) -> Result<String, LoginError> {
    let url = reqwest::Url::parse(&format!("{base}/users/login"))
        .map_err(|_| LoginError::BadUrl(base.to_string()))?;
    login(
        client,
        url,
        sluice_server::http::auth::DEFAULT_ROOT_USERNAME,
        sluice_server::http::auth::DEFAULT_ROOT_PASSWORD,
    )
    .await
}
