//! `sluice status`: the purge status of a running server, as a table or as
//! the raw JSON of `GET /status/purge`; with `--obligations`, every pending
//! cleanup obligation of every kind (`GET /status/obligations`).
//!
//! It logs in with `POST /users/login`, asks the status route with the
//! filters, and logs out again (best effort).
//!
//! Credentials, first match wins: `--username`/`--password`; else
//! `SLUICE_ROOT_USERNAME`/`SLUICE_ROOT_PASSWORD`; else
//! `IGGY_ROOT_USERNAME`/`IGGY_ROOT_PASSWORD`; else
//! `--with-default-root-credentials` (`iggy`/`iggy`). The environment is read
//! exactly as `sluice server` reads it, so the same shell reaches the same
//! root user.
//!
//! Exit codes: 0 on success, 1 when the server cannot be reached, refuses the
//! credentials or the request, or does not answer JSON; 2 for usage errors
//! (bad flags, a bad URL, no credentials).
//!
//! Invariants:
//! - The password and the access token are never printed, not even in an
//!   error: messages name the URL (which may not carry credentials) and the
//!   server's error code and reason (which the server keeps free of secrets).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde_json::Value;

use crate::login::LoginError;
use sluice_server::http::auth::{DEFAULT_ROOT_PASSWORD, DEFAULT_ROOT_USERNAME, RootSource};
use sluice_server::http::obligations::{KINDS, ObligationsStatus};
use sluice_server::http::status::{PurgeStatus, STATES};

/// Default server URL (the server's embedded default listen address).
pub const DEFAULT_URL: &str = "http://127.0.0.1:3000";
/// `last_error` is cut to this many characters in the table.
const LAST_ERROR_WIDTH: usize = 48;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// A failed login is slowed down by the server (up to 32 × its base delay),
/// so the request timeout leaves room for that.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Server base URL.
    #[arg(long, value_name = "URL", env = "SLUICE_URL", default_value = DEFAULT_URL)]
    url: String,
    /// Print the raw JSON answer instead of a table.
    #[arg(long)]
    json: bool,
    /// Every pending cleanup obligation of every kind (purges, deletions of
    /// streams, topics, partitions and groups): GET /status/obligations.
    #[arg(long, conflicts_with_all = ["stream_id", "topic_id", "state"])]
    obligations: bool,
    /// With --obligations: only this kind.
    #[arg(long, value_name = "KIND", value_parser = KINDS, requires = "obligations")]
    kind: Option<String>,
    /// Only partitions of this stream (id or name).
    #[arg(long, value_name = "ID")]
    stream_id: Option<String>,
    /// Only partitions of this topic (id or name; needs --stream-id).
    #[arg(long, value_name = "ID", requires = "stream_id")]
    topic_id: Option<String>,
    /// Only partitions whose obligation is in this state (`none`: never purged).
    #[arg(long, value_name = "STATE", value_parser = STATES)]
    state: Option<String>,
    /// Root username (with --password); overrides the environment.
    #[arg(
        long,
        requires = "password",
        conflicts_with = "with_default_root_credentials"
    )]
    username: Option<String>,
    /// Root password (with --username); overrides the environment.
    #[arg(
        long,
        requires = "username",
        conflicts_with = "with_default_root_credentials"
    )]
    password: Option<String>,
    /// Log in as iggy/iggy (unless the root credential environment variables
    /// are set), matching `sluice server --with-default-root-credentials`.
    #[arg(long)]
    with_default_root_credentials: bool,
}

/// Why `sluice status` failed, and so its exit code.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    /// Exit 2: the command line or the environment is wrong.
    Usage(String),
    /// Exit 1: the server could not be reached or refused.
    Server(String),
}

pub fn main(args: StatusArgs) -> ExitCode {
    let env = |key: &str| std::env::var(key).ok();
    match run(&args, &env) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(Failure::Usage(msg)) => {
            eprintln!("sluice status: {msg}");
            ExitCode::from(2)
        }
        Err(Failure::Server(msg)) => {
            eprintln!("sluice status: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// Credentials to log in with. Debug never shows the password.
#[derive(PartialEq, Eq)]
struct Credentials {
    username: String,
    password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

fn credentials(
    args: &StatusArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Credentials, Failure> {
    if let (Some(username), Some(password)) = (&args.username, &args.password) {
        return Ok(Credentials {
            username: username.clone(),
            password: password.clone(),
        });
    }
    match RootSource::from_env(env, args.with_default_root_credentials) {
        Ok(RootSource::Explicit { username, password }) => Ok(Credentials { username, password }),
        Ok(RootSource::DefaultIggy) => Ok(Credentials {
            username: DEFAULT_ROOT_USERNAME.to_string(),
            password: DEFAULT_ROOT_PASSWORD.to_string(),
        }),
        Ok(RootSource::StoredOrGenerated) => Err(Failure::Usage(
            "no credentials: pass --username and --password, set SLUICE_ROOT_USERNAME and \
             SLUICE_ROOT_PASSWORD (or IGGY_ROOT_USERNAME and IGGY_ROOT_PASSWORD), or use \
             --with-default-root-credentials"
                .to_string(),
        )),
        Err(e) => Err(Failure::Usage(e.to_string())),
    }
}

/// Parses the base URL: plain http, no credentials inside it.
fn base_url(raw: &str) -> Result<Url, Failure> {
    let url = Url::parse(raw)
        .map_err(|e| Failure::Usage(format!("--url {raw:?} is not a valid URL: {e}")))?;
    if url.scheme() != "http" {
        return Err(Failure::Usage(format!(
            "--url must be an http:// URL (got scheme {:?})",
            url.scheme()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Failure::Usage(
            "--url must not carry credentials; use --username/--password or the environment"
                .to_string(),
        ));
    }
    if url.cannot_be_a_base() || url.host().is_none() {
        return Err(Failure::Usage(format!("--url {raw:?} has no host")));
    }
    Ok(url)
}

/// `base` with `segments` appended to its path (keeps a path prefix, drops
/// any query or fragment).
fn endpoint(base: &Url, segments: &[&str]) -> Result<Url, Failure> {
    let mut url = base.clone();
    url.set_query(None);
    url.set_fragment(None);
    url.path_segments_mut()
        .map_err(|()| Failure::Usage(format!("--url {base} cannot take a path")))?
        .pop_if_empty()
        .extend(segments);
    Ok(url)
}

fn run(args: &StatusArgs, env: &dyn Fn(&str) -> Option<String>) -> Result<String, Failure> {
    let base = base_url(&args.url)?;
    let creds = credentials(args, env)?;
    let login_url = endpoint(&base, &["users", "login"])?;
    let logout_url = endpoint(&base, &["users", "logout"])?;
    let route = if args.obligations {
        "obligations"
    } else {
        "purge"
    };
    let what = format!("GET /status/{route}");
    let mut status_url = endpoint(&base, &["status", route])?;
    {
        let mut query = status_url.query_pairs_mut();
        if let Some(k) = &args.kind {
            query.append_pair("kind", k);
        }
        if let Some(s) = &args.stream_id {
            query.append_pair("stream_id", s);
        }
        if let Some(t) = &args.topic_id {
            query.append_pair("topic_id", t);
        }
        if let Some(s) = &args.state {
            query.append_pair("state", s);
        }
    }
    if status_url.query() == Some("") {
        status_url.set_query(None);
    }

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Server(format!("cannot start the async runtime: {e}")))?;
    let client = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .timeout(REQUEST_TIMEOUT)
        .build()
        .map_err(|e| Failure::Server(format!("cannot build the HTTP client: {e}")))?;
    let body = runtime.block_on(async {
        let token = login(&client, &base, &login_url, &creds).await?;
        let answer = fetch_status(&client, &base, &status_url, &token, &what).await;
        // Best effort: the token would expire anyway.
        let _ = client.delete(logout_url).bearer_auth(&token).send().await;
        answer
    })?;

    let json: Value = serde_json::from_str(&body).map_err(|e| {
        Failure::Server(format!(
            "{base} answered {what} with a body that is not JSON ({e}); is it a sluice server?"
        ))
    })?;
    if args.json {
        return Ok(body.trim_end().to_string());
    }
    let shape = |e: serde_json::Error| {
        Failure::Server(format!(
            "{base} answered {what} with JSON of an unexpected shape ({e}); is it a sluice server?"
        ))
    };
    if args.obligations {
        let status: ObligationsStatus = serde_json::from_value(json).map_err(shape)?;
        return Ok(render_obligations(&status, &base, args.kind.as_deref()));
    }
    let status: PurgeStatus = serde_json::from_value(json).map_err(shape)?;
    Ok(render(&status, &base, &filters(args)))
}

/// The filters, as shown in the table's heading.
fn filters(args: &StatusArgs) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(s) = &args.stream_id {
        out.push(("stream", s.clone()));
    }
    if let Some(t) = &args.topic_id {
        out.push(("topic", t.clone()));
    }
    if let Some(s) = &args.state {
        out.push(("state", s.clone()));
    }
    out
}

/// Describes a transport failure (connection refused, timeout, ...) with its
/// causes. reqwest names only the URL, which carries no credentials.
fn transport_error(what: &str, base: &Url, e: &reqwest::Error) -> Failure {
    let mut causes = Vec::new();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        let text = s.to_string();
        if !causes.contains(&text) {
            causes.push(text);
        }
        source = s.source();
    }
    let detail = if causes.is_empty() {
        e.to_string()
    } else {
        causes.join(": ")
    };
    let hint = if e.is_connect() {
        format!("cannot connect to {base} ({detail}); is `sluice server` running there?")
    } else if e.is_timeout() {
        format!("{base} did not answer in time ({detail})")
    } else {
        format!("request to {base} failed ({detail})")
    };
    Failure::Server(format!("{what}: {hint}"))
}

/// The server's error body, `{"code": ..., "reason": ...}`, as text.
fn server_error(status: StatusCode, body: &str) -> String {
    match serde_json::from_str::<Value>(body) {
        Ok(v) => {
            let code = v["code"].as_str().unwrap_or("unknown");
            let reason = v["reason"].as_str().unwrap_or("no reason given");
            format!("HTTP {status}, {code}: {reason}")
        }
        Err(_) => format!("HTTP {status} with a body that is not JSON; is it a sluice server?"),
    }
}

async fn login(
    client: &reqwest::Client,
    base: &Url,
    url: &Url,
    creds: &Credentials,
) -> Result<String, Failure> {
    crate::login::login(client, url.clone(), &creds.username, &creds.password)
        .await
        .map_err(|e| match e {
            LoginError::Transport(e) => transport_error("login failed", base, &e),
            LoginError::Refused {
                status,
                body,
                rejected,
            } => {
                let detail = server_error(status, &body);
                Failure::Server(if rejected {
                    format!(
                        "login to {base} failed: invalid credentials for user {:?} ({detail})",
                        creds.username
                    )
                } else {
                    format!("login to {base} failed ({detail})")
                })
            }
            LoginError::NotJson { status } => Failure::Server(format!(
                "login to {base} answered HTTP {status} with a body that is not JSON; is it a sluice server?"
            )),
            LoginError::NoToken | LoginError::BadUrl(_) => Failure::Server(format!(
                "login to {base} answered without an access token; is it a sluice server?"
            )),
        })
}

async fn fetch_status(
    client: &reqwest::Client,
    base: &Url,
    url: &Url,
    token: &str,
    route: &str,
) -> Result<String, Failure> {
    let what = format!("{route} failed");
    let what = what.as_str();
    let response = client
        .get(url.clone())
        .bearer_auth(token)
        .send()
        .await
        .map_err(|e| transport_error(what, base, &e))?;
    let status = response.status();
    let text = response
        .text()
        .await
        .map_err(|e| transport_error(what, base, &e))?;
    if status == StatusCode::UNAUTHORIZED {
        return Err(Failure::Server(format!(
            "{what}: {base} refused the access token it just issued ({})",
            server_error(status, &text)
        )));
    }
    if !status.is_success() {
        return Err(Failure::Server(format!(
            "{what}: {}",
            server_error(status, &text)
        )));
    }
    Ok(text)
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

/// One line, at most `width` characters (an ellipsis marks a cut).
fn truncate(text: &str, width: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= width {
        return flat;
    }
    let mut cut: String = flat.chars().take(width.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn render(status: &PurgeStatus, base: &Url, filters: &[(&str, String)]) -> String {
    let s = &status.summary;
    let r = &s.reconciler;
    let mut out = String::new();
    let filter_text = if filters.is_empty() {
        String::new()
    } else {
        let parts: Vec<String> = filters.iter().map(|(k, v)| format!("{k} {v}")).collect();
        format!(" ({})", parts.join(", "))
    };
    let _ = writeln!(out, "purge status of {base}{filter_text}");
    // The server's state order first, then any state this build does not know.
    let mut states: Vec<String> = STATES
        .iter()
        .map(|name| format!("{name} {}", s.states.get(*name).copied().unwrap_or(0)))
        .collect();
    states.extend(
        s.states
            .iter()
            .filter(|(name, _)| !STATES.contains(&name.as_str()))
            .map(|(name, n)| format!("{name} {n}")),
    );
    let _ = writeln!(out, "partitions: {} ({})", s.partitions, states.join(", "));
    let _ = writeln!(out, "stuck: {}  degraded: {}", s.stuck, s.degraded);
    let last = r
        .last_pass_duration_ms
        .map_or_else(|| "-".to_string(), |ms| format!("{ms:.3} ms"));
    let _ = writeln!(
        out,
        "reconciler: {} passes, last pass {last}, {} pending, {} attempts, {} failures, period {} ms",
        r.passes, r.pending, r.attempts, r.failures, r.period_ms
    );
    out.push('\n');
    if status.partitions.is_empty() {
        out.push_str("(no partitions match)");
        return out;
    }

    let header = [
        "STREAM",
        "TOPIC",
        "PARTITION",
        "COMMITTED_GEN",
        "OBLIGATION_GEN",
        "STATE",
        "ATTEMPTS",
        "NEXT_ATTEMPT_IN_MS",
        "STUCK",
        "DEGRADED",
        "LAST_ERROR",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for p in &status.partitions {
        let o = p.obligation.as_ref();
        rows.push(vec![
            p.stream_id.to_string(),
            p.topic_id.to_string(),
            p.partition_id.to_string(),
            p.committed_generation.to_string(),
            o.map_or_else(|| "-".to_string(), |o| o.generation.to_string()),
            o.map_or_else(|| "none".to_string(), |o| o.state.clone()),
            o.map_or_else(|| "-".to_string(), |o| o.attempts.to_string()),
            o.and_then(|o| o.next_attempt_in_ms)
                .map_or_else(|| "-".to_string(), |ms| ms.to_string()),
            yes_no(o.is_some_and(|o| o.stuck)).to_string(),
            yes_no(p.degraded || o.is_some_and(|o| o.degraded)).to_string(),
            o.and_then(|o| o.last_error.as_deref())
                .map_or_else(|| "-".to_string(), |e| truncate(e, LAST_ERROR_WIDTH)),
        ]);
    }
    out.push_str(&table(&rows));
    out
}

/// Rows as aligned columns (two spaces apart; the last column unpadded).
fn table(rows: &[Vec<String>]) -> String {
    let mut widths = vec![0usize; rows.first().map_or(0, Vec::len)];
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let lines: Vec<String> = rows
        .iter()
        .map(|row| {
            let mut line = String::new();
            for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
                if i + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    let pad = w - cell.chars().count();
                    line.push_str(cell);
                    line.push_str(&" ".repeat(pad + 2));
                }
            }
            line
        })
        .collect();
    lines.join("\n")
}

/// The state, with what a remote obligation is about: an upload's segment,
/// a deletion round's objects left and the dead generations it must list.
fn state_detail(o: &sluice_server::http::obligations::ObligationEntry) -> String {
    let mut detail = Vec::new();
    if let Some(base) = o.segment_base {
        detail.push(format!("segment {base}"));
    }
    if let Some(keys) = o.remote_keys {
        detail.push(format!("{keys} objects"));
    }
    if let Some(dead) = o.dead_generations.as_ref().filter(|d| !d.is_empty()) {
        let dead: Vec<String> = dead.iter().map(u64::to_string).collect();
        detail.push(format!("dead generations {}", dead.join(",")));
    }
    if detail.is_empty() {
        o.state.clone()
    } else {
        format!("{} ({})", o.state, detail.join("; "))
    }
}

fn render_obligations(status: &ObligationsStatus, base: &Url, kind: Option<&str>) -> String {
    let s = &status.summary;
    let mut out = String::new();
    let filter_text = kind.map_or_else(String::new, |k| format!(" (kind {k})"));
    let _ = writeln!(out, "cleanup obligations of {base}{filter_text}");
    let kinds: Vec<String> = s.by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let _ = writeln!(
        out,
        "pending: {} ({})  stuck: {}  degraded: {}",
        s.pending,
        kinds.join(", "),
        s.stuck,
        s.degraded
    );
    out.push('\n');
    if status.obligations.is_empty() {
        out.push_str("(nothing pending)");
        return out;
    }
    let header = [
        "KIND",
        "RESOURCE",
        "STATE",
        "FAILURES",
        "NEXT_ATTEMPT_IN_MS",
        "STUCK",
        "DEGRADED",
        "LAST_ERROR",
    ];
    let mut rows: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for o in &status.obligations {
        let ids: Vec<String> = [Some(o.stream_id), o.topic_id, o.partition_id]
            .into_iter()
            .flatten()
            .map(|id| id.to_string())
            .collect();
        let group = o
            .group_id
            .map_or_else(String::new, |g| format!(" group {g}"));
        rows.push(vec![
            o.kind.clone(),
            format!("{} {}{group}", o.resource, ids.join("/")),
            state_detail(o),
            o.consecutive_failures.to_string(),
            o.next_attempt_in_ms.to_string(),
            yes_no(o.stuck).to_string(),
            yes_no(o.degraded).to_string(),
            o.last_error
                .as_deref()
                .map_or_else(|| "-".to_string(), |e| truncate(e, LAST_ERROR_WIDTH)),
        ]);
    }
    out.push_str(&table(&rows));
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use clap::Parser;
    use std::collections::BTreeMap;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        args: StatusArgs,
    }

    fn parse(argv: &[&str]) -> Result<StatusArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("status").chain(argv.iter().copied())).map(|c| c.args)
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn given_flags_and_environment_when_choosing_credentials_then_flags_then_sluice_then_iggy_then_default()
     {
        let env = env_of(&[
            ("SLUICE_ROOT_USERNAME", "admin"),
            ("SLUICE_ROOT_PASSWORD", "secret1"),
            ("IGGY_ROOT_USERNAME", "other"),
            ("IGGY_ROOT_PASSWORD", "other1"),
        ]);
        let flags = parse(&["--username", "ops", "--password", "pw1"]).unwrap();
        let from_flags = credentials(&flags, &env).unwrap();
        assert_eq!(from_flags.username, "ops");
        assert!(!format!("{from_flags:?}").contains("pw1"));
        let plain = parse(&["--with-default-root-credentials"]).unwrap();
        assert_eq!(credentials(&plain, &env).unwrap().username, "admin");
        let iggy_only = env_of(&[
            ("IGGY_ROOT_USERNAME", "other"),
            ("IGGY_ROOT_PASSWORD", "o1x"),
        ]);
        assert_eq!(credentials(&plain, &iggy_only).unwrap().username, "other");
        let default = credentials(&plain, &env_of(&[])).unwrap();
        assert_eq!(
            (default.username.as_str(), default.password.as_str()),
            ("iggy", "iggy")
        );
    }

    #[test]
    fn given_no_credentials_when_running_then_it_is_a_usage_error() {
        let args = parse(&[]).unwrap();
        assert!(matches!(
            credentials(&args, &env_of(&[])),
            Err(Failure::Usage(_))
        ));
        let half = env_of(&[("SLUICE_ROOT_USERNAME", "admin")]);
        assert!(matches!(credentials(&args, &half), Err(Failure::Usage(_))));
    }

    #[test]
    fn given_bad_flags_when_parsing_then_clap_refuses() {
        assert!(parse(&["--topic-id", "1"]).is_err());
        assert!(parse(&["--state", "bogus"]).is_err());
        assert!(parse(&["--username", "ops"]).is_err());
        assert!(
            parse(&[
                "--username",
                "ops",
                "--password",
                "x",
                "--with-default-root-credentials"
            ])
            .is_err()
        );
        assert!(
            parse(&[
                "--stream-id",
                "orders",
                "--topic-id",
                "events",
                "--state",
                "none"
            ])
            .is_ok()
        );
    }

    #[test]
    fn given_urls_when_parsing_then_only_plain_http_without_credentials_is_taken() {
        assert!(base_url("http://127.0.0.1:3000").is_ok());
        assert!(matches!(base_url("nonsense"), Err(Failure::Usage(_))));
        assert!(matches!(
            base_url("https://example.com"),
            Err(Failure::Usage(_))
        ));
        assert!(matches!(
            base_url("http://u:p@127.0.0.1:3000"),
            Err(Failure::Usage(_))
        ));
        let base = base_url("http://127.0.0.1:3000/prefix/").unwrap();
        assert_eq!(
            endpoint(&base, &["status", "purge"]).unwrap().as_str(),
            "http://127.0.0.1:3000/prefix/status/purge"
        );
        let base = base_url("http://127.0.0.1:3000").unwrap();
        assert_eq!(
            endpoint(&base, &["users", "login"]).unwrap().as_str(),
            "http://127.0.0.1:3000/users/login"
        );
    }

    #[test]
    fn given_a_long_multiline_error_when_truncating_then_it_is_one_short_line() {
        assert_eq!(truncate("short", 10), "short");
        let cut = truncate("first line\nsecond line that is long", 12);
        assert_eq!(cut, "first line …");
        assert_eq!(cut.chars().count(), 12);
        assert_eq!(truncate("ééééé", 3), "éé…");
    }

    #[test]
    fn given_a_status_answer_when_rendering_then_summary_and_one_row_per_partition() {
        let json = serde_json::json!({
            "summary": {
                "partitions": 2,
                "states": {"applied": 1, "dirs_synced": 0, "files_deleted": 0, "none": 0, "requested": 1},
                "stuck": 1, "degraded": 0,
                "reconciler": {"passes": 7, "attempts": 3, "failures": 2, "pending": 1,
                               "last_pass_duration_ms": 0.25, "period_ms": 1000}
            },
            "partitions": [
                {"stream_id": 0, "topic_id": 0, "partition_id": 0, "committed_generation": 1,
                 "degraded": false,
                 "obligation": {"generation": 1, "state": "applied", "attempts": 1,
                                "last_error": null, "next_attempt_in_ms": null,
                                "stuck": false, "degraded": false}},
                {"stream_id": 0, "topic_id": 0, "partition_id": 1, "committed_generation": 2,
                 "degraded": false,
                 "obligation": {"generation": 2, "state": "requested", "attempts": 2,
                                "last_error": "remove_file /data/streams/0/topics/0/partitions/1/00000000000000000000.log: EIO, injected fault",
                                "next_attempt_in_ms": 400, "stuck": true, "degraded": false}}
            ]
        });
        let status: PurgeStatus = serde_json::from_value(json).unwrap();
        let base = base_url("http://127.0.0.1:3000").unwrap();
        let text = render(&status, &base, &[("stream", "orders".to_string())]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "purge status of http://127.0.0.1:3000/ (stream orders)"
        );
        assert_eq!(
            lines[1],
            "partitions: 2 (requested 1, files_deleted 0, dirs_synced 0, applied 1, none 0)"
        );
        assert_eq!(lines[2], "stuck: 1  degraded: 0");
        assert!(lines[3].contains("7 passes, last pass 0.250 ms, 1 pending"));
        assert!(lines[5].starts_with("STREAM  TOPIC  PARTITION"));
        let applied: Vec<&str> = lines[6].split_whitespace().collect();
        assert_eq!(
            applied,
            [
                "0", "0", "0", "1", "1", "applied", "1", "-", "no", "no", "-"
            ]
        );
        let requested: Vec<&str> = lines[7].split_whitespace().collect();
        assert_eq!(
            &requested[..10],
            [
                "0",
                "0",
                "1",
                "2",
                "2",
                "requested",
                "2",
                "400",
                "yes",
                "no"
            ]
        );
        assert!(lines[7].ends_with('…'));
        // Columns line up: STATE starts at the same place in every row.
        let col = lines[5].find("STATE").unwrap();
        assert_eq!(&lines[6][col..col + 7], "applied");
        assert_eq!(&lines[7][col..col + 9], "requested");
    }

    #[test]
    fn given_an_obligations_answer_when_rendering_then_one_row_per_obligation() {
        let json = serde_json::json!({
            "summary": {"pending": 2, "stuck": 0, "degraded": 0,
                        "by_kind": {"delete": 1, "purge": 1},
                        "by_state": {"delete/requested": 1, "purge/files_deleted": 1}},
            "obligations": [
                {"kind": "purge", "resource": "partition", "stream_id": 0, "topic_id": 1,
                 "partition_id": 2, "group_id": null, "state": "files_deleted", "attempts": 1,
                 "consecutive_failures": 0, "last_error": null, "next_attempt_in_ms": 0,
                 "stuck": false, "degraded": false},
                {"kind": "delete", "resource": "group", "stream_id": 0, "topic_id": 1,
                 "partition_id": null, "group_id": 3, "state": "requested", "attempts": null,
                 "consecutive_failures": 2, "last_error": "sync_dir: EIO",
                 "next_attempt_in_ms": 400, "stuck": false, "degraded": false}
            ]
        });
        let status: ObligationsStatus = serde_json::from_value(json).unwrap();
        let base = base_url("http://127.0.0.1:3000").unwrap();
        let text = render_obligations(&status, &base, None);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "cleanup obligations of http://127.0.0.1:3000/");
        assert_eq!(
            lines[1],
            "pending: 2 (delete 1, purge 1)  stuck: 0  degraded: 0"
        );
        assert!(lines[3].starts_with("KIND"));
        assert!(
            lines[4].starts_with("purge   partition 0/1/2"),
            "{}",
            lines[4]
        );
        let group: Vec<&str> = lines[5].split_whitespace().collect();
        assert_eq!(
            group,
            [
                "delete",
                "group",
                "0/1",
                "group",
                "3",
                "requested",
                "2",
                "400",
                "no",
                "no",
                "sync_dir:",
                "EIO"
            ]
        );
        assert!(parse(&["--obligations", "--kind", "delete"]).is_ok());
        assert!(parse(&["--kind", "delete"]).is_err());
        assert!(parse(&["--obligations", "--stream-id", "0"]).is_err());
        assert!(parse(&["--obligations", "--kind", "bogus"]).is_err());
    }

    #[test]
    fn given_no_rows_when_rendering_then_it_says_so() {
        let json = serde_json::json!({
            "summary": {"partitions": 0, "states": {}, "stuck": 0, "degraded": 0,
                        "reconciler": {"passes": 0, "attempts": 0, "failures": 0, "pending": 0,
                                       "last_pass_duration_ms": null, "period_ms": 1000}},
            "partitions": []
        });
        let status: PurgeStatus = serde_json::from_value(json).unwrap();
        let base = base_url("http://127.0.0.1:3000").unwrap();
        let text = render(&status, &base, &[]);
        assert!(text.contains("last pass -"));
        assert!(text.ends_with("(no partitions match)"));
    }
}
